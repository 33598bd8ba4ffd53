package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The demo deletes one community end to end and proves every check it
// prints; run returns an error naming any check that failed. With the
// servers installed (as .ci/run installs them) it deletes from a real S3
// server and a real Redis; with -stores local from a directory and an
// in-process cache.
func TestDemoDeletesOneCommunityAndKeepsTheOthers(t *testing.T) {
	t.Parallel()
	for mode, want := range map[string][]string{
		storesServices: {"object store: S3 over HTTP (", ") at s3://", "cache: redis-server at redis://127.0.0.1:",
			"no file of alpha.demo.example is left in the object store (S3 over HTTP (",
			"the cache holds nothing of alpha.demo.example (redis-server)"},
		storesLocal: {"object store: a local directory at file:///", "cache: in-process at memory:",
			"the cache holds nothing of alpha.demo.example (in-process)"},
	} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			require.NoError(t, run(t.Context(), &out, mode), out.String())
			require.Contains(t, out.String(), "deleted alpha.demo.example")
			require.NotContains(t, out.String(), "FAIL")
			for _, w := range want {
				require.Contains(t, out.String(), w)
			}
			require.Contains(t, out.String(), "beta.demo.example: its 50 cache entries kept")
			require.Contains(t, out.String(), "\nreceipt 1 of request ")
			require.Contains(t, out.String(), "verifies offline with receipt.pub: 1 signed with key ")
		})
	}
}
