-- The service as it was before it adopted community deletion, in the shape
-- of Trigger.dev's Prisma migrations (see README.md): organizations are its
-- tenants, keyed by a text cuid; names are quoted and mixed-case; only a
-- few tables carry "organizationId", and most reach an organization only
-- through foreign keys, two or three levels down, including Prisma's
-- implicit many-to-many tables ("_AToB", columns "A" and "B", no primary
-- key). Some references have no constraint at all, and deliveries go to a
-- daily range-partitioned table whose partitions the service creates at
-- runtime.

-- +goose Up
-- CreateEnum
CREATE TYPE "OrgMemberRole" AS ENUM ('ADMIN', 'MEMBER');
CREATE TYPE "RuntimeEnvironmentType" AS ENUM ('PRODUCTION', 'STAGING', 'DEVELOPMENT', 'PREVIEW');
CREATE TYPE "TaskRunStatus" AS ENUM ('PENDING', 'EXECUTING', 'COMPLETED_SUCCESSFULLY', 'COMPLETED_WITH_ERRORS', 'CANCELED', 'SYSTEM_FAILURE');
CREATE TYPE "TaskRunAttemptStatus" AS ENUM ('PENDING', 'EXECUTING', 'PAUSED', 'FAILED', 'CANCELED', 'COMPLETED');
CREATE TYPE "BatchTaskRunStatus" AS ENUM ('PENDING', 'PROCESSING', 'COMPLETED', 'PARTIAL_FAILED', 'ABORTED');
CREATE TYPE "BulkActionType" AS ENUM ('CANCEL', 'REPLAY');
CREATE TYPE "BulkActionStatus" AS ENUM ('PENDING', 'COMPLETED', 'ABORTED');
CREATE TYPE "BulkActionItemStatus" AS ENUM ('PENDING', 'COMPLETED', 'FAILED');
CREATE TYPE "WebhookEndpointStatus" AS ENUM ('ACTIVE', 'INACTIVE', 'DELETING');
CREATE TYPE "WebhookDeliveryStatus" AS ENUM ('PENDING', 'PROCESSING', 'SUCCEEDED', 'FAILED');

-- CreateTable: a person, shared by every organization they belong to.
CREATE TABLE "User" (
    "id" TEXT NOT NULL,
    "email" TEXT NOT NULL,
    "name" TEXT,
    "admin" BOOLEAN NOT NULL DEFAULT false,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "User_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "User_email_key" ON "User"("email");

-- CreateTable: the tenant.
CREATE TABLE "Organization" (
    "id" TEXT NOT NULL,
    "slug" TEXT NOT NULL,
    "title" TEXT NOT NULL,
    "maximumConcurrencyLimit" INTEGER NOT NULL DEFAULT 10,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Organization_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "Organization_slug_key" ON "Organization"("slug");

-- CreateTable
CREATE TABLE "OrgMember" (
    "id" TEXT NOT NULL,
    "organizationId" TEXT NOT NULL,
    "userId" TEXT NOT NULL,
    "role" "OrgMemberRole" NOT NULL DEFAULT 'MEMBER',
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "OrgMember_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "OrgMember_organizationId_userId_key" ON "OrgMember"("organizationId", "userId");

-- CreateTable
CREATE TABLE "Project" (
    "id" TEXT NOT NULL,
    "slug" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "externalRef" TEXT NOT NULL,
    "organizationId" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Project_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "Project_slug_key" ON "Project"("slug");
CREATE UNIQUE INDEX "Project_externalRef_key" ON "Project"("externalRef");

-- CreateTable
CREATE TABLE "RuntimeEnvironment" (
    "id" TEXT NOT NULL,
    "slug" TEXT NOT NULL,
    "apiKey" TEXT NOT NULL,
    "type" "RuntimeEnvironmentType" NOT NULL DEFAULT 'DEVELOPMENT',
    "organizationId" TEXT NOT NULL,
    "projectId" TEXT NOT NULL,
    "maximumConcurrencyLimit" INTEGER NOT NULL DEFAULT 5,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "RuntimeEnvironment_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "RuntimeEnvironment_apiKey_key" ON "RuntimeEnvironment"("apiKey");
CREATE UNIQUE INDEX "RuntimeEnvironment_projectId_slug_key" ON "RuntimeEnvironment"("projectId", "slug");
CREATE INDEX "RuntimeEnvironment_organizationId_idx" ON "RuntimeEnvironment"("organizationId");

-- CreateTable: a deployed version; no organization column.
CREATE TABLE "BackgroundWorker" (
    "id" TEXT NOT NULL,
    "friendlyId" TEXT NOT NULL,
    "contentHash" TEXT NOT NULL,
    "version" TEXT NOT NULL,
    "metadata" JSONB NOT NULL,
    "projectId" TEXT NOT NULL,
    "runtimeEnvironmentId" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "BackgroundWorker_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "BackgroundWorker_friendlyId_key" ON "BackgroundWorker"("friendlyId");
CREATE UNIQUE INDEX "BackgroundWorker_projectId_runtimeEnvironmentId_version_key" ON "BackgroundWorker"("projectId", "runtimeEnvironmentId", "version");

-- CreateTable
CREATE TABLE "TaskQueue" (
    "id" TEXT NOT NULL,
    "friendlyId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "projectId" TEXT NOT NULL,
    "runtimeEnvironmentId" TEXT NOT NULL,
    "concurrencyLimit" INTEGER,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "TaskQueue_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "TaskQueue_friendlyId_key" ON "TaskQueue"("friendlyId");
CREATE UNIQUE INDEX "TaskQueue_runtimeEnvironmentId_name_key" ON "TaskQueue"("runtimeEnvironmentId", "name");

-- CreateTable: Prisma's implicit many-to-many, without a primary key.
CREATE TABLE "_BackgroundWorkerToTaskQueue" ("A" TEXT NOT NULL, "B" TEXT NOT NULL);
CREATE UNIQUE INDEX "_BackgroundWorkerToTaskQueue_AB_unique" ON "_BackgroundWorkerToTaskQueue"("A", "B");
CREATE INDEX "_BackgroundWorkerToTaskQueue_B_index" ON "_BackgroundWorkerToTaskQueue"("B");

-- CreateTable: payloads over a size live in the object store, named here.
CREATE TABLE "TaskRun" (
    "id" TEXT NOT NULL,
    "number" INTEGER NOT NULL DEFAULT 0,
    "friendlyId" TEXT NOT NULL,
    "status" "TaskRunStatus" NOT NULL DEFAULT 'PENDING',
    "taskIdentifier" TEXT NOT NULL,
    "payload" TEXT NOT NULL,
    "payloadType" TEXT NOT NULL DEFAULT 'application/json',
    "traceId" TEXT NOT NULL,
    "spanId" TEXT NOT NULL,
    "runtimeEnvironmentId" TEXT NOT NULL,
    "projectId" TEXT NOT NULL,
    "queue" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "TaskRun_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "TaskRun_friendlyId_key" ON "TaskRun"("friendlyId");
CREATE INDEX "TaskRun_runtimeEnvironmentId_createdAt_idx" ON "TaskRun"("runtimeEnvironmentId", "createdAt" DESC);

-- CreateTable
CREATE TABLE "TaskRunTag" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "friendlyId" TEXT NOT NULL,
    "projectId" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "TaskRunTag_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "TaskRunTag_friendlyId_key" ON "TaskRunTag"("friendlyId");
CREATE UNIQUE INDEX "TaskRunTag_projectId_name_key" ON "TaskRunTag"("projectId", "name");

-- CreateTable: implicit many-to-many again.
CREATE TABLE "_TaskRunToTaskRunTag" (
    "A" TEXT NOT NULL,
    "B" TEXT NOT NULL
);
CREATE UNIQUE INDEX "_TaskRunToTaskRunTag_AB_unique" ON "_TaskRunToTaskRunTag"("A", "B");
CREATE INDEX "_TaskRunToTaskRunTag_B_index" ON "_TaskRunToTaskRunTag"("B");

-- CreateTable: two levels below an organization column.
CREATE TABLE "TaskRunAttempt" (
    "id" TEXT NOT NULL,
    "number" INTEGER NOT NULL DEFAULT 0,
    "friendlyId" TEXT NOT NULL,
    "taskRunId" TEXT NOT NULL,
    "backgroundWorkerId" TEXT NOT NULL,
    "queueId" TEXT NOT NULL,
    "status" "TaskRunAttemptStatus" NOT NULL DEFAULT 'PENDING',
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "TaskRunAttempt_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "TaskRunAttempt_friendlyId_key" ON "TaskRunAttempt"("friendlyId");
CREATE UNIQUE INDEX "TaskRunAttempt_taskRunId_number_key" ON "TaskRunAttempt"("taskRunId", "number");

-- CreateTable: "runtimeEnvironmentId" with no constraint (Trigger.dev
-- dropped its foreign key).
CREATE TABLE "BatchTaskRun" (
    "id" TEXT NOT NULL,
    "friendlyId" TEXT NOT NULL,
    "idempotencyKey" TEXT,
    "runtimeEnvironmentId" TEXT NOT NULL,
    "status" "BatchTaskRunStatus" NOT NULL DEFAULT 'PENDING',
    "runCount" INTEGER NOT NULL DEFAULT 0,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "BatchTaskRun_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "BatchTaskRun_friendlyId_key" ON "BatchTaskRun"("friendlyId");
CREATE UNIQUE INDEX "BatchTaskRun_runtimeEnvironmentId_idempotencyKey_key" ON "BatchTaskRun"("runtimeEnvironmentId", "idempotencyKey");

-- CreateTable: reached through a table that has no constraint to its own parent.
CREATE TABLE "BatchTaskRunItem" (
    "id" TEXT NOT NULL,
    "batchTaskRunId" TEXT NOT NULL,
    "taskRunId" TEXT NOT NULL,
    "taskRunAttemptId" TEXT,
    "status" "BatchTaskRunStatus" NOT NULL DEFAULT 'PENDING',
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "BatchTaskRunItem_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "BatchTaskRunItem_batchTaskRunId_taskRunId_key" ON "BatchTaskRunItem"("batchTaskRunId", "taskRunId");

-- CreateTable
CREATE TABLE "BulkActionGroup" (
    "id" TEXT NOT NULL,
    "friendlyId" TEXT NOT NULL,
    "projectId" TEXT NOT NULL,
    "type" "BulkActionType" NOT NULL,
    "status" "BulkActionStatus" NOT NULL DEFAULT 'PENDING',
    "totalCount" INTEGER NOT NULL DEFAULT 0,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "BulkActionGroup_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "BulkActionGroup_friendlyId_key" ON "BulkActionGroup"("friendlyId");

-- CreateTable: maps a bulk action to the runs it acts on; no organization
-- column and no foreign key at all (Trigger.dev dropped all three).
CREATE TABLE "BulkActionItem" (
    "id" TEXT NOT NULL,
    "friendlyId" TEXT,
    "groupId" TEXT NOT NULL,
    "type" "BulkActionType" NOT NULL,
    "status" "BulkActionItemStatus" NOT NULL DEFAULT 'PENDING',
    "sourceRunId" TEXT NOT NULL,
    "destinationRunId" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "BulkActionItem_pkey" PRIMARY KEY ("id")
);

-- CreateTable: no foreign keys.
CREATE TABLE "WebhookEndpoint" (
    "id" TEXT NOT NULL,
    "friendlyId" TEXT NOT NULL,
    "organizationId" TEXT NOT NULL,
    "projectId" TEXT NOT NULL,
    "runtimeEnvironmentId" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "status" "WebhookEndpointStatus" NOT NULL DEFAULT 'ACTIVE',
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "WebhookEndpoint_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "WebhookEndpoint_friendlyId_key" ON "WebhookEndpoint"("friendlyId");

-- CreateTable: daily range partitions, made at runtime by
-- create_webhook_delivery_partition below; no default partition, so a
-- delivery for a day without one is refused.
CREATE TABLE "WebhookDelivery" (
    "id" TEXT NOT NULL,
    "friendlyId" TEXT NOT NULL,
    "webhookEndpointId" TEXT NOT NULL,
    "organizationId" TEXT NOT NULL,
    "projectId" TEXT NOT NULL,
    "runtimeEnvironmentId" TEXT NOT NULL,
    "externalDeliveryId" TEXT NOT NULL,
    "runId" TEXT,
    "status" "WebhookDeliveryStatus" NOT NULL DEFAULT 'PENDING',
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "WebhookDelivery_pkey" PRIMARY KEY ("id","createdAt")
) PARTITION BY RANGE ("createdAt");
CREATE INDEX "WebhookDelivery_webhookEndpointId_createdAt_idx" ON "WebhookDelivery"("webhookEndpointId", "createdAt" DESC);

-- AddForeignKey
ALTER TABLE "OrgMember" ADD CONSTRAINT "OrgMember_organizationId_fkey" FOREIGN KEY ("organizationId") REFERENCES "Organization"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "OrgMember" ADD CONSTRAINT "OrgMember_userId_fkey" FOREIGN KEY ("userId") REFERENCES "User"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "Project" ADD CONSTRAINT "Project_organizationId_fkey" FOREIGN KEY ("organizationId") REFERENCES "Organization"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "RuntimeEnvironment" ADD CONSTRAINT "RuntimeEnvironment_organizationId_fkey" FOREIGN KEY ("organizationId") REFERENCES "Organization"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "RuntimeEnvironment" ADD CONSTRAINT "RuntimeEnvironment_projectId_fkey" FOREIGN KEY ("projectId") REFERENCES "Project"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "BackgroundWorker" ADD CONSTRAINT "BackgroundWorker_projectId_fkey" FOREIGN KEY ("projectId") REFERENCES "Project"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "BackgroundWorker" ADD CONSTRAINT "BackgroundWorker_runtimeEnvironmentId_fkey" FOREIGN KEY ("runtimeEnvironmentId") REFERENCES "RuntimeEnvironment"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "TaskQueue" ADD CONSTRAINT "TaskQueue_projectId_fkey" FOREIGN KEY ("projectId") REFERENCES "Project"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "TaskQueue" ADD CONSTRAINT "TaskQueue_runtimeEnvironmentId_fkey" FOREIGN KEY ("runtimeEnvironmentId") REFERENCES "RuntimeEnvironment"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "_BackgroundWorkerToTaskQueue" ADD CONSTRAINT "_BackgroundWorkerToTaskQueue_A_fkey" FOREIGN KEY ("A") REFERENCES "BackgroundWorker"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "_BackgroundWorkerToTaskQueue" ADD CONSTRAINT "_BackgroundWorkerToTaskQueue_B_fkey" FOREIGN KEY ("B") REFERENCES "TaskQueue"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "TaskRun" ADD CONSTRAINT "TaskRun_runtimeEnvironmentId_fkey" FOREIGN KEY ("runtimeEnvironmentId") REFERENCES "RuntimeEnvironment"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "TaskRun" ADD CONSTRAINT "TaskRun_projectId_fkey" FOREIGN KEY ("projectId") REFERENCES "Project"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "TaskRunTag" ADD CONSTRAINT "TaskRunTag_projectId_fkey" FOREIGN KEY ("projectId") REFERENCES "Project"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "_TaskRunToTaskRunTag" ADD CONSTRAINT "_TaskRunToTaskRunTag_A_fkey" FOREIGN KEY ("A") REFERENCES "TaskRun"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "_TaskRunToTaskRunTag" ADD CONSTRAINT "_TaskRunToTaskRunTag_B_fkey" FOREIGN KEY ("B") REFERENCES "TaskRunTag"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "TaskRunAttempt" ADD CONSTRAINT "TaskRunAttempt_taskRunId_fkey" FOREIGN KEY ("taskRunId") REFERENCES "TaskRun"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "TaskRunAttempt" ADD CONSTRAINT "TaskRunAttempt_backgroundWorkerId_fkey" FOREIGN KEY ("backgroundWorkerId") REFERENCES "BackgroundWorker"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "TaskRunAttempt" ADD CONSTRAINT "TaskRunAttempt_queueId_fkey" FOREIGN KEY ("queueId") REFERENCES "TaskQueue"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "BatchTaskRunItem" ADD CONSTRAINT "BatchTaskRunItem_batchTaskRunId_fkey" FOREIGN KEY ("batchTaskRunId") REFERENCES "BatchTaskRun"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "BatchTaskRunItem" ADD CONSTRAINT "BatchTaskRunItem_taskRunId_fkey" FOREIGN KEY ("taskRunId") REFERENCES "TaskRun"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "BatchTaskRunItem" ADD CONSTRAINT "BatchTaskRunItem_taskRunAttemptId_fkey" FOREIGN KEY ("taskRunAttemptId") REFERENCES "TaskRunAttempt"("id") ON DELETE SET NULL ON UPDATE CASCADE;
ALTER TABLE "BulkActionGroup" ADD CONSTRAINT "BulkActionGroup_projectId_fkey" FOREIGN KEY ("projectId") REFERENCES "Project"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- The service's own partition manager, as Trigger.dev's webhook engine
-- runs it from a cron: one partition per UTC day, named
-- "WebhookDelivery_YYYY_MM_DD". It runs as its owner, the role that runs
-- the migrations (creating a partition takes owning the parent), so the
-- application's login needs only EXECUTE on it; a name taken by anything
-- but that day's partition is refused.
-- +goose StatementBegin
CREATE FUNCTION create_webhook_delivery_partition(day date) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    partition text := 'WebhookDelivery_' || to_char(day, 'YYYY_MM_DD');
    existing regclass;
BEGIN
    IF day IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'webhook delivery partition refused: give the day it is for';
    END IF;
    existing := to_regclass(format('public.%I', partition));
    IF existing IS NULL THEN
        EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I FOR VALUES FROM (%L) TO (%L)',
                       partition, 'WebhookDelivery', day::timestamp, (day + 1)::timestamp);
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = existing AND i.inhparent = 'public."WebhookDelivery"'::regclass
                   AND pg_get_expr((SELECT c.relpartbound FROM pg_class c WHERE c.oid = existing), existing)
                       = format('FOR VALUES FROM (%L) TO (%L)', day::timestamp, (day + 1)::timestamp)) THEN
        RAISE EXCEPTION USING ERRCODE = '42P07',
            MESSAGE = format('webhook delivery partition for %s refused: %s exists but is not that day''s partition of "WebhookDelivery"; rename or drop it', day, existing);
    END IF;
    RETURN false;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION create_webhook_delivery_partition(date) FROM PUBLIC;

-- +goose Down
DROP FUNCTION create_webhook_delivery_partition(date);
DROP TABLE "WebhookDelivery", "WebhookEndpoint", "BulkActionItem", "BulkActionGroup", "BatchTaskRunItem", "BatchTaskRun",
    "TaskRunAttempt", "_TaskRunToTaskRunTag", "TaskRunTag", "TaskRun", "_BackgroundWorkerToTaskQueue", "TaskQueue",
    "BackgroundWorker", "RuntimeEnvironment", "Project", "OrgMember", "Organization", "User";
DROP TYPE "WebhookDeliveryStatus", "WebhookEndpointStatus", "BulkActionItemStatus", "BulkActionStatus", "BulkActionType",
    "BatchTaskRunStatus", "TaskRunAttemptStatus", "TaskRunStatus", "RuntimeEnvironmentType", "OrgMemberRole";
