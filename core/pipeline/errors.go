package pipeline

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel results of [Pipeline.Next]. Compare with errors.Is.
var (
	// ErrEndOfData: the epoch delivered every item. Start begins the next one.
	ErrEndOfData = errors.New("pipeline: end of data")
	// ErrTimeout: no item arrived within the timeout; the epoch goes on.
	ErrTimeout = errors.New("pipeline: timed out waiting for an item")
	// ErrNotStarted: no epoch is running (Start was never called, or the
	// epoch was stopped).
	ErrNotStarted = errors.New("pipeline: no epoch running; call Start")
)

// errStopped is what Next returns after Stop; it is ErrNotStarted for
// errors.Is, with a message that says why.
var errStopped = fmt.Errorf("%w (the epoch was stopped)", ErrNotStarted)

// StopAbandonedError is what Stop returns when goroutines of the epoch had
// not returned Config.StopGrace after it was cancelled: calls stuck in
// foreign code (a Python call that never returns). They were abandoned:
// they run on, and what they produce is released when they return.
type StopAbandonedError struct {
	After time.Duration
	Calls string // which goroutines: "2 calls of stage \"decode\"", "the source's next item"
}

func (e *StopAbandonedError) Error() string {
	return fmt.Sprintf("pipeline: stopped, but %s had not returned %v after the stop; abandoned (they run on, and their results will be dropped)", e.Calls, e.After)
}

// ItemError is one failed item. The item is dropped; the pipeline goes on
// unless a failure limit is exceeded (see [FailureLimitError]).
type ItemError struct {
	Stage string // the stage's name
	Item  string // the item, as value.Describe renders it (see describeOwned)
	Err   error

	where string // "pipe 1": the stage's kind and index, for the message
}

func (e *ItemError) Error() string {
	if e.where == "" {
		return fmt.Sprintf("stage %q: item %s: %v", e.Stage, e.Item, e.Err)
	}
	return fmt.Sprintf("stage %q (%s): item %s: %v", e.Stage, e.where, e.Item, e.Err)
}

func (e *ItemError) Unwrap() error { return e.Err }

// ItemFailure is what a Source's Iterator returns from Next for one item
// it could not produce (a missing file, a corrupt tar member, an object that
// 404s). That item fails like a stage's item: it is counted in the source's
// Stats.Failures and against Config.MaxFailures, shown in RecentErrors as an
// *ItemError of stage "source", and the source goes on with the next one.
// Any other error from Next is fatal.
type ItemFailure struct {
	Item string // names the item: a path, a URL, "shard.tar: sample 000123"
	Err  error
}

func (e *ItemFailure) Error() string { return fmt.Sprintf("%s: %v", e.Item, e.Err) }

func (e *ItemFailure) Unwrap() error { return e.Err }

// PanicError is a panic recovered from an Op or a Source, with the stack of
// the goroutine that panicked. Error() is one line; Stack has the rest.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error (panic(err)).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// FailureLimitError is fatal: a stage (Stage != "") or the whole pipeline
// (Stage == "") failed more items than its limit allows (limits.go).
type FailureLimitError struct {
	Stage    string // "" for the pipeline-wide limit (Config.MaxFailures or MaxFailureRate)
	Failures int
	Limit    int  // a count limit
	Rate     Rate // a rate limit (Rate.IsSet); Limit is then unused
	Calls    int  // with a rate: the invocations it was measured over
	// Last is the failure that crossed the limit; with a rate crossed by
	// an invocation that succeeded, the last failure before it (or nil).
	Last *ItemError
}

func (e *FailureLimitError) Error() string {
	who := "pipeline"
	if e.Stage != "" {
		who = fmt.Sprintf("stage %q", e.Stage)
	}
	s := fmt.Sprintf("%s exceeded max_failures=%d (%d failures)", who, e.Limit, e.Failures)
	if e.Rate.IsSet() {
		s = fmt.Sprintf("%s exceeded max_failures=%s (%d failures in %d calls: %.1f%% > %.1f%%)", who, e.Rate,
			e.Failures, e.Calls, 100*float64(e.Failures)/float64(max(e.Calls, 1)), 100*float64(e.Rate.Num)/float64(e.Rate.Den))
	}
	if e.Last != nil {
		s += "; last: " + e.Last.Error()
	}
	return s
}

func (e *FailureLimitError) Unwrap() error {
	if e.Last == nil {
		return nil // not a typed nil inside an interface
	}
	return e.Last
}

// SourceError is fatal: Source.Open, Iterator.Next or Iterator.Close failed
// (or panicked: Err is then a *PanicError).
type SourceError struct {
	Err error
}

func (e *SourceError) Error() string { return "source: " + e.Err.Error() }

func (e *SourceError) Unwrap() error { return e.Err }
