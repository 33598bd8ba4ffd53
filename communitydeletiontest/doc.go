// Package communitydeletiontest is a test kit for a service that vendors
// the community deletion schema: its integration tests prove, against the
// service's own migrations, that every tenant table is covered and that a
// community its own code seeded is deleted end to end, leaving nothing.
//
// Start (or New and Close, for a TestMain) gives a test a fresh database on
// a throwaway PostgreSQL, found in the same order as the project's own
// tests: the server TEST_DATABASE_URL names, else a Docker container, else
// a cluster run with the local server binaries (initdb, pg_ctl). The
// database has this project's migrations, then the service's
// (WithServiceMigrations), logins for the deployment roles (URL) and
// lifecycle clients over them (Kit.Operator, Kit.Approver, Kit.Engine,
// Kit.Serving). The server is shared by every kit of the test binary and
// removed when the process exits; each kit's database is its own and is
// dropped by Close.
//
//	func TestDeletion(t *testing.T) {
//		kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(migrate))
//		kit.RequireCoverage(t)
//		community := seed(t, kit.URL(communitydeletiontest.RoleOwner)) // the service's own code
//		kit.DeleteAndVerify(t, communitydeletiontest.DeleteParams{
//			CommunityID: community, Objects: store, Cache: cache,
//			WritePaths: []func(context.Context) error{func(ctx context.Context) error { return app.PostNote(ctx, community) }},
//		})
//	}
//
// RequireCoverage fails the test with one line per problem
// community_deletion_catalog_drift() reports (a table holding tenant data
// that is unregistered, unfenced, missing or misshapen) and when the purge
// order cannot be computed. DeleteAndVerify submits the community's
// deletion, freezes an inventory listing its prefixes (those of the
// storage layout the deployment declared), approves it as a
// second operator and runs the real executor to retention_pending; then it
// fails the test for every row left holding the community's id in a uuid,
// text or json column of any table outside the system schemas (registered
// or not), every object left under the prefixes, a cache not empty for the
// community, another community's rows changed, and every write path not
// refused by the write fence, run right after the fence commits and again
// at the end. Coverage and DeleteAndCheck return the same
// findings as lines, for code without a testing.TB.
//
// The kit follows the service's tenant model: tenant tables keyed by any
// uuid column named at attach_community_write_fence (community_id by
// default), and tenants either of a table declared with
// declare_tenant_table (submitted by id) or of communities rows the service
// inserts (submitted by host).
package communitydeletiontest
