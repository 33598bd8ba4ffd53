// Package receipt is the offline core of deletion receipts: the signed,
// chained evidence of each completed community deletion that an auditor
// verifies without the database that produced it.
//
// A Receipt is the body: the request and tenant ids, what the tombstone
// keeps, the pre-deletion commitments (inventory and destructive manifest
// digests), rows, objects and cache entries deleted, the absence proof per
// store (its kind, what was checked, verified or not checked), the
// submitter and approver, the stage times on the database clock, the schema
// version, and the hash of the previous receipt. Canonical encodes it as
// RFC 8785-compatible JSON; Sign wraps those exact bytes and an Ed25519
// signature in an Envelope (Unsigned for a deployment with no key, which
// every receipt then says); Chain places a body after the previous
// envelope. A Rotation is the chain's other entry: signed by the key that
// signed the chain so far, it names the next key (SignRotation). WriteDir
// and ReadDir export and import envelopes as one file per entry, and Verify
// checks them offline from the chain's first receipt (or a given start),
// across rotations from the first key alone, up to a Head kept outside the
// database: signatures, no unsigned receipt after a signed one, the chain
// (nothing missing, reordered, duplicated, renamed or edited) and each
// entry's consistency, naming the first failure in a *VerifyError.
//
// The package holds pure functions over values and no database types: the
// caller stores an Envelope's Body and Signature as bytes (never jsonb) in
// an append-only table. docs/receipts.md specifies the format exactly
// enough for an independent verifier, with a test vector.
package receipt
