package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The demo deletes one community end to end and proves every check it
// prints; run returns an error naming any check that failed.
func TestDemoDeletesOneCommunityAndKeepsTheOthers(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out), out.String())
	require.Contains(t, out.String(), "deleted alpha.demo.example")
	require.NotContains(t, out.String(), "FAIL")
}
