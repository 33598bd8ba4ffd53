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

// ParseCommand splits off the command; help in any form is ErrHelp; a bad
// flag or a missing command is a *UsageError.
func TestParseCommand(t *testing.T) {
	t.Parallel()
	newSet := func() *flag.FlagSet {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("url", "", "")
		return fs
	}

	command, rest, err := ParseCommand(newSet(), []string{"--url", "u", "up-to", "7"})
	require.NoError(t, err)
	require.Equal(t, "up-to", command)
	require.Equal(t, []string{"7"}, rest)

	for _, tc := range []struct {
		args  []string
		topic []string
	}{
		{[]string{"help"}, nil},
		{[]string{"-h"}, nil},
		{[]string{"--url", "u", "-h", "status"}, nil},
		{[]string{"status", "--help"}, []string{"status"}},
		{[]string{"receipt", "--url=u", "show", "-h", "x"}, []string{"receipt", "show"}},
		{[]string{"help", "status"}, []string{"status"}},
		{[]string{"help", "--url", "u", "receipt", "show"}, []string{"receipt", "show"}},
	} {
		_, _, err := ParseCommand(newSet(), tc.args)
		require.ErrorIs(t, err, ErrHelp, "%q", tc.args)
		require.Equal(t, tc.topic, HelpTopic(err), "%q", tc.args)
	}
	require.Nil(t, HelpTopic(Usagef("x")))
	for want, args := range map[string][]string{
		"missing command":               {"--url", "u"},
		"flag provided but not defined": {"status", "--nope"},
	} {
		_, _, err := ParseCommand(newSet(), args)
		var usage *UsageError
		require.ErrorAs(t, err, &usage)
		require.Contains(t, usage.Error(), want)
	}
}
