// Package clitest holds what the tests of the project's commands share: the
// contract of how a command answers a command line it did not accept. It is
// test support, not for use outside this module's tests.
package clitest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/cliflag"
	"github.com/tombstoneworks/communitydeletion/internal/exitcode"
)

// Command is what a test knows of a command: its name, its usage text and
// its run function, which returns the process exit code. Help, when set,
// returns the help a command line that asked for help must print (a
// command with help per subcommand); without it, that is always Usage.
type Command struct {
	Name  string
	Usage string
	Help  func(args []string) string
	Run   func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// SplitArgs splits a fuzzer's string into arguments at NUL bytes; the empty
// string is no arguments.
func SplitArgs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// RequireRefusal requires that c answers args, which its parser refused
// with parseErr, as the commands promise: a request for help prints the
// usage (or c.Help's) on stdout and exits 0; any other refusal must be a
// *cliflag.UsageError and prints one line on stderr, naming the command and
// pointing at -h, and exits 2.
func (c Command) RequireRefusal(t testing.TB, args []string, parseErr error) {
	t.Helper()
	var usageErr *cliflag.UsageError
	require.True(t, errors.Is(parseErr, cliflag.ErrHelp) || errors.As(parseErr, &usageErr),
		"%q: unexpected error %v", args, parseErr)
	var stdout, stderr bytes.Buffer
	code := c.Run(context.Background(), args, &stdout, &stderr)
	if errors.Is(parseErr, cliflag.ErrHelp) {
		require.Equal(t, exitcode.OK, code)
		want := c.Usage
		if c.Help != nil {
			want = c.Help(args)
		}
		require.Equal(t, want, stdout.String())
		require.Empty(t, stderr.String())
		return
	}
	require.Equal(t, exitcode.Usage, code, "%q", args)
	require.Empty(t, stdout.String())
	line := stderr.String()
	require.True(t, strings.HasPrefix(line, c.Name+": ") &&
		strings.HasSuffix(line, " (run '"+c.Name+" -h' for usage)\n"), "%q: stderr %q", args, line)
	require.Equal(t, 1, strings.Count(line, "\n"), "%q: one line on stderr, got %q", args, line)
	require.NotContains(t, line, "\r", "%q", args)
}
