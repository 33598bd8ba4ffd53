// Package cliflag parses the command lines of the project's commands, whose
// flags may stand before or after the subcommand.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
)

// UsageError is a malformed command line; the commands exit 2 on it.
type UsageError struct{ Msg string }

// Error returns the message that says what is wrong with the command line.
func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a *UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ErrHelp reports that usage was asked for: -h, -help or the command "help".
var ErrHelp = errors.New("help requested")

// HelpError is the ErrHelp that ParseCommand returns: Topic is what help was
// asked for, the positional arguments before -h or -help, or after the
// command "help" ("approve -h" and "help approve" ask for approve's), and
// empty for the whole usage. It matches ErrHelp under errors.Is.
type HelpError struct{ Topic []string }

// Error says that help was asked for.
func (e *HelpError) Error() string { return ErrHelp.Error() }

// Is reports whether target is ErrHelp.
func (e *HelpError) Is(target error) bool { return target == ErrHelp }

// HelpTopic returns the topic of a *HelpError in err's chain, or nil.
func HelpTopic(err error) []string {
	if h, ok := errors.AsType[*HelpError](err); ok {
		return h.Topic
	}
	return nil
}

// ParseCommand parses args with fs, flags and positional arguments mixed,
// and returns the first positional argument as the command and the others
// as its arguments. It returns a *HelpError (matching ErrHelp) when usage
// was asked for, and a *UsageError for a bad flag or a missing command.
func ParseCommand(fs *flag.FlagSet, args []string) (command string, rest []string, err error) {
	positional, err := ParseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return "", nil, helpFor(positional)
	}
	if err != nil {
		return "", nil, Usagef("%v", err)
	}
	if len(positional) == 0 {
		return "", nil, Usagef("missing command")
	}
	if positional[0] == "help" {
		return "", nil, helpFor(positional[1:])
	}
	return positional[0], positional[1:], nil
}

// helpFor is the *HelpError of topic; an empty topic is nil, the whole usage.
func helpFor(topic []string) *HelpError {
	if len(topic) == 0 {
		topic = nil
	}
	return &HelpError{Topic: topic}
}

// ParseInterspersed parses args with fs, letting flags and positional
// arguments mix, and returns the positional arguments in order. Everything
// after "--" is positional. It returns flag.ErrHelp for -h and -help, with
// the positional arguments that came before it, and fs's parse error
// otherwise (fs should use flag.ContinueOnError).
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return positional, err
			}
			return nil, err
		}
		remaining := fs.Args()
		if consumed := len(rest) - len(remaining); consumed > 0 && rest[consumed-1] == "--" {
			return append(positional, remaining...), nil
		}
		if len(remaining) == 0 {
			return positional, nil
		}
		positional = append(positional, remaining[0])
		rest = remaining[1:]
	}
}
