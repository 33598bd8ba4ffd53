package lifecycle

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestErrorsAreUTF8Bounded(t *testing.T) {
	t.Parallel()

	input := strings.Repeat("x", 4095) + "🛸"
	bounded := boundText(input, MaxErrorBytes)
	require.LessOrEqual(t, len(bounded), MaxErrorBytes)
	require.True(t, utf8.ValidString(bounded))
	require.Equal(t, strings.Repeat("x", 4095), bounded, "the emoji does not fit and is dropped whole")
}

func TestBoundTextKeepsShortTextAndCutsOnRuneBoundaries(t *testing.T) {
	t.Parallel()

	require.Equal(t, "short", boundText("short", MaxErrorBytes))
	require.Empty(t, boundText("", 10))
	require.Empty(t, boundText("anything", 0))
	require.Equal(t, "exact", boundText("exact", 5))
	require.Equal(t, "héllo", boundText("héllo wörld", 6))
	require.Equal(t, "h", boundText("hé", 2), "never splits the two bytes of é")

	valid := "añ🛸zé" + strings.Repeat("ü", 10)
	for limit := 0; limit <= len(valid)+1; limit++ {
		got := boundText(valid, limit)
		require.LessOrEqual(t, len(got), limit)
		require.True(t, utf8.ValidString(got))
		require.True(t, strings.HasPrefix(valid, got))
		// The longest fitting prefix: the next rune would not have fit.
		if len(got) < len(valid) {
			_, size := utf8.DecodeRuneInString(valid[len(got):])
			require.Greater(t, len(got)+size, limit)
		}
	}
}

func TestBoundTextNeverYieldsUnstorableText(t *testing.T) {
	t.Parallel()

	inputs := []string{
		"\xff",
		"abc\xffdef",
		"\xe2\x82",       // a truncated three-byte rune
		"ok\xf0\x9f\x9b", // a truncated emoji at the end
		"nul\x00byte",    // PostgreSQL text rejects NUL
		strings.Repeat("\xc3", 5000),
		strings.Repeat("x", 4095) + "\xf0\x9f\x9b\xb8\xff",
	}
	for _, in := range inputs {
		for _, limit := range []int{1, 2, 3, 4, 5, 8, MaxErrorBytes} {
			got := boundText(in, limit)
			require.LessOrEqual(t, len(got), limit, "%q bounded to %d", in, limit)
			require.True(t, utf8.ValidString(got), "%q bounded to %d", in, limit)
			require.NotContains(t, got, "\x00")
		}
	}
	require.Equal(t, "abc\uFFFDdef", boundText("abc\xffdef", MaxErrorBytes))
	require.Equal(t, "abc", boundText("abc\xffdef", 5), "a replacement that does not fit is dropped whole")
	require.Equal(t, "nul\uFFFDbyte", boundText("nul\x00byte", MaxErrorBytes))
}

func TestValidateOperator(t *testing.T) {
	t.Parallel()

	name, err := validateOperator("  alice@example.com\t\n", "requested_by")
	require.NoError(t, err)
	require.Equal(t, "alice@example.com", name)

	name, err = validateOperator("\u00a0bob smith\u2003", "approved_by")
	require.NoError(t, err)
	require.Equal(t, "bob smith", name, "Unicode white space is trimmed too")

	longest := strings.Repeat("é", MaxOperatorBytes/2)
	name, err = validateOperator(" "+longest+" ", "lease_owner")
	require.NoError(t, err)
	require.Equal(t, longest, name)

	for _, bad := range []string{"", "   ", "\t\n\u00a0", longest + "x", "bad\xffname", "nul\x00name"} {
		_, err := validateOperator(bad, "requested_by")
		require.ErrorIs(t, err, ErrInvalidInput, "%q", bad)
		require.Contains(t, err.Error(), "requested_by")
	}
}
