package pipeline

import (
	"fmt"
	"math/bits"
)

// Failure limits.
//
// A limit is a count (MaxFailures: -1 = none, N = the N+1th failure is
// fatal) or a rate (MaxFailureRate: failures per invocation). A stage with
// a limit of its own (StageConfig.OwnLimit, or a MaxFailureRate) is held to
// it alone; any other stage is held to its MaxFailures, if >= 0, and to the
// pipeline's limit (Config.MaxFailures or Config.MaxFailureRate), counted
// over every stage, the source and the sink. This is SPDL's rule for
// pipe(max_failures=) and build(max_failures=).
//
// A rate is checked only once RateProbation invocations have been counted
// (so the first few failures of a run cannot trip it), and is exceeded when
// failures/invocations > Num/Den. Invocations are an op call of a pipe
// stage, or an input of an aggregate or disaggregate stage; the pipeline's
// rate counts those of the stages without a limit of their own. Since a
// rate (or, with stages of their own limit, the pipeline's count) can be
// crossed by an invocation that succeeded, such stages check their limit
// after each invocation, not only after a failure; the others cost nothing
// per item.

// Rate is a failure rate, Num failures per Den invocations, 0 < Num/Den <= 1.
// The zero Rate is no rate.
type Rate struct{ Num, Den int64 }

// RateProbation is how many invocations a rate limit waits for before it
// is checked.
const RateProbation = 100

// IsSet reports whether r is a rate (Den != 0).
func (r Rate) IsSet() bool { return r.Den != 0 }

func (r Rate) String() string { return fmt.Sprintf("%d/%d", r.Num, r.Den) }

func (r Rate) valid() bool { return r.Num > 0 && r.Den > 0 && r.Num <= r.Den }

// exceeded reports whether failures out of calls exceed r, after the
// probation: failures*Den > Num*calls, in 128 bits.
func (r Rate) exceeded(failures, calls int64) bool {
	if calls < RateProbation || failures <= 0 {
		return false
	}
	h1, l1 := bits.Mul64(uint64(failures), uint64(r.Den))
	h2, l2 := bits.Mul64(uint64(r.Num), uint64(calls))
	return h1 > h2 || (h1 == h2 && l1 > l2)
}

// watchLimits says whether a stage must count its invocations and check
// its limits after each one (see above): under a rate, or when the
// pipeline's count can be crossed by the failures of a stage with a limit
// of its own, which do not check it.
func watchLimits(s *stageInfo, cfg *Config, anyOwn bool) bool {
	if s.own {
		return s.MaxFailureRate.IsSet()
	}
	return cfg.MaxFailureRate.IsSet() || (cfg.MaxFailures >= 0 && anyOwn)
}

// overLimit returns the fatal error when s (with counters c) or the
// pipeline is over its limit; last is the failure to name. Each limit is
// reported once: by the first goroutine that finds it crossed.
func (ep *epoch) overLimit(s *stageInfo, c *stageCounters, last *ItemError) error {
	sf := c.failures.Load()
	if r := s.MaxFailureRate; r.IsSet() {
		if n := c.calls.Load(); r.exceeded(sf, n) && c.over.CompareAndSwap(false, true) {
			return &FailureLimitError{Stage: s.Name, Failures: int(sf), Calls: int(n), Rate: r, Last: last}
		}
		return nil
	}
	if s.MaxFailures >= 0 && sf > int64(s.MaxFailures) && c.over.CompareAndSwap(false, true) {
		return &FailureLimitError{Stage: s.Name, Failures: int(sf), Limit: s.MaxFailures, Last: last}
	}
	if s.own {
		return nil
	}
	tf := ep.failures.Load()
	if r := ep.p.cfg.MaxFailureRate; r.IsSet() {
		if n := ep.calls.Load(); r.exceeded(tf, n) && ep.over.CompareAndSwap(false, true) {
			return &FailureLimitError{Failures: int(tf), Calls: int(n), Rate: r, Last: last}
		}
		return nil
	}
	if m := ep.p.cfg.MaxFailures; m >= 0 && tf > int64(m) && ep.over.CompareAndSwap(false, true) {
		return &FailureLimitError{Failures: int(tf), Limit: m, Last: last}
	}
	return nil
}

// invoked counts one invocation of a watched stage and, if check (it
// succeeded: a failure is checked by itemFailed), returns the fatal error
// when that put the stage or the pipeline over its limit.
func (ep *epoch) invoked(s *stageInfo, c *stageCounters, check bool) error {
	if s.MaxFailureRate.IsSet() {
		c.calls.Add(1)
	} else if !s.own && ep.p.cfg.MaxFailureRate.IsSet() {
		ep.calls.Add(1)
	}
	if !check {
		return nil
	}
	return ep.overLimit(s, c, ep.lastFail.Load())
}

// ErrorReleaser is implemented by an error that holds something until it
// is dropped, such as a host's exception object kept so that the host can
// re-raise it. The engine calls ReleaseError once it will not report the
// error any more: an item failure that was not fatal once it is counted,
// an error that came with a cancellation at once, and the fatal errors of
// an epoch when the next Start discards it. It may be called more than
// once for the same error, and must be safe from any goroutine.
type ErrorReleaser interface {
	ReleaseError()
}

// releaseErr releases err if it (or an error it wraps) holds something.
func releaseErr(err error) {
	if err == nil {
		return
	}
	var r ErrorReleaser
	if asReleaser(err, &r) {
		r.ReleaseError()
	}
}

func asReleaser(err error, r *ErrorReleaser) bool {
	for err != nil {
		if x, ok := err.(ErrorReleaser); ok {
			*r = x
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}
