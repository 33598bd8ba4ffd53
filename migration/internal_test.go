package migration

import (
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
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

// Every migration file has a legacy probe, and every probe a file: adding a
// migration without one fails here, naming the file.
func TestLegacyProbesCoverEveryMigration(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(communitydeletion.Migrations(), ".")
	require.NoError(t, err)
	files := map[int64]string{}
	for _, entry := range entries {
		prefix, _, _ := strings.Cut(entry.Name(), "_")
		version, err := strconv.ParseInt(prefix, 10, 64)
		require.NoError(t, err, entry.Name())
		files[version] = entry.Name()
		if _, ok := legacyProbes[version]; !ok {
			t.Errorf("migration %s has no legacy probe: add the objects its Up creates to legacyProbes "+
				"in migration/probes.go (version %d), then run go test ./migration/ -run Probe", entry.Name(), version)
		}
	}
	for version, checks := range legacyProbes {
		if _, ok := files[version]; !ok {
			t.Errorf("legacyProbes has version %d but no migration file has that version", version)
		}
		require.NotEmpty(t, checks, "version %d", version)
	}
}

func TestVersionRanges(t *testing.T) {
	t.Parallel()
	require.Empty(t, versionRanges(nil))
	require.Equal(t, "4", versionRanges([]int64{4}))
	require.Equal(t, "1-8", versionRanges([]int64{1, 2, 3, 4, 5, 6, 7, 8}))
	require.Equal(t, "1-2, 4, 6-7", versionRanges([]int64{1, 2, 4, 6, 7}))
}
