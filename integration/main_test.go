// Package integration proves the deletion invariants against a real
// PostgreSQL server: each test attempts the forbidden thing and asserts the
// rejection, and each allowed path succeeds.
package integration

import (
	"testing"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
)

// server is the throwaway PostgreSQL shared by every test in this package;
// each test gets its own database cloned from a migrated template.
var server *ephemeralpg.Server

func TestMain(m *testing.M) {
	// Prepared transactions hold locks in the privileges suite.
	ephemeralpg.RunTests(m, ephemeralpg.Options{ExtraConfig: map[string]string{"max_prepared_transactions": "8"}}, &server)
}
