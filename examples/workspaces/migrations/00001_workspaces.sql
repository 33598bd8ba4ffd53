-- The service as it was before it adopted community deletion: workspaces
-- are its tenants, and every tenant's row is keyed by workspace_id.

-- +goose Up
CREATE TABLE workspaces (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id uuid NOT NULL REFERENCES workspaces (id),
    name text NOT NULL,
    UNIQUE (workspace_id, id)
);

-- A comment belongs to a project of the same workspace.
CREATE TABLE comments (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id uuid NOT NULL,
    project_id uuid NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (workspace_id, project_id) REFERENCES projects (workspace_id, id)
);
CREATE INDEX comments_workspace_id_idx ON comments (workspace_id, id);

-- Kept for compliance after a workspace is gone, with its link cleared.
CREATE TABLE audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id uuid REFERENCES workspaces (id),
    action text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_workspace_id_idx ON audit_log (workspace_id, id);

-- Product analytics, in a schema of its own.
CREATE SCHEMA analytics;
CREATE TABLE analytics.events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id uuid NOT NULL REFERENCES workspaces (id),
    name text NOT NULL,
    properties jsonb NOT NULL DEFAULT '{}',
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_workspace_id_idx ON analytics.events (workspace_id, id);

-- +goose Down
DROP SCHEMA analytics CASCADE;
DROP TABLE audit_log, comments, projects, workspaces;
