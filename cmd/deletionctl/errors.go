package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// opError is a command's failure: what it did (op, such as `approve of
// request X by "bob"`), why it failed (err) and what to do next (next, ""
// when err's own text says it). report prints it as one line: op, the
// reason without the context the lower layers wrapped it in, and next.
type opError struct {
	op   string
	err  error
	next string
}

// Error is the whole chain, as %v shows it; report prints the short form.
func (e *opError) Error() string {
	msg := e.op + ": " + e.err.Error()
	if e.next != "" {
		msg += "; " + e.next
	}
	return msg
}

// Unwrap returns the cause, which the exit code is decided from.
func (e *opError) Unwrap() error { return e.err }

// failed returns err as an *opError of op with what to do next, or nil
// when err is nil.
func failed(op string, err error, next string) error {
	if err == nil {
		return nil
	}
	return &opError{op: op, err: err, next: next}
}

// kinds are the sentinels that classify an error. Each of lifecycle's
// typed errors is "<sentinel>: <detail>" unwrapping to both, as is
// fmt.Errorf("%w: %w", sentinel, cause): the detail is the reason.
var kinds = []error{
	lifecycle.ErrRefused, lifecycle.ErrNotFound, lifecycle.ErrInvalidInput, lifecycle.ErrAccessDenied,
	lifecycle.ErrNothingToClaim, executor.ErrBlocked, executor.ErrRetryScheduled,
}

// kindWords say, in the one line, what an executor sentinel means.
var kindWords = map[error]string{
	executor.ErrBlocked:        "blocked the request: ",
	executor.ErrRetryScheduled: "scheduled a retry: ",
}

// reason is err's reason for a person: the detail of the outermost
// classified error in its chain, without the context wrapped around it
// (which repeats the command's own) and without the sentinels' prefixes
// inside it; err's text when nothing classifies it.
func reason(err error) string {
	msg := err.Error()
	if c := classify(err); c != nil {
		msg = kindWords[c.kind] + c.detail.Error()
		if errors.Is(c.kind, lifecycle.ErrNotFound) && bareName.MatchString(msg) {
			msg += " does not exist"
		}
	}
	for _, k := range kinds {
		msg = strings.ReplaceAll(msg, k.Error()+": ", "")
	}
	return strings.TrimPrefix(msg, "ERROR: ")
}

// bareName is a not-found detail that only names the record ("deletion
// <id>", "community <id>").
var bareName = regexp.MustCompile(`^(deletion|community) [^ ]+$`)

// classified is an error that unwraps to exactly a sentinel of kinds and
// its detail.
type classified struct{ kind, detail error }

// classify finds, depth first, the outermost classified error of err's
// tree, or nil.
func classify(err error) *classified {
	switch e := any(err).(type) {
	case interface{ Unwrap() []error }:
		children := e.Unwrap()
		if len(children) == 2 && slices.Contains(kinds, children[0]) {
			return &classified{kind: children[0], detail: children[1]}
		}
		for _, child := range children {
			if c := classify(child); c != nil {
				return c
			}
		}
	case interface{ Unwrap() error }:
		return classify(e.Unwrap())
	}
	return nil
}

// describe is err's one line, without the exit code's word: for an
// *opError, what was done, why it failed and what to do (not for a record
// that does not exist: the advice is for one that does); otherwise the
// reason.
func describe(err error) string {
	var oe *opError
	if !errors.As(err, &oe) {
		return reason(err)
	}
	msg := oe.op + ": " + reason(oe.err)
	if oe.next != "" && !errors.Is(oe.err, lifecycle.ErrNotFound) {
		msg += "; " + oe.next
	}
	return msg
}

// refusedf returns a refusal (exit 3) whose text is the formatted reason.
func refusedf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", lifecycle.ErrRefused, fmt.Sprintf(format, args...))
}
