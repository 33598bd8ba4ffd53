// Package lifecycle is the Go client of the whole-community deletion
// lifecycle kept in PostgreSQL, one client per audience, each over a pool
// whose login is a member of its deployment role:
//
//   - Operator (community_deletion_operator): submit, inventory, approve,
//     list, inspect, abort and unblock deletion requests.
//   - Serving (community_deletion_serving): guard the service's own writes
//     and hold serving write leases across side effects the write fence
//     cannot see.
//   - Engine (community_deletion_executor): the executor's step-by-step API
//     that executor.Runner drives, from the claim to retention.
//
// A deletion request moves through a fixed sequence of stages (see Stage)
// without skipping or going back; calls that advance it are named
// Enter<Stage>. Approval binds to the digest of a FrozenInventory, frozen
// before anything destructive happens. Every safety check fails closed with
// an error matching ErrRefused; the database enforces each invariant as
// well, whoever asks.
package lifecycle
