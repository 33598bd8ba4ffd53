// Package cliflag parses the command lines of the project's commands, whose
// flags may stand before or after the subcommand.
package cliflag

import "flag"

// ParseInterspersed parses args with fs, letting flags and positional
// arguments mix, and returns the positional arguments in order. Everything
// after "--" is positional. It returns flag.ErrHelp for -h and -help, and
// fs's parse error otherwise (fs should use flag.ContinueOnError).
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
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
