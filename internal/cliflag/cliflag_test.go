package cliflag

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// Flags may come before, between and after positional arguments; "--" ends
// flag parsing; -h is flag.ErrHelp; an unknown flag is an error.
func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	newSet := func() (*flag.FlagSet, *string) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return fs, fs.String("url", "", "")
	}

	fs, url := newSet()
	positional, err := ParseInterspersed(fs, []string{"up-to", "--url", "u", "7"})
	require.NoError(t, err)
	require.Equal(t, []string{"up-to", "7"}, positional)
	require.Equal(t, "u", *url)

	fs, url = newSet()
	positional, err = ParseInterspersed(fs, []string{"--url=v", "status", "--", "--url", "w"})
	require.NoError(t, err)
	require.Equal(t, []string{"status", "--url", "w"}, positional)
	require.Equal(t, "v", *url)

	fs, _ = newSet()
	_, err = ParseInterspersed(fs, []string{"status", "-h"})
	require.ErrorIs(t, err, flag.ErrHelp)

	fs, _ = newSet()
	_, err = ParseInterspersed(fs, []string{"status", "--nope"})
	require.Error(t, err)
	require.NotErrorIs(t, err, flag.ErrHelp)
}
