package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The privileges suite attacks as real login roles that are not entitled to
// what they try: the service (community_deletion_serving, which may write
// the tenant tables), an operator, an executor, and an outsider that belongs
// to no deployment role. Each attack asserts its SQLSTATE and that nothing
// changed; each entitled path is shown to work as its role.

// tryAs runs fn in a transaction as role and commits it if fn succeeds.
func (b *testBundle) tryAs(t *testing.T, role fixture.Role, fn func(tx pgx.Tx) error) error {
	t.Helper()
	return pgx.BeginFunc(t.Context(), b.as(role), fn)
}

// execAs runs one statement as role.
func (b *testBundle) execAs(t *testing.T, role fixture.Role, sql string, args ...any) error {
	t.Helper()
	_, err := b.as(role).Exec(t.Context(), sql, args...)
	return err
}

// footprint is everything an attack on community might change: its state,
// its request's stage and lease, and its rows in the fixture tables.
func (b *testBundle) footprint(t *testing.T, community uuid.UUID) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT concat_ws(' ',
		(SELECT deletion_state || '@' || deletion_fence_generation FROM communities WHERE id = $1),
		(SELECT string_agg(stage || '/' || coalesce(lease_owner, '-') || '/' || lease_generation, ',')
		   FROM community_deletion_requests WHERE community_id = $1),
		'members=' || (SELECT count(*) FROM fixture_members WHERE community_id = $1),
		'handles=' || (SELECT md5(coalesce(string_agg(handle, ',' ORDER BY id), '')) FROM fixture_members WHERE community_id = $1),
		'messages=' || (SELECT count(*) FROM fixture_messages WHERE community_id = $1),
		'reactions=' || (SELECT count(*) FROM fixture_reactions WHERE community_id = $1),
		'leases=' || (SELECT count(*) FROM community_serving_write_leases WHERE community_id = $1))`, community).Scan(&s))
	return s
}

// quiescingAndFenced returns a quiescing and a fenced community, each with
// one member row written while it was active, and the fenced one's
// generation.
func (b *testBundle) quiescingAndFenced(t *testing.T) (quiescing, fenced uuid.UUID, generation int64) {
	t.Helper()
	quiescing = b.createCommunity(t)
	fenced = b.createCommunity(t)
	for _, c := range []uuid.UUID{quiescing, fenced} {
		require.NoError(t, insertMember(t.Context(), b.as(fixture.RoleServing), c, "member-"+c.String()))
	}
	b.quiesce(t, quiescing)
	b.quiesce(t, fenced)
	return quiescing, fenced, b.fence(t, fenced)
}

// The executor's settings name a community and its fence generation; they
// admit nothing without membership of community_deletion_executor, however
// a session sets them: SET LOCAL, set_config in a function of its own, or
// PGOPTIONS at connect. The service is refused exactly like anyone else
// (55000); the executor's login with the same settings is admitted.
func TestPrivilegesForgedExecutorSettingsAdmitNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	quiescing, fenced, generation := b.quiescingAndFenced(t)
	generations := map[uuid.UUID]int64{quiescing: 0, fenced: generation}

	writes := map[string]string{
		"insert": "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'forged')",
		"update": "UPDATE fixture_members SET handle = 'forged' WHERE community_id = $1",
		"delete": "DELETE FROM fixture_members WHERE community_id = $1",
	}
	forgeries := map[string]func(tx pgx.Tx, community uuid.UUID, generation int64) error{
		"SET LOCAL": func(tx pgx.Tx, community uuid.UUID, generation int64) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL community_deletion.executor_community = '%s'", community)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL community_deletion.fence_generation = '%d'", generation))
			return err
		},
		"set_config in a function of its own": func(tx pgx.Tx, community uuid.UUID, generation int64) error {
			if _, err := tx.Exec(ctx, `CREATE FUNCTION pg_temp.become_executor(c text, g text) RETURNS void LANGUAGE sql AS
				$$ SELECT set_config('community_deletion.executor_community', c, true),
				          set_config('community_deletion.fence_generation', g, true) $$`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT pg_temp.become_executor($1, $2)", community.String(), strconv.FormatInt(generation, 10))
			return err
		},
	}
	for _, community := range []uuid.UUID{quiescing, fenced} {
		state, _ := b.communityState(t, community)
		before := b.footprint(t, community)
		for forgery, forge := range forgeries {
			for name, sql := range writes {
				t.Run(state+"/"+forgery+"/"+name, func(t *testing.T) {
					err := b.tryAs(t, fixture.RoleServing, func(tx pgx.Tx) error {
						if err := forge(tx, community, generations[community]); err != nil {
							return err
						}
						_, err := tx.Exec(ctx, sql, community)
						return err
					})
					requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState, "is "+state)
				})
			}
		}
		// The same settings at connect time (PGOPTIONS, or options= in the URL).
		url, err := fixture.RoleConnString(b.url, fixture.RoleServing)
		require.NoError(t, err)
		url += fmt.Sprintf("&options=-c%%20community_deletion.executor_community%%3D%s%%20-c%%20community_deletion.fence_generation%%3D%d",
			community, generations[community])
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		var setting string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('community_deletion.executor_community')").Scan(&setting))
		require.Equal(t, community.String(), setting, "the settings arrived with the connection")
		for name, sql := range writes {
			_, err := conn.Exec(ctx, sql, community)
			requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState, "is "+state)
			require.NotEmpty(t, name)
		}
		require.NoError(t, conn.Close(ctx))
		require.Equal(t, before, b.footprint(t, community), "nothing changed")
	}

	// Entitled: the executor's login with the same settings writes (the
	// purge's update and delete).
	require.NoError(t, b.asExecutor(t, fenced, generation, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "DELETE FROM fixture_members WHERE community_id = $1", fenced)
		return err
	}))
	// The executor's settings do not let the service move a community either:
	// it has no UPDATE on communities.
	err := b.tryAs(t, fixture.RoleServing, func(tx pgx.Tx) error {
		if err := forgeries["SET LOCAL"](tx, quiescing, 1); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE communities SET deletion_state = 'fenced', deletion_fence_generation = 1 WHERE id = $1", quiescing)
		return err
	})
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "communities")
}

// A serving write lease admits a write while quiescing only when presented
// by a member of community_deletion_serving or community_deletion_executor:
// a role that writes tenant tables but belongs to neither is refused even
// with every lease setting right. (The outsider cannot even read
// communities, which the fence needs: every tenant writer must be enrolled.)
func TestPrivilegesServingLeasesAreHeldOnlyByTheirRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)
	lease, generation := func() (uuid.UUID, int64) {
		var id uuid.UUID
		var generation int64
		require.NoError(t, b.as(fixture.RoleServing).QueryRow(ctx, `INSERT INTO community_serving_write_leases
			(community_id, operation, owner, fence_generation, lease_until)
			VALUES ($1, 'upload', 'web-1', 0, now() + interval '10 minutes') RETURNING id, generation`, community).Scan(&id, &generation))
		return id, generation
	}()
	b.quiesce(t, community)
	present := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('community_deletion.serving_write_lease_id', $1, true),
			set_config('community_deletion.serving_write_owner', 'web-1', true),
			set_config('community_deletion.serving_write_generation', $2, true),
			set_config('community_deletion.serving_write_fence_generation', '0', true)`, lease.String(), strconv.FormatInt(generation, 10))
		return err
	}
	write := func(role fixture.Role) error {
		return b.tryAs(t, role, func(tx pgx.Tx) error {
			if err := present(tx); err != nil {
				return err
			}
			return insertMember(ctx, tx, community, "leased")
		})
	}
	require.NoError(t, b.exec(t, "GRANT SELECT, INSERT ON fixture_members TO "+string(fixture.RoleOutsider)))
	before := b.footprint(t, community)
	// A tenant writer that is not enrolled cannot even run the fence (it
	// reads communities and computes the lock key): refused, fail closed.
	requireSQLState(t, write(fixture.RoleOutsider), pgerrcode.InsufficientPrivilege, "")
	// Granted what the fence reads, it is still refused: the lease admits
	// only a member of the serving or executor role.
	require.NoError(t, b.exec(t, "GRANT SELECT ON communities TO "+string(fixture.RoleOutsider)))
	require.NoError(t, b.exec(t, `GRANT EXECUTE ON FUNCTION community_deletion_lock_key(uuid), community_write_allowed(uuid),
		community_deletion_is_member(name) TO `+string(fixture.RoleOutsider)))
	requireSQLState(t, write(fixture.RoleOutsider), pgerrcode.ObjectNotInPrerequisiteState, "is quiescing")
	require.Equal(t, before, b.footprint(t, community))
	require.NoError(t, write(fixture.RoleServing), "the service presents its lease")

	// The outsider cannot take a lease of its own, nor release the service's.
	require.NoError(t, b.exec(t, "GRANT SELECT, INSERT, DELETE ON community_serving_write_leases TO "+string(fixture.RoleOutsider)))
	require.NoError(t, b.exec(t, "GRANT USAGE ON SEQUENCE community_serving_write_lease_generation_seq TO "+string(fixture.RoleOutsider)))
	active := b.createCommunity(t)
	_, _, err := acquireLease(ctx, b.as(fixture.RoleOutsider), active, 0)
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "is not a member of community_deletion_serving or community_deletion_executor")
	err = b.execAs(t, fixture.RoleOutsider, "DELETE FROM community_serving_write_leases WHERE id = $1", lease)
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "release of unexpired serving write lease")
	// Nor may an operator release it: only an expired lease is anyone's to reap.
	err = b.execAs(t, fixture.RoleOperator, "DELETE FROM community_serving_write_leases WHERE id = $1", lease)
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "release of unexpired serving write lease")
	var leases int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM community_serving_write_leases WHERE id = $1", lease).Scan(&leases))
	require.Equal(t, 1, leases)
}

// A temporary table (the default TEMP privilege) named like a control table
// cannot stand in for it: every guard resolves names with a fixed search_path
// that puts pg_temp last, and the write fence qualifies every name. Neither
// can a temporary type named text, a temporary function, or a schema of the
// attacker's own put first in its search_path with its own communities
// table, operators and functions.
func TestPrivilegesShadowObjectsCannotStandInForTheRealOnes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, fenced, generation := b.quiescingAndFenced(t)
	active := b.createCommunity(t)
	before := b.footprint(t, fenced)

	// The service shadows communities (and the write admission) in pg_temp
	// and in a schema of its own, first in its search_path.
	require.NoError(t, b.exec(t, "GRANT CREATE ON DATABASE "+pgx.Identifier{dbName(t, b)}.Sanitize()+" TO "+string(fixture.RoleServing)))
	require.NoError(t, b.execAs(t, fixture.RoleServing, "CREATE SCHEMA shadow"))
	for _, sql := range []string{
		`CREATE TABLE shadow.communities AS SELECT id, host, 'active'::text AS deletion_state, 0::bigint AS deletion_fence_generation FROM community_deletion.communities`,
		`CREATE FUNCTION shadow.community_write_allowed(community uuid) RETURNS boolean LANGUAGE sql AS 'SELECT true'`,
		`CREATE FUNCTION shadow.pg_try_advisory_xact_lock_shared(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true'`,
		`CREATE FUNCTION shadow.current_setting(text) RETURNS text LANGUAGE sql AS $$ SELECT 'read committed' $$`,
		`CREATE FUNCTION shadow.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'`,
		`CREATE OPERATOR shadow.= (LEFTARG = text, RIGHTARG = text, FUNCTION = shadow.always)`,
		`CREATE FUNCTION shadow.never(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT false'`,
		`CREATE OPERATOR shadow.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = shadow.never)`,
		`CREATE FUNCTION shadow.always_uuid(uuid, uuid) RETURNS boolean LANGUAGE sql AS 'SELECT true'`,
		`CREATE OPERATOR shadow.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = shadow.always_uuid)`,
	} {
		require.NoError(t, b.execAs(t, fixture.RoleServing, sql), sql)
	}
	shadows := map[string][]string{
		"temporary communities table": {
			`CREATE TEMP TABLE communities AS SELECT id, host, 'active'::text AS deletion_state, 0::bigint AS deletion_fence_generation FROM community_deletion.communities`,
		},
		"temporary type text":             {`CREATE TYPE pg_temp.text AS ENUM ('active')`},
		"temporary function":              {`CREATE FUNCTION pg_temp.community_write_allowed(community uuid) RETURNS boolean LANGUAGE sql AS 'SELECT true'`},
		"own schema first in search_path": {`SET LOCAL search_path = shadow, pg_catalog, public`},
		"own schema and pg_temp first": {
			`CREATE TEMP TABLE communities AS SELECT id, host, 'active'::text AS deletion_state FROM community_deletion.communities`,
			`SET LOCAL search_path = pg_temp, shadow, pg_catalog, public`,
		},
	}
	for name, setupSQL := range shadows {
		t.Run(name, func(t *testing.T) {
			for what, sql := range map[string]string{
				"insert": "INSERT INTO public.fixture_members (community_id, handle) VALUES ($1, 'shadowed')",
				"delete": "DELETE FROM public.fixture_members WHERE community_id = $1",
			} {
				err := b.tryAs(t, fixture.RoleServing, func(tx pgx.Tx) error {
					for _, s := range setupSQL {
						if _, err := tx.Exec(ctx, s); err != nil {
							return fmt.Errorf("%s: %w", s, err)
						}
					}
					_, err := tx.Exec(ctx, sql, fenced)
					return err
				})
				// (Under the shadow operators the attacker's own WHERE matches
				// every row, so the fence may name another community.)
				requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState, "refused: community")
				require.NotEmpty(t, what)
			}
			// The same session still writes its active communities (rolled
			// back, so no temporary object outlives the case).
			errRollback := errors.New("roll back")
			err := b.tryAs(t, fixture.RoleServing, func(tx pgx.Tx) error {
				for _, s := range setupSQL {
					if _, err := tx.Exec(ctx, s); err != nil {
						return err
					}
				}
				if err := insertMember(ctx, tx, active, "fine"); err != nil {
					return err
				}
				return errRollback
			})
			require.ErrorIs(t, err, errRollback)
		})
	}
	require.Equal(t, before, b.footprint(t, fenced), "nothing changed")

	// An operator's temporary approvals table does not make a request
	// approved; an executor's temporary requests table does not make a
	// fenced community a tombstone.
	_, request := b.approvedRequest(t)
	inventoried := b.submit(t, b.createCommunity(t), "requester")
	b.freeze(t, inventoried)
	err := b.tryAs(t, fixture.RoleApprover, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE community_deletion_approvals AS
			SELECT id AS request_id, community_id, inventory_digest, 'forger'::text AS approved_by
			FROM community_deletion.community_deletion_requests WHERE id = $1`, inventoried); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion.community_deletion_requests SET stage = 'approved' WHERE id = $1", inventoried)
		return err
	})
	requireSQLState(t, err, pgerrcode.IntegrityConstraintViolation, "approved needs an approval")
	require.Equal(t, "inventoried", requestStage(t, b, inventoried))
	require.NotEqual(t, uuid.Nil, request)

	err = b.tryAs(t, fixture.RoleExecutor, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE community_deletion_requests AS
			SELECT community_id, 'bindings_removed'::text AS stage, $2::bigint AS fence_generation
			FROM community_deletion.community_deletion_requests WHERE community_id = $1`, fenced, generation); err != nil {
			return err
		}
		if err := setExecutor(ctx, tx, fenced, generation); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE community_deletion.communities SET deletion_state = 'tombstone', deleted_at = now(),
			signing_key = NULL, icon = NULL WHERE id = $1`, fenced)
		return err
	})
	requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState, "does not match its deletion request (fenced)")
	require.Equal(t, before, b.footprint(t, fenced), "still fenced, rows and all")
}

// dbName is the test database's name.
func dbName(t *testing.T, b *testBundle) string {
	t.Helper()
	var name string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
	return name
}

// Every control table is written only by the roles that need it: PUBLIC has
// nothing, each deployment role exactly its calls' privileges. Each cell
// below is an attempt a role is not entitled to (42501), beside one it is.
func TestPrivilegesControlTablesAreWrittenOnlyByTheirRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, request := b.approvedRequest(t)
	refused := map[fixture.Role][]string{
		fixture.RoleOutsider: {
			"SELECT * FROM communities",
			"SELECT * FROM community_deletion_requests",
			"SELECT community_deletion_lock_key(gen_random_uuid())",
			"SELECT * FROM community_deletion_catalog_drift()",
			"INSERT INTO community_serving_write_leases (community_id, operation, owner, fence_generation, lease_until) VALUES (gen_random_uuid(), 'x', 'x', 0, now())",
		},
		fixture.RoleServing: {
			"INSERT INTO communities (host) VALUES ('s.example')",
			"UPDATE communities SET icon = 'x'",
			"SELECT * FROM community_deletion_requests",
			"INSERT INTO community_deletion_requests (community_id, community_host, requested_by) SELECT id, host, 'web' FROM communities LIMIT 1",
			"SELECT * FROM community_deletion_checkpoints",
			"INSERT INTO community_deletion_executor_heartbeats (executor_id, mode) VALUES ('web', 'x')",
			"SELECT community_schema_destruction_lock_key()",
			"SELECT community_deletion_restore_active(gen_random_uuid(), NULL)",
		},
		fixture.RoleOperator: {
			"UPDATE communities SET icon = 'x'",
			"INSERT INTO community_deletion_executor_heartbeats (executor_id, mode) VALUES ('op', 'x')",
			"UPDATE community_deletion_checkpoints SET error = 'x'",
			"DELETE FROM community_deletion_checkpoints",
			"INSERT INTO community_deletion_manifest_keys (request_id, chunk_no, prefix, keys) SELECT id, 0, 'p/', '[\"k\"]' FROM community_deletion_requests LIMIT 1",
			"INSERT INTO storage_taxonomy_sweeps (started_at, listed_objects, unknown_object_count, object_cap) VALUES (now(), 0, 0, 0)",
			"INSERT INTO community_deletion_purge_progress (request_id, unit_key, row_count, done, lease_generation) SELECT id, 'x', 0, false, 0 FROM community_deletion_requests LIMIT 1",
			"INSERT INTO community_serving_write_leases (community_id, operation, owner, fence_generation, lease_until) SELECT id, 'x', 'x', 0, now() FROM communities LIMIT 1",
			"INSERT INTO community_deletion_settings (operators_share_role, reason) VALUES (true, 'convenient')",
		},
		fixture.RoleExecutor: {
			"INSERT INTO communities (host) VALUES ('e.example')",
			"INSERT INTO community_deletion_requests (community_id, community_host, requested_by) SELECT id, host, 'exec' FROM communities LIMIT 1",
			"INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by) SELECT id, community_id, inventory_digest, 'exec' FROM community_deletion_requests LIMIT 1",
			"DELETE FROM community_deletion_checkpoints",
			"DELETE FROM community_deletion_requests",
			"SELECT community_deletion_restore_active(gen_random_uuid(), NULL)",
			"INSERT INTO community_deletion_settings (operators_share_role, reason) VALUES (true, 'convenient')",
			"DELETE FROM community_deletion_step_authorizations",
		},
	}
	for _, role := range []fixture.Role{fixture.RoleOutsider, fixture.RoleServing, fixture.RoleOperator, fixture.RoleExecutor} {
		for _, sql := range refused[role] {
			t.Run(string(role)+"/"+sql, func(t *testing.T) {
				requireSQLState(t, b.execAs(t, role, sql), pgerrcode.InsufficientPrivilege, "")
			})
		}
	}
	// The registry: no role has a privilege on it; TRUNCATE is refused too.
	for _, role := range []fixture.Role{fixture.RoleServing, fixture.RoleOperator, fixture.RoleExecutor} {
		for _, sql := range []string{
			"INSERT INTO community_scoped_tables (table_name) VALUES ('fixture_members_copy')",
			"DELETE FROM community_scoped_tables",
			"UPDATE community_scoped_tables SET purge_action = 'nullify'",
			"TRUNCATE community_scoped_tables",
		} {
			requireSQLState(t, b.execAs(t, role, sql), pgerrcode.InsufficientPrivilege, "")
		}
	}
	// Entitled: each role's own reads and writes.
	require.NoError(t, b.execAs(t, fixture.RoleServing, "SELECT * FROM communities"))
	require.NoError(t, b.execAs(t, fixture.RoleOperator, "SELECT * FROM community_deletion_requests"))
	require.NoError(t, b.execAs(t, fixture.RoleExecutor, `INSERT INTO community_deletion_executor_heartbeats (executor_id, mode)
		VALUES ('executor-1', 'test')`))
	require.NoError(t, b.execAs(t, fixture.RoleExecutor, "SELECT * FROM community_deletion_catalog_drift()"))
	require.Equal(t, "approved", requestStage(t, b, request))
	require.NotEqual(t, uuid.Nil, community)
}

// The registry changes only through attach_community_write_fence and
// detach_community_write_fence: not by the owner's plain DML (42501) nor
// TRUNCATE (55000); a registration never changes (23000); and only a
// table's owner may attach or detach it.
func TestPrivilegesRegistryChangesOnlyThroughAttachAndDetach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.exec(t, "CREATE TABLE tenant_extra (id bigserial PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id))"))
	for sql, code := range map[string]string{
		"INSERT INTO community_scoped_tables (table_name) VALUES ('tenant_extra')":                     pgerrcode.InsufficientPrivilege,
		"DELETE FROM community_scoped_tables WHERE table_name = 'fixture_members'":                     pgerrcode.InsufficientPrivilege,
		"UPDATE community_scoped_tables SET purge_action = purge_action":                               pgerrcode.IntegrityConstraintViolation,
		"TRUNCATE community_scoped_tables":                                                             pgerrcode.ObjectNotInPrerequisiteState,
		"SELECT community_deletion_unregister_table('public', 'no_such_table')":                        pgerrcode.InvalidParameterValue,
		"UPDATE community_scoped_tables SET registered_by = 'me' WHERE table_name = 'fixture_members'": pgerrcode.IntegrityConstraintViolation,
	} {
		requireSQLState(t, b.exec(t, sql), code, "")
	}
	// Only the owner attaches: the operator (who cannot create triggers on it
	// anyway) is refused before anything else; the owner attaches, and the
	// registration records who did.
	require.NoError(t, b.exec(t, "GRANT SELECT ON tenant_extra TO "+string(fixture.RoleOperator)))
	requireSQLState(t, b.execAs(t, fixture.RoleOperator, "SELECT attach_community_write_fence('tenant_extra')"),
		pgerrcode.InsufficientPrivilege, "only its owner")
	requireSQLState(t, b.execAs(t, fixture.RoleOperator, "SELECT community_deletion_register_table('tenant_extra', 'delete', 'community_id')"),
		pgerrcode.InsufficientPrivilege, "does not own it")
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('tenant_extra')"))
	var registeredBy string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT registered_by FROM community_scoped_tables WHERE table_name = 'tenant_extra'").Scan(&registeredBy))
	require.Equal(t, "postgres", registeredBy)
	// Registering an unfenced table through the definer path is refused by
	// the registry's own check.
	require.NoError(t, b.exec(t, "CREATE TABLE tenant_bare (community_id uuid NOT NULL)"))
	requireSQLState(t, b.exec(t, "SELECT community_deletion_register_table('tenant_bare', 'delete', 'community_id')"),
		pgerrcode.IntegrityConstraintViolation, "lacks the complete, enabled fence")

	// Detach, refused while a deletion is in flight.
	b.approvedRequest(t)
	requireSQLState(t, b.exec(t, "SELECT detach_community_write_fence('tenant_extra')"),
		pgerrcode.ObjectNotInPrerequisiteState, "a deletion is in flight")
}

// Checkpoints are append-only evidence: the executor appends its units and
// moves a started one once to completed or failed; operators append only
// their own audit units; nobody rewrites or deletes one (23000), not even
// the owner.
func TestPrivilegesCheckpointsAreAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, request := b.approvedRequest(t)
	insert := func(role fixture.Role, unit, status string) error {
		return b.execAs(t, role, `INSERT INTO community_deletion_checkpoints (request_id, stage, unit_key, status, lease_generation)
			VALUES ($1, 'approved', $2, $3, 0)`, request, unit, status)
	}
	require.NoError(t, insert(fixture.RoleExecutor, "unit-a", "started"))
	require.NoError(t, insert(fixture.RoleExecutor, "unit-b", "completed"))
	require.NoError(t, insert(fixture.RoleOperator, "operator_note:1", "completed"))
	requireSQLState(t, insert(fixture.RoleOperator, "unit-c", "completed"), pgerrcode.InsufficientPrivilege, "is not a member of community_deletion_executor")
	requireSQLState(t, insert(fixture.RoleExecutor, "operator_abort:forged", "completed"), pgerrcode.InsufficientPrivilege, "is not a member of community_deletion_operator")

	// started -> completed, once; the database dates it.
	require.NoError(t, b.execAs(t, fixture.RoleExecutor, `UPDATE community_deletion_checkpoints
		SET status = 'completed', completed_at = '2000-01-01' WHERE request_id = $1 AND unit_key = 'unit-a'`, request))
	var completedRecently bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT completed_at > now() - interval '1 minute' FROM community_deletion_checkpoints
		WHERE request_id = $1 AND unit_key = 'unit-a'`, request).Scan(&completedRecently))
	require.True(t, completedRecently)
	for _, sql := range []string{
		"UPDATE community_deletion_checkpoints SET status = 'failed' WHERE request_id = $1 AND unit_key = 'unit-a'",
		"UPDATE community_deletion_checkpoints SET detail = '{\"rows\": 0}' WHERE request_id = $1 AND unit_key = 'unit-b'",
		"UPDATE community_deletion_checkpoints SET unit_key = 'unit-z' WHERE request_id = $1 AND unit_key = 'unit-b'",
	} {
		requireSQLState(t, b.execAs(t, fixture.RoleExecutor, sql, request), pgerrcode.IntegrityConstraintViolation, "append-only")
		requireSQLState(t, b.exec(t, sql, request), pgerrcode.IntegrityConstraintViolation, "append-only")
	}
	requireSQLState(t, b.exec(t, "DELETE FROM community_deletion_checkpoints WHERE request_id = $1", request),
		pgerrcode.IntegrityConstraintViolation, "append-only")
	var count int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_checkpoints WHERE request_id = $1", request).Scan(&count))
	require.Equal(t, 3, count)
}

// Leases are bounded: no serving write lease and no executor lease reaches
// beyond an hour, whatever the writer asks for (23514), so a lease of a dead
// process never strands a fence or a request for longer.
func TestPrivilegesLeasesAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community := b.createCommunity(t)
	for _, until := range []string{"'infinity'", "now() + interval '2 hours'"} {
		err := b.execAs(t, fixture.RoleServing, `INSERT INTO community_serving_write_leases
			(community_id, operation, owner, fence_generation, lease_until) VALUES ($1, 'upload', 'web-1', 0, `+until+`)`, community)
		requireSQLState(t, err, pgerrcode.CheckViolation, "community_serving_write_leases_lease_bound_check")
	}
	lease := mustAcquireLease(t, b, community)
	err := b.execAs(t, fixture.RoleServing, "UPDATE community_serving_write_leases SET lease_until = 'infinity' WHERE id = $1", lease)
	requireSQLState(t, err, pgerrcode.CheckViolation, "community_serving_write_leases_lease_bound_check")
	// Setting heartbeat_at ahead does not stretch the bound: the guard
	// stamps it with the database clock.
	err = b.execAs(t, fixture.RoleServing, `UPDATE community_serving_write_leases
		SET heartbeat_at = now() + interval '1 day', lease_until = now() + interval '1 day' WHERE id = $1`, lease)
	requireSQLState(t, err, pgerrcode.CheckViolation, "community_serving_write_leases_lease_bound_check")

	_, request := b.approvedRequest(t)
	for _, until := range []string{"'infinity'", "clock_timestamp() + interval '61 minutes'"} {
		err := b.execAs(t, fixture.RoleExecutor, `UPDATE community_deletion_requests
			SET lease_owner = 'executor-1', lease_generation = lease_generation + 1, lease_until = `+until+` WHERE id = $1`, request)
		requireSQLState(t, err, pgerrcode.CheckViolation, "an executor lease lasts at most 1 hour")
	}
	require.NoError(t, b.execAs(t, fixture.RoleExecutor, `UPDATE community_deletion_requests
		SET lease_owner = 'executor-1', lease_generation = lease_generation + 1, lease_until = clock_timestamp() + interval '59 minutes'
		WHERE id = $1`, request))
}

// The two-person rule holds against database roles, not names: the login
// that submitted cannot approve under a second name (23000), another
// operator's login can. A deployment whose operators share one login
// declares it in community_deletion_settings, an append-only, dated and
// signed record that only the schema's owner writes.
func TestPrivilegesTwoPersonRuleComparesRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	approveAs := func(role fixture.Role, request uuid.UUID, name string) error {
		return b.tryAs(t, role, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
				SELECT id, community_id, inventory_digest, $2 FROM community_deletion_requests WHERE id = $1`, request, name); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE community_deletion_requests SET stage = 'approved' WHERE id = $1", request)
			return err
		})
	}
	inventoried := func() uuid.UUID {
		request := b.submit(t, b.createCommunity(t), "alice")
		b.freeze(t, request)
		return request
	}

	request := inventoried()
	requireSQLState(t, approveAs(fixture.RoleOperator, request, "bob"), pgerrcode.IntegrityConstraintViolation,
		"role cd_test_operator submitted deletion "+request.String()+" and cannot also approve it")
	require.Equal(t, "inventoried", requestStage(t, b, request))
	require.NoError(t, approveAs(fixture.RoleApprover, request, "bob"))
	var submitter, approver string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT r.requested_by_role, a.approved_by_role FROM community_deletion_requests r
		JOIN community_deletion_approvals a ON a.request_id = r.id WHERE r.id = $1`, request).Scan(&submitter, &approver))
	require.Equal(t, []string{"cd_test_operator", "cd_test_approver"}, []string{submitter, approver})

	// The roles are the database's, not the writer's.
	forged := b.submit(t, b.createCommunity(t), "alice")
	requireSQLState(t, b.execAs(t, fixture.RoleOperator,
		"UPDATE community_deletion_requests SET requested_by_role = 'cd_test_approver' WHERE id = $1", forged),
		pgerrcode.IntegrityConstraintViolation, "never change")

	// Shared operator logins, declared by the owner.
	require.NoError(t, b.exec(t, "INSERT INTO community_deletion_settings (operators_share_role, reason) VALUES (true, 'one break-glass login')"))
	shared := inventoried()
	require.NoError(t, approveAs(fixture.RoleOperator, shared, "bob"), "declared: one role may submit and approve")
	requireSQLState(t, approveAs(fixture.RoleOperator, inventoried(), "alice"), pgerrcode.IntegrityConstraintViolation,
		"alice requested deletion")
	var changedBy string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT changed_by FROM community_deletion_settings ORDER BY sequence DESC LIMIT 1").Scan(&changedBy))
	require.Equal(t, "postgres", changedBy)
	requireSQLState(t, b.exec(t, "UPDATE community_deletion_settings SET operators_share_role = false"), pgerrcode.IntegrityConstraintViolation, "append-only")
	requireSQLState(t, b.exec(t, "DELETE FROM community_deletion_settings"), pgerrcode.IntegrityConstraintViolation, "append-only")
	requireSQLState(t, b.exec(t, "TRUNCATE community_deletion_settings"), pgerrcode.ObjectNotInPrerequisiteState, "")
	require.NoError(t, b.exec(t, "INSERT INTO community_deletion_settings (operators_share_role, reason) VALUES (false, 'break-glass over')"))
	requireSQLState(t, approveAs(fixture.RoleOperator, inventoried(), "bob"), pgerrcode.IntegrityConstraintViolation, "cannot also approve it")

	// A request submitted before roles were recorded cannot be approved at
	// all: abort it and submit again.
	legacy := inventoried()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion_requests SET requested_by_role = NULL WHERE id = $1", legacy)
		return err
	}))
	requireSQLState(t, approveAs(fixture.RoleApprover, legacy, "bob"), pgerrcode.IntegrityConstraintViolation,
		"submitted before submitters were recorded")
}

// Operators inventory, approve, abort and unblock, and nothing the executor
// does; the executor does its stages and nothing an operator does. An
// operator that aborts restores the community through a SECURITY DEFINER
// function that authorizes exactly that step.
func TestPrivilegesStagesBelongToTheirRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, request := b.approvedRequest(t)
	before := b.footprint(t, community)
	for _, tc := range []struct {
		role fixture.Role
		sql  string
		want string
	}{
		{fixture.RoleOperator, "UPDATE community_deletion_requests SET lease_owner = 'op', lease_until = now() + interval '1 minute', lease_generation = lease_generation + 1 WHERE id = $1", "is not a member of community_deletion_executor"},
		{fixture.RoleOperator, "UPDATE community_deletion_requests SET next_attempt_at = now() + interval '1 day' WHERE id = $1", "is not a member of community_deletion_executor"},
		{fixture.RoleOperator, "UPDATE community_deletion_requests SET blocked_at = now(), blocked_reason = 'op' WHERE id = $1", "is not a member of community_deletion_executor"},
		{fixture.RoleExecutor, "UPDATE community_deletion_requests SET stage = 'aborted', aborted_at = now(), completed_at = now(), aborted_by = 'exec', abort_reason = 'x' WHERE id = $1", "is not a member of community_deletion_operator"},
	} {
		requireSQLState(t, b.execAs(t, tc.role, tc.sql, request), pgerrcode.InsufficientPrivilege, tc.want)
	}
	// Operator-shaped changes cannot take or extend a lease on the side.
	requireSQLState(t, b.execAs(t, fixture.RoleOperator, `UPDATE community_deletion_requests
		SET stage = 'aborted', aborted_at = now(), completed_at = now(), aborted_by = 'op', abort_reason = 'x',
		    lease_owner = 'op', lease_until = now() + interval '1 minute' WHERE id = $1`, request),
		pgerrcode.InsufficientPrivilege, "an operator only clears a lease or a block")
	require.Equal(t, before, b.footprint(t, community))

	// The executor moves approved -> fenced; an operator may not.
	b.quiesce(t, community)
	requireSQLState(t, b.execAs(t, fixture.RoleOperator, "UPDATE community_deletion_requests SET stage = 'fenced', fence_generation = 1 WHERE id = $1", request),
		pgerrcode.InsufficientPrivilege, "is not a member of community_deletion_executor")

	// restore_active: operators only, and only for an approved or fenced
	// request; then the abort of the request itself.
	requireSQLState(t, b.execAs(t, fixture.RoleExecutor, "SELECT community_deletion_restore_active($1, NULL)", request),
		pgerrcode.InsufficientPrivilege, "")
	require.NoError(t, b.tryAs(t, fixture.RoleOperator, func(tx pgx.Tx) error {
		var generation int64
		if err := tx.QueryRow(ctx, "SELECT community_deletion_restore_active($1, NULL)", request).Scan(&generation); err != nil {
			return err
		}
		if generation != 1 {
			return fmt.Errorf("restored at generation %d, want 1", generation)
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion_requests SET "+abortSet+" WHERE id = $1", request)
		return err
	}))
	state, generation := b.communityState(t, community)
	require.Equal(t, "active", state)
	require.Equal(t, int64(1), generation)
	var authorizations int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_step_authorizations").Scan(&authorizations))
	require.Zero(t, authorizations, "the authorization lasted one statement")
	requireSQLState(t, b.execAs(t, fixture.RoleOperator, "SELECT community_deletion_restore_active($1, NULL)", request),
		pgerrcode.ObjectNotInPrerequisiteState, "is aborted, not approved or fenced")
}

// The writes a careful attacker would try next all reach the fence: COPY,
// MERGE, INSERT ... ON CONFLICT, writable CTEs, a temporary view, a cascading
// foreign key from an active community into a fenced one; a pinned snapshot
// set as the session default is refused with 25000; a rule needs the table's
// ownership.
func TestPrivilegesEveryWritePathReachesTheFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	serving := b.as(fixture.RoleServing)
	active := b.createCommunity(t)
	fenced := b.createCommunity(t)
	// A message of the active community that a reaction of the soon-fenced
	// community points to (rows may cross communities; the fence sees both).
	var member, channel, message int64
	require.NoError(t, serving.QueryRow(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'm') RETURNING id", active).Scan(&member))
	require.NoError(t, serving.QueryRow(ctx, "INSERT INTO fixture_channels (community_id, name, created_by) VALUES ($1, 'c', $2) RETURNING id", active, member).Scan(&channel))
	require.NoError(t, serving.QueryRow(ctx, `INSERT INTO fixture_messages (community_id, channel_id, author_id, body)
		VALUES ($1, $2, $3, 'hello') RETURNING id`, active, channel, member).Scan(&message))
	var fencedMember int64
	require.NoError(t, serving.QueryRow(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'f') RETURNING id", fenced).Scan(&fencedMember))
	_, err := serving.Exec(ctx, "INSERT INTO fixture_reactions (community_id, message_id, member_id, emoji) VALUES ($1, $2, $3, 'x')",
		fenced, message, fencedMember)
	require.NoError(t, err)
	b.quiesce(t, fenced)
	b.fence(t, fenced)
	before := b.footprint(t, fenced)
	beforeActive := b.footprint(t, active)

	for name, attempt := range map[string]func(tx pgx.Tx) error{
		"COPY": func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"fixture_members"}, []string{"community_id", "handle"},
				pgx.CopyFromRows([][]any{{fenced, "copied"}}))
			return err
		},
		"MERGE": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `MERGE INTO fixture_members m USING (SELECT $1::uuid AS c) s ON false
				WHEN NOT MATCHED THEN INSERT (community_id, handle) VALUES (s.c, 'merged')`, fenced)
			return err
		},
		"MERGE update": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `MERGE INTO fixture_members m USING (SELECT $1::uuid AS c) s ON m.community_id = s.c
				WHEN MATCHED THEN UPDATE SET handle = 'merged'`, fenced)
			return err
		},
		"INSERT ON CONFLICT DO UPDATE": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO fixture_members (id, community_id, handle) OVERRIDING SYSTEM VALUE
				VALUES ($2, $1, 'upserted') ON CONFLICT (id) DO UPDATE SET handle = 'upserted'`, fenced, fencedMember)
			return err
		},
		"writable CTE": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `WITH renamed AS (UPDATE fixture_members SET handle = 'cte' WHERE community_id = $1 RETURNING id)
				SELECT count(*) FROM renamed`, fenced)
			return err
		},
		"temporary view": func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "CREATE TEMP VIEW members AS SELECT * FROM fixture_members"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE members SET handle = 'through a view' WHERE community_id = $1", fenced)
			return err
		},
		"cascading foreign key": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "DELETE FROM fixture_messages WHERE id = $1", message)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, serving, attempt)
			requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState, "refused")
			require.Equal(t, before, b.footprint(t, fenced), "nothing changed in the fenced community")
			require.Equal(t, beforeActive, b.footprint(t, active), "nor in the active one")
		})
	}

	// A pinned snapshot, even as the session default.
	conn, err := serving.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET default_transaction_isolation = 'serializable'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'pinned')", active)
	requireSQLState(t, err, pgerrcode.InvalidTransactionState, "pins a snapshot")
	_, err = conn.Exec(ctx, "RESET default_transaction_isolation")
	require.NoError(t, err)

	// A rule would rewrite writes before the fence sees them: only the
	// table's owner may create one.
	err = b.execAs(t, fixture.RoleServing, "CREATE RULE hide AS ON INSERT TO fixture_members DO INSTEAD NOTHING")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "must be owner")
	require.Equal(t, before, b.footprint(t, fenced))
}

// A prepared transaction holding a community's deletion lock outlives its
// session: the health report names it (lifecycle steps that wait for it give
// up after their bound and name it too; see the lifecycle tests).
func TestPrivilegesPreparedTransactionsHoldingALockAreReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)
	gid := "held-" + uuid.NewString()
	conn, err := b.as(fixture.RoleServing).Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, sql := range []string{
		"BEGIN",
		fmt.Sprintf("INSERT INTO fixture_members (community_id, handle) VALUES ('%s', 'prepared')", community),
		fmt.Sprintf("PREPARE TRANSACTION '%s'", gid),
	} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() { _, _ = b.pool.Exec(context.Background(), fmt.Sprintf("ROLLBACK PREPARED '%s'", gid)) })
	rows, err := b.as(fixture.RoleOperator).Query(ctx, "SELECT subject, problem, detail FROM community_deletion_health()")
	require.NoError(t, err)
	findings, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var subject, problem, detail string
		err := row.Scan(&subject, &problem, &detail)
		return strings.Join([]string{subject, problem, detail}, " | "), err
	})
	require.NoError(t, err)
	require.Len(t, findings, 1)
	require.Contains(t, findings[0], "prepared transaction "+gid+" | prepared_lock | owner cd_test_serving")
	requireSQLState(t, b.execAs(t, fixture.RoleServing, "SELECT * FROM community_deletion_health()"), pgerrcode.InsufficientPrivilege, "")
}

// Every function the migrations install is listed in
// community_deletion_installed_functions() (which the drift report's digests
// and the sealing cover), resolves names with a search_path that starts at
// pg_catalog and ends at pg_temp (or, for the two on every tenant write,
// qualifies every name instead; the tombstone proof also turns row security
// off), and is executable by PUBLIC only where it
// checks its caller itself.
func TestEveryInstalledFunctionIsSealed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows, err := b.pool.Query(t.Context(), `
		SELECT p.oid::regprocedure::text,
		       p.oid IN (SELECT to_regprocedure(f)::oid FROM unnest(community_deletion_installed_functions()) f),
		       coalesce(array_to_string(p.proconfig, ','), ''),
		       has_function_privilege('public', p.oid, 'EXECUTE')
		FROM pg_proc p
		WHERE p.pronamespace = 'community_deletion'::regnamespace
		ORDER BY 1`)
	require.NoError(t, err)
	type fn struct {
		signature string
		listed    bool
		config    string
		public    bool
	}
	functions, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fn, error) {
		var f fn
		err := row.Scan(&f.signature, &f.listed, &f.config, &f.public)
		return f, err
	})
	require.NoError(t, err)
	qualified := map[string]bool{
		"community_deletion_lock_key(uuid)": true, "enforce_community_write_fence()": true,
		"enforce_community_write_fence_row()": true, "community_deletion_tenant_uuid(text)": true,
		"community_deletion_fence_bit(uuid)": true, "community_deletion_fence_armed()": true,
		"community_deletion_fence_key_bit(text)": true,
	}
	// The proofs read tenant tables with row security off, so a policy that
	// would hide a row is an error, not a skip.
	rowSecurityOff := map[string]bool{"enforce_community_tombstone_proof()": true}
	publicOK := map[string]bool{
		"attach_community_write_fence(regclass,text,name)": true, "detach_community_write_fence(regclass)": true,
		"community_deletion_register_table(regclass,text,name)": true, "community_deletion_unregister_table(name,name)": true,
		"declare_tenant_table(regclass,name)": true, "community_deletion_record_tenant_table(regclass,name,text[])": true,
		"attach_child_table(regclass,regclass[],regclass[])": true, "community_deletion_register_child_table(regclass,jsonb)": true,
		"declare_reference(regclass,name[],regclass,name[],text)": true, "drop_reference(regclass,name[])": true,
		"enforce_community_write_fence_row()": true, "enforce_community_kept_row_fence_row()": true,
		"community_deletion_attach_row_fence(regclass,text,text[])": true, "community_deletion_key_kind(regtype)": true,
		"community_deletion_tenant_key_kind()": true, "community_deletion_fence_args(name,text,jsonb)": true,
		"community_deletion_kept_row_args(name,text)": true, "community_deletion_child_spec(regclass,regclass[],regclass[])": true,
		"exclude_table(regclass,text)": true, "include_table(regclass,text)": true,
		"enforce_community_kept_row_fence()": true, "enforce_community_tenant_created()": true,
		"enforce_community_write_fence()": true, "community_deletion_control_table(text)": true,
		"enforce_community_truncate_fence()": true, "community_deletion_tenant_schema(oid)": true,
		"community_deletion_fence_bound(oid,name,jsonb)": true, "community_deletion_bound_args(text[])": true,
		"community_deletion_fence_bit(uuid)": true, "community_deletion_fence_armed()": true,
		"community_deletion_fence_dormant()": true, "community_deletion_fence_key_bit(text)": true,
		"community_deletion_fence_bits(uuid,text)": true,
	}
	require.NotEmpty(t, functions)
	for _, f := range functions {
		require.True(t, f.listed, "%s is not in community_deletion_installed_functions()", f.signature)
		switch {
		case qualified[f.signature]:
			require.Empty(t, f.config, f.signature)
		case rowSecurityOff[f.signature]:
			require.Equal(t, "row_security=off,search_path=pg_catalog, community_deletion, pg_temp", f.config, f.signature)
		case f.signature == "community_deletion_path_keys(jsonb,jsonb)":
			// The fence follows a child table's parents with row security
			// off, as their owner, so no policy hides a parent row.
			require.Equal(t, "search_path=pg_catalog, community_deletion, pg_temp,row_security=off", f.config, f.signature)
		case f.signature == "community_deletion_settle_fence_marker()":
			// It waits at most this long for writes on the near-free path.
			require.Equal(t, "search_path=pg_catalog, community_deletion, pg_temp,lock_timeout=5s", f.config, f.signature)
		case f.signature == "community_deletion_fence_drain()":
			// It waits at most this long for each table it drains.
			require.Equal(t, "search_path=pg_catalog, community_deletion, pg_temp,lock_timeout=250ms", f.config, f.signature)
		case f.signature == "community_deletion_drop_tenant_objects(uuid)":
			// Its DROP SEQUENCE waits at most this long for the sequence.
			require.Equal(t, "search_path=pg_catalog, community_deletion, pg_temp,lock_timeout=2s", f.config, f.signature)
		case f.signature == "community_deletion_catalog_drift()":
			// JIT compiled its catalog queries for seconds; it waits at
			// most 5 s for the fence marker's lock.
			require.Equal(t, "jit=off,search_path=pg_catalog, community_deletion, pg_temp,lock_timeout=5s", f.config, f.signature)
		case f.signature == "community_deletion_catalog_drift_of_tables()",
			f.signature == "community_deletion_catalog_drift_of_copies()", f.signature == "community_deletion_table_code(oid)",
			f.signature == "community_deletion_code_digest(oid,text,name)", f.signature == "community_deletion_untrusted_code(regclass)":
			// JIT compiled this catalog query for seconds; it is off.
			require.Equal(t, "jit=off,search_path=pg_catalog, community_deletion, pg_temp", f.config, f.signature)
		case f.signature == "attach_child_table(regclass,regclass[],regclass[])",
			f.signature == "attach_community_write_fence(regclass,text,name)",
			f.signature == "declare_reference(regclass,name[],regclass,name[],text)",
			f.signature == "declare_tenant_table(regclass,name)", f.signature == "detach_community_write_fence(regclass)":
			// A service's migrations call these; JIT compiled their
			// jsonb and catalog queries for 0.4-0.6 s a call (00032).
			require.Equal(t, "search_path=pg_catalog, community_deletion, pg_temp,jit=off", f.config, f.signature)
		default:
			require.Equal(t, "search_path=pg_catalog, community_deletion, pg_temp", f.config, f.signature)
		}
		require.Equal(t, publicOK[f.signature], f.public, "PUBLIC EXECUTE on %s", f.signature)
	}
}
