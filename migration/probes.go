package migration

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// check is one catalog fact: an object that exists in the schema the
// migrations run in (current_schema()) or, from migration 00021 on, in
// schema community_deletion, where that migration moves every object.
type check struct {
	// what names the object in messages: "table communities".
	what string
	// query returns one boolean, true when the object exists.
	query string
	args  []any
}

// table checks that a table exists.
func table(name string) check {
	return check{
		what:  "table " + name,
		query: "SELECT coalesce(to_regclass(format('%I.%I', current_schema(), $1::text)), to_regclass(format('community_deletion.%I', $1::text))) IS NOT NULL",
		args:  []any{name},
	}
}

// function checks that a function with this signature exists, for example
// "community_deletion_lock_key(uuid)".
func function(signature string) check {
	return check{
		what:  "function " + signature,
		query: "SELECT coalesce(to_regprocedure(format('%I.%s', current_schema(), $1::text)), to_regprocedure(format('community_deletion.%s', $1::text))) IS NOT NULL",
		args:  []any{signature},
	}
}

// functionBody checks that a function's body contains text: the probe of a
// migration that replaces a function body (CREATE OR REPLACE) rather than
// creating a new object.
func functionBody(signature, text string) check {
	return check{
		what: fmt.Sprintf("function %s containing %q", signature, text),
		query: `SELECT EXISTS (SELECT 1 FROM pg_proc
			WHERE oid = coalesce(to_regprocedure(format('%I.%s', current_schema(), $1::text)), to_regprocedure(format('community_deletion.%s', $1::text)))
			  AND strpos(prosrc, $2::text) > 0)`,
		args: []any{signature, text},
	}
}

// functionOf checks that a function exists under one of signatures: the
// probe of an object a later migration re-created under another signature
// (attach_community_write_fence gained its tenant_key in 00022).
func functionOf(signatures ...string) check {
	return check{
		what: "function " + strings.Join(signatures, " or "),
		query: `SELECT EXISTS (SELECT 1 FROM unnest($1::text[]) s
			WHERE coalesce(to_regprocedure(format('%I.%s', current_schema(), s)), to_regprocedure(format('community_deletion.%s', s))) IS NOT NULL)`,
		args: []any{signatures},
	}
}

// functionBodyOf checks that the function of one of signatures exists and
// its body contains text.
func functionBodyOf(text string, signatures ...string) check {
	return check{
		what: fmt.Sprintf("function %s containing %q", strings.Join(signatures, " or "), text),
		query: `SELECT EXISTS (SELECT 1 FROM unnest($1::text[]) s JOIN pg_proc
			ON pg_proc.oid = coalesce(to_regprocedure(format('%I.%s', current_schema(), s)), to_regprocedure(format('community_deletion.%s', s)))
			WHERE strpos(prosrc, $2::text) > 0)`,
		args: []any{signatures, text},
	}
}

// functionSetting checks that a function carries a configuration setting
// (SET name = value, as pg_proc.proconfig lists it: "jit=off"): the probe
// of a migration that only alters a function's settings.
func functionSetting(signature, setting string) check {
	return check{
		what: fmt.Sprintf("function %s with %s", signature, setting),
		query: `SELECT EXISTS (SELECT 1 FROM pg_proc
			WHERE oid = coalesce(to_regprocedure(format('%I.%s', current_schema(), $1::text)), to_regprocedure(format('community_deletion.%s', $1::text)))
			  AND $2::text = ANY (proconfig))`,
		args: []any{signature, setting},
	}
}

// functionComment checks that a function's comment contains text: the
// probe of a migration that documents a function rather than creating one.
func functionComment(signature, text string) check {
	return check{
		what: fmt.Sprintf("function %s commented with %q", signature, text),
		query: `SELECT coalesce(strpos(obj_description(
			coalesce(to_regprocedure(format('%I.%s', current_schema(), $1::text)), to_regprocedure(format('community_deletion.%s', $1::text))), 'pg_proc'), $2::text) > 0, false)`,
		args: []any{signature, text},
	}
}

// trigger checks that a trigger exists on a table.
func trigger(tableName, name string) check {
	return check{
		what: fmt.Sprintf("trigger %s on %s", name, tableName),
		query: `SELECT EXISTS (SELECT 1 FROM pg_trigger
			WHERE NOT tgisinternal AND tgname = $2::text
			  AND tgrelid = coalesce(to_regclass(format('%I.%I', current_schema(), $1::text)), to_regclass(format('community_deletion.%I', $1::text))))`,
		args: []any{tableName, name},
	}
}

// legacyProbes proves, per migration version, that this project's migration
// of that version is applied: the checks name objects the version's Up
// creates (or, for a replaced function, text only its body has), and that
// every later version keeps. AdoptLegacyVersions copies a version out of
// LegacyVersionTable only when its probe passes.
//
// Every migration file needs an entry. Adding a migration: list one or more
// objects it creates, then run `go test ./migration/ -run Probe`.
// TestLegacyProbesCoverEveryMigration names a file without a probe;
// TestLegacyProbesMatchEachVersion migrates one version at a time, up and
// down, and fails when a probe passes before its version is applied or stops
// passing after it (say, because a later migration dropped or replaced the
// object: then probe something that stays, or the later version's text).
var legacyProbes = map[int64][]check{
	1: { // 00001_communities.sql
		table("communities"),
		table("community_scoped_tables"),
	},
	2: { // 00002_community_deletion_requests.sql
		table("community_deletion_requests"),
		table("community_deletion_approvals"),
		table("community_deletion_checkpoints"),
	},
	3: { // 00003_community_deletion_execution.sql
		table("community_deletion_executor_heartbeats"),
		table("community_serving_write_leases"),
		table("community_deletion_manifest_keys"),
		table("storage_taxonomy_sweeps"),
	},
	4: { // 00004_community_deletion_locks.sql
		function("community_deletion_lock_key(uuid)"),
		function("community_schema_destruction_lock_key()"),
		function("community_write_allowed(uuid)"),
		function("assert_community_write_allowed(uuid)"),
	},
	5: { // 00005_community_write_fence.sql
		function("enforce_community_write_fence()"),
		functionOf("attach_community_write_fence(regclass,text)", "attach_community_write_fence(regclass,text,name)"),
		function("community_deletion_catalog_drift()"),
	},
	6: { // 00006_community_tombstone.sql
		trigger("communities", "communities_tombstone_guard"),
		trigger("communities", "communities_truncate_guard"),
	},
	7: { // 00007_community_deletion_guards.sql
		trigger("community_deletion_requests", "community_deletion_requests_guard"),
		trigger("community_deletion_approvals", "community_deletion_approvals_guard"),
		trigger("community_deletion_manifest_keys", "community_deletion_manifest_keys_guard"),
		trigger("community_serving_write_leases", "community_serving_write_leases_guard"),
	},
	8: { // 00008_community_write_fence_fast_path.sql
		functionBody("enforce_community_write_fence()", "pg_try_advisory_xact_lock_shared"),
	},
	9: { // 00009_community_deletion_roles.sql
		table("community_deletion_created_roles"),
	},
	10: { // 00010_community_deletion_least_privilege.sql
		table("community_deletion_settings"),
		table("community_deletion_purge_progress"),
		table("community_deletion_step_authorizations"),
	},
	11: { // 00011_community_deletion_least_privilege.sql
		function("community_deletion_seal_functions()"),
		trigger("community_deletion_checkpoints", "community_deletion_checkpoints_guard"),
	},
	12: { // 00012_community_deletion_stages.sql
		function("community_deletion_stage_order()"),
		function("community_deletion_stage_runnable(text)"),
	},
	13: { // 00013_community_deletion_purge_pressure.sql
		function("community_deletion_purge_pressure()"),
	},
	14: { // 00014_community_deletion_refusal_marker.sql
		functionComment("assert_community_write_allowed(uuid)", "community_write_fence"),
	},
	15: { // 00015_community_deletion_trust_first_slice.sql
		trigger("communities", "communities_tombstone_proof"),
	},
	16: { // 00016_community_deletion_grace_and_protection.sql
		table("community_deletion_protection_events"),
		function("community_deletion_protection_state(uuid)"),
		trigger("communities", "communities_grace_fence_guard"),
	},
	17: { // 00017_community_deletion_receipts.sql
		table("community_deletion_receipts"),
		function("community_deletion_receipt_chain_head()"),
		trigger("community_deletion_requests", "community_deletion_requests_receipt_required"),
	},
	18: { // 00018_community_deletion_registry_hardening.sql
		functionBodyOf("it is a temporary table",
			"community_deletion_register_table(regclass,text)", "community_deletion_register_table(regclass,text,name)"),
	},
	19: { // 00019_community_deletion_storage_layout.sql
		table("community_deletion_storage_layout"),
		trigger("community_deletion_storage_layout", "community_deletion_storage_layout_guard"),
		functionBody("enforce_community_deletion_request_guard()", "re-inventory"),
	},
	20: { // 00020_community_deletion_drift_sees_more.sql
		table("community_deletion_control_digests"),
		function("community_deletion_control_digest(text)"),
		function("community_deletion_guard_digest(text,text)"),
		functionBodyOf("function_planted", "community_deletion_catalog_drift()", "community_deletion_catalog_drift_of_tables()"),
	},
	21: { // 00021_community_deletion_own_schema.sql
		table("community_deletion_install"),
		function("community_deletion_tenant_schema(oid)"),
		function("enforce_community_truncate_fence()"),
	},
	22: { // 00022_community_deletion_truncate_fence_repair.sql
		table("community_deletion_truncate_fence_repairs"),
	},
	23: { // 00023_community_deletion_tenant_model.sql
		table("community_deletion_tenant_table"),
		table("community_deletion_excluded_tables"),
		function("attach_community_write_fence(regclass,text,name)"),
		function("declare_tenant_table(regclass,name)"),
		function("enforce_community_kept_row_fence()"),
	},
	24: { // 00024_community_deletion_schema_usage_drift.sql
		functionBodyOf("schema_usage_missing", "community_deletion_catalog_drift()", "community_deletion_catalog_drift_of_tables()"),
	},
	25: { // 00025_community_deletion_tenant_keys.sql
		table("community_deletion_references"),
	},
	26: { // 00026_community_deletion_real_schemas.sql (00027 keeps these)
		function("community_deletion_tenant_uuid(text)"),
		trigger("communities", "communities_tenant_key_guard"),
	},
	27: { // 00027_community_deletion_bound_fences.sql
		function("community_deletion_fence_bound(oid,name,jsonb)"),
		function("community_deletion_path_keys(jsonb,jsonb)"),
	},
	28: { // 00028_community_deletion_keys_in_tables.sql
		function("community_deletion_drop_tenant_objects(uuid)"),
		trigger("communities", "communities_tenant_objects_proof"),
	},
	29: { // 00029_community_deletion_receipt_anchors.sql
		table("community_deletion_receipt_keys"),
		trigger("community_deletion_receipt_keys", "community_deletion_receipt_keys_guard"),
		functionBody("enforce_community_deletion_receipt_guard()", "communitydeletion.key-rotation/v1"),
	},
	30: { // 00030_community_deletion_near_free_fence.sql
		function("community_deletion_settle_fence_marker()"),
		trigger("communities", "communities_fence_marker_arm"),
	},
	31: { // 00031_community_deletion_trust_closes.sql
		table("community_deletion_exclusion_events"),
		table("community_deletion_trusted_code"),
		function("community_deletion_untrusted_code(regclass)"),
		functionBody("enforce_community_kept_row_fence()", "community_deletion_fence_context"),
	},
	32: { // 00032_community_deletion_admin_functions_without_jit.sql
		functionSetting("attach_child_table(regclass,regclass[],regclass[])", "jit=off"),
	},
	33: { // 00033_community_deletion_catalog_checks_with_cached_plans.sql
		functionBody("community_deletion_catalog_drift_of_tables()", "#variable_conflict use_column"),
		functionBody("community_deletion_fence_bound(oid,name,jsonb)", "#variable_conflict use_column"),
	},
	34: { // 00034_community_deletion_fence_bits_in_one_query.sql
		functionBody("enforce_community_write_fence()", "pg_catalog.bit_or("),
	},
	35: { // 00035_community_deletion_dormant_fence.sql
		function("community_deletion_fence_armed()"),
		function("community_deletion_fence_drain()"),
		functionBody("enforce_community_write_fence()", "community_deletion_fence_armed()"),
	},
	36: { // 00036_community_deletion_fence_drain_one_list.sql
		function("community_deletion_fence_bound_tables()"),
		functionBody("community_deletion_fence_drain()", "community_deletion_fence_bound_tables()"),
	},
	37: { // 00037_community_deletion_child_fence_parents_by_value.sql
		functionBody("enforce_community_write_fence()", "OPERATOR(pg_catalog.=) ANY (%L)"),
	},
	38: { // 00038_community_deletion_dormant_return_in_one_expression.sql
		functionBody("enforce_community_write_fence()", "RETURN admitted;"),
	},
	39: { // 00039_community_deletion_fence_key_bits.sql
		function("community_deletion_fence_key_bit(text)"),
		function("community_deletion_fence_bits(uuid,text)"),
		functionBody("enforce_community_write_fence()", "community_deletion_fence_key_bit(k.key)"),
	},
	40: { // 00040_community_deletion_fence_specialized.sql
		function("community_deletion_fence_regions(jsonb)"),
		function("community_deletion_fence_normalized(text)"),
		function("community_deletion_fence_specialize()"),
		functionBody("enforce_community_write_fence()", "--@children-begin@"),
		functionBody("community_deletion_fence_set_armed(boolean)", "community_deletion_fence_specialize()"),
	},
}

// querier is what probes and the version-table reads run on: a *sql.DB,
// *sql.Conn or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// probe runs the checks and returns the objects that are missing.
func probe(ctx context.Context, q querier, checks []check) (missing []string, err error) {
	for _, c := range checks {
		var ok bool
		if err := q.QueryRowContext(ctx, c.query, c.args...).Scan(&ok); err != nil {
			return nil, fmt.Errorf("probe %s: %w", c.what, err)
		}
		if !ok {
			missing = append(missing, c.what)
		}
	}
	return missing, nil
}
