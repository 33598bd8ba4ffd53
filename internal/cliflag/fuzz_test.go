package cliflag

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fzFlagSet returns the flag set the fuzz targets parse with: a string, a
// bool and an int flag.
func fzFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("url", "", "")
	fs.Bool("v", false, "")
	fs.Int("n", 0, "")
	return fs
}

// fzSetFlags returns the flags set on fs as --name=value arguments, in name
// order.
func fzSetFlags(fs *flag.FlagSet) []string {
	var flags []string
	fs.Visit(func(f *flag.Flag) { flags = append(flags, "--"+f.Name+"="+f.Value.String()) })
	return flags
}

// fzIsSubsequence reports whether sub appears in seq in order.
func fzIsSubsequence(sub, seq []string) bool {
	for _, s := range seq {
		if len(sub) > 0 && sub[0] == s {
			sub = sub[1:]
		}
	}
	return len(sub) == 0
}

// fzLooksLikeFlag reports whether the flag package would try to parse arg as
// a flag.
func fzLooksLikeFlag(arg string) bool { return len(arg) >= 2 && arg[0] == '-' }

// FuzzParseInterspersed parses arbitrary argument lists (NUL-separated). The
// positional arguments come back in their order, as a subsequence of args;
// the parse is reproduced exactly by the canonical command line (the flags
// set, then "--", then the positional arguments), and, when no positional
// argument looks like a flag, by one that interleaves flags and positional
// arguments. ParseCommand agrees with ParseInterspersed: the first
// positional argument is the command, "help", -h and -help ask for help,
// and every other failure is a *UsageError.
func FuzzParseInterspersed(f *testing.F) {
	for _, args := range [][]string{
		{"up-to", "--url", "u", "7"},
		{"--url=v", "status", "--", "--url", "w"},
		{"status", "-h"},
		{"status", "--nope"},
		{"-v", "a", "-n", "3", "b", "--v=false", "c"},
		{"--", "--"},
		{"-", "--url", "-", "x"},
		{"help", "-n=1"},
		{"-n", "x"},
		{"--url"},
		{"", "---url=a", "-=x"},
		{},
	} {
		f.Add(strings.Join(args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, argString string) {
		var args []string
		if argString != "" {
			args = strings.Split(argString, "\x00")
		}
		fs := fzFlagSet()
		positional, err := ParseInterspersed(fs, slices.Clone(args))

		command, rest, cmdErr := ParseCommand(fzFlagSet(), slices.Clone(args))
		var usageErr *UsageError
		switch {
		case errors.Is(err, flag.ErrHelp):
			require.ErrorIs(t, cmdErr, ErrHelp)
			return
		case err != nil:
			require.ErrorAs(t, cmdErr, &usageErr)
			require.Equal(t, err.Error(), usageErr.Msg)
			return
		case len(positional) == 0:
			require.ErrorAs(t, cmdErr, &usageErr)
			require.Equal(t, "missing command", usageErr.Msg)
		case positional[0] == "help":
			require.ErrorIs(t, cmdErr, ErrHelp)
		default:
			require.NoError(t, cmdErr)
			require.Equal(t, positional[0], command)
			require.Equal(t, positional[1:], rest)
		}

		require.True(t, fzIsSubsequence(positional, args), "positional %q is not a subsequence of %q", positional, args)
		flags := fzSetFlags(fs)

		canonical := append(append(slices.Clone(flags), "--"), positional...)
		again := fzFlagSet()
		got, err := ParseInterspersed(again, canonical)
		require.NoError(t, err, "canonical form %q of %q", canonical, args)
		require.Len(t, got, len(positional))
		require.True(t, len(got) == 0 || slices.Equal(positional, got), "%q parsed to %q, its canonical form %q to %q", args, positional, canonical, got)
		require.Equal(t, flags, fzSetFlags(again))

		if slices.ContainsFunc(positional, fzLooksLikeFlag) {
			return
		}
		// Interleave: positional, flag, positional, flag, ...
		var mixed []string
		for i := range max(len(flags), len(positional)) {
			if i < len(positional) {
				mixed = append(mixed, positional[i])
			}
			if i < len(flags) {
				mixed = append(mixed, flags[i])
			}
		}
		again = fzFlagSet()
		got, err = ParseInterspersed(again, mixed)
		require.NoError(t, err, "interleaved form %q of %q", mixed, args)
		require.True(t, slices.Equal(positional, got), "%q parsed to %q, its interleaved form %q to %q", args, positional, mixed, got)
		require.Equal(t, flags, fzSetFlags(again))
	})
}
