package exitcode

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// all is every exit code, by name.
var all = map[string]int{
	"OK": OK, "Failure": Failure, "Usage": Usage, "Refused": Refused,
	"NotFound": NotFound, "InvalidInput": InvalidInput, "Pending": Pending, "LockTimeout": LockTimeout,
}

// Each number has one meaning, and the README's table lists exactly these
// numbers.
func TestTheREADMEListsEveryCodeOnce(t *testing.T) {
	t.Parallel()
	byCode := map[int]string{}
	for name, code := range all {
		other, dup := byCode[code]
		require.False(t, dup, "%s and %s share exit code %d", name, other, code)
		byCode[code] = name
	}

	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, section, found := strings.Cut(string(readme), "\n## Exit codes\n")
	require.True(t, found, "README.md has an \"## Exit codes\" section")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile(`(?m)^\| (\d+) \|`)
	listed := map[int]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		code, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		require.False(t, listed[code], "README lists exit code %d twice", code)
		listed[code] = true
		_, known := byCode[code]
		require.True(t, known, "README lists exit code %d, which package exitcode does not have", code)
	}
	for code, name := range byCode {
		require.True(t, listed[code], "README's exit code table lacks %d (%s)", code, name)
	}
}
