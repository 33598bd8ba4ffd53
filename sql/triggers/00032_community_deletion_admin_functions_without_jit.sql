-- The registration functions a service's migrations call run with JIT off.
--
-- Their catalog and jsonb queries are small, but the planner estimates 100
-- rows for each set-returning function (jsonb_array_elements over a child
-- table's paths, nested three deep in attach_child_table), so a plan's
-- estimate passed jit_above_cost and PostgreSQL compiled it with LLVM:
-- 0.4-0.6 s of CPU for each attach_child_table call, on a server with JIT
-- on (the default where PostgreSQL is built with LLVM), for a query that
-- runs in a millisecond. SET jit = off on the entry points covers every
-- query they run, the functions they call included. The fence's trigger
-- functions are left alone: a SET clause costs every call a GUC save and
-- restore, and their queries are planned with small estimates.

-- +goose Up
ALTER FUNCTION community_deletion.attach_child_table(regclass, regclass[], regclass[]) SET jit = off;
ALTER FUNCTION community_deletion.attach_community_write_fence(regclass, text, name) SET jit = off;
ALTER FUNCTION community_deletion.declare_reference(regclass, name[], regclass, name[], text) SET jit = off;
ALTER FUNCTION community_deletion.declare_tenant_table(regclass, name) SET jit = off;
ALTER FUNCTION community_deletion.detach_community_write_fence(regclass) SET jit = off;
SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down
ALTER FUNCTION community_deletion.attach_child_table(regclass, regclass[], regclass[]) RESET jit;
ALTER FUNCTION community_deletion.attach_community_write_fence(regclass, text, name) RESET jit;
ALTER FUNCTION community_deletion.declare_reference(regclass, name[], regclass, name[], text) RESET jit;
ALTER FUNCTION community_deletion.declare_tenant_table(regclass, name) RESET jit;
ALTER FUNCTION community_deletion.detach_community_write_fence(regclass) RESET jit;
SELECT community_deletion.community_deletion_seal_functions();
