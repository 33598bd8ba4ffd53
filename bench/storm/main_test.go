package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The storm runs end to end on a small scale and proves its invariant (an
// admitted target write after quiescing returned is an error).
func TestStormRuns(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := storm(t.Context(), &out, settings{writers: 3, before: 300 * time.Millisecond, after: 100 * time.Millisecond})
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "started after the fence returned, all refused")
}
