// Package exitcode is the one table of process exit codes of the project's
// commands, cmd/migrate and cmd/deletionctl: each number means the same in
// both, so a script or CI job can read an exit status without knowing which
// tool produced it. The README lists the same table.
//
//	0 OK            success
//	1 Failure       any other failure (connection, SQL, I/O, interrupted)
//	2 Usage         a malformed command line
//	3 Refused       a safety refusal: the command changed nothing, and a
//	                rerun gives the same answer until someone decides or
//	                something changes
//	4 NotFound      the named object does not exist (deletionctl)
//	5 InvalidInput  a well-formed command line with an invalid value (deletionctl)
//	6 Pending       migrations are pending (migrate status --fail-on-pending)
//	7 LockTimeout   timed out waiting for the schema destruction lock (migrate)
package exitcode

// The exit codes. Never renumber one: scripts depend on them.
const (
	OK           = 0
	Failure      = 1
	Usage        = 2
	Refused      = 3
	NotFound     = 4
	InvalidInput = 5
	Pending      = 6
	LockTimeout  = 7
)
