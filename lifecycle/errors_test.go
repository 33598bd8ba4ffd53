package lifecycle

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestStaleLeaseClassifierDoesNotSwallowOtherAccessDenials(t *testing.T) {
	t.Parallel()

	stale := error(&StaleLeaseError{RequestID: uuid.New(), Owner: "owner", Generation: 1})
	require.True(t, IsStaleLease(stale))
	require.ErrorIs(t, stale, ErrStaleLease)
	require.ErrorIs(t, stale, ErrAccessDenied)
	require.NotErrorIs(t, stale, ErrRefused)
	require.True(t, IsStaleLease(fmt.Errorf("advance: %w", stale)), "wrapping keeps the class")

	ordinary := deniedf("ordinary authorization failure")
	require.ErrorIs(t, ordinary, ErrAccessDenied)
	require.False(t, IsStaleLease(ordinary))
	require.False(t, IsStaleLease(ErrAccessDenied))
	require.False(t, IsStaleLease(refusef("refused")))
	require.False(t, IsStaleLease(nil))
}

func TestStaleLeaseErrorMessage(t *testing.T) {
	t.Parallel()

	id := uuid.MustParse("6f1c2b4e-0d7a-4c1e-9a55-3b8e2f9d1c07")
	err := &StaleLeaseError{RequestID: id, Owner: "executor-1", Generation: 3}
	require.Equal(t, `stale deletion lease 6f1c2b4e-0d7a-4c1e-9a55-3b8e2f9d1c07 (owner "executor-1", generation 3)`, err.Error())

	var target *StaleLeaseError
	require.ErrorAs(t, fmt.Errorf("wrapped: %w", err), &target)
	require.Equal(t, int64(3), target.Generation)
}

func TestServingWritesNotDrainedError(t *testing.T) {
	t.Parallel()

	id := uuid.MustParse("0b7e4a52-51f3-4f0e-8d0c-2f6a9b1e7d33")
	err := error(&ServingWritesNotDrainedError{CommunityID: id, ActiveCount: 2, Operations: []string{"post_event", "upload"}})
	require.ErrorIs(t, err, ErrRefused)
	require.NotErrorIs(t, err, ErrAccessDenied)
	require.False(t, IsStaleLease(err))
	require.Equal(t,
		"serving writes not drained for community 0b7e4a52-51f3-4f0e-8d0c-2f6a9b1e7d33: 2 active write lease(s) (operations: post_event, upload)",
		err.Error())
	require.NotContains(t, err.Error(), "\n")

	var target *ServingWritesNotDrainedError
	require.ErrorAs(t, fmt.Errorf("drain: %w", err), &target)
	require.Equal(t, int64(2), target.ActiveCount)

	none := &ServingWritesNotDrainedError{CommunityID: id, ActiveCount: 1}
	require.Contains(t, none.Error(), "(operations: none)")
}

func TestClassifiedErrorHelpers(t *testing.T) {
	t.Parallel()

	cause := errors.New("connection reset")
	cases := []struct {
		err  error
		kind error
	}{
		{refusef("frozen chunk %d: %w", 7, cause), ErrRefused},
		{invalidf("bad %s: %w", "thing", cause), ErrInvalidInput},
		{notFoundf("request %s: %w", "x", cause), ErrNotFound},
		{deniedf("operator %q: %w", "bob", cause), ErrAccessDenied},
	}
	for _, tc := range cases {
		require.ErrorIs(t, tc.err, tc.kind)
		require.ErrorIs(t, tc.err, cause, "a %w argument stays reachable")
		require.Equal(t, tc.kind.Error()+": ", tc.err.Error()[:len(tc.kind.Error())+2])
		for _, other := range []error{ErrRefused, ErrInvalidInput, ErrNotFound, ErrAccessDenied, ErrStaleLease} {
			if other != tc.kind { //nolint:errorlint // compares two sentinels, not a returned error
				require.NotErrorIs(t, tc.err, other)
			}
		}
	}
	require.Equal(t, "lifecycle: refused: frozen chunk 7: connection reset", cases[0].err.Error())
}
