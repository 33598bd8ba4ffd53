package migration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPostgresDuration(t *testing.T) {
	t.Parallel()
	require.Equal(t, "0ms", postgresDuration(0))
	require.Equal(t, "1ms", postgresDuration(time.Microsecond), "a positive duration never becomes 0 (no limit)")
	require.Equal(t, "5000ms", postgresDuration(5*time.Second))
	require.Equal(t, "1501ms", postgresDuration(1500*time.Millisecond+time.Nanosecond))
}

func TestPollInterval(t *testing.T) {
	t.Parallel()
	require.Equal(t, 50*time.Millisecond, pollInterval(0))
	require.Equal(t, 200*time.Millisecond, pollInterval(2*time.Second))
	require.Equal(t, time.Second, pollInterval(5*time.Minute))
}

func TestKeyString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "7161976178216365409 (0x6364736368656d61)", keyString(0x6364736368656d61))
	require.Equal(t, "-1 (0xffffffffffffffff)", keyString(-1))
}
