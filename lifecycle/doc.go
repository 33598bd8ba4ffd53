// Package lifecycle is the Go client of the whole-community deletion
// lifecycle kept in PostgreSQL, one client per audience, each over a pool
// whose login is a member of its deployment role (the constructor checks,
// and names the missing GRANT in a *RoleError otherwise):
//
//   - Operator (NewOperator, community_deletion_operator): Submit,
//     InventorySchema and FreezeInventory, Approve (by a second login: the
//     database compares the submitter's), List, Get, Inspect, Abort and
//     Unblock deletion requests.
//   - Serving (NewServing, community_deletion_serving): GuardTransaction
//     guards the service's own writes, and AcquireWriteLease and
//     ReleaseWriteLease hold a serving write lease across a side effect the
//     write fence cannot see.
//   - Engine (NewEngine, community_deletion_executor): the executor's
//     step-by-step API that executor.Runner drives, from ClaimNext or
//     ClaimRequest to EnterRetentionPending.
//
// A deletion request moves through a fixed sequence of stages (see Stage)
// without skipping or going back; calls that advance it are named
// Enter<Stage>. Approval binds to the digest of a FrozenInventory, frozen
// before anything destructive happens. Every call is one short READ
// COMMITTED transaction on database time with its lock waits bounded
// (Opts.LockWait).
//
// Every error matches one of ErrNotFound, ErrRefused (a fail-closed safety
// refusal), ErrAccessDenied, ErrStaleLease (IsStaleLease: drop the request,
// never retry with that token), ErrInvalidInput, ErrNothingToClaim or
// ErrLockWait, and says in one line what was refused and why. The database
// enforces each invariant as well, whoever asks; its write-fence refusals
// carry the constraint name community_write_fence (IsWriteFenceRefusal).
package lifecycle
