package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Per-call timeouts (StageConfig.Timeout).
//
// A stage with a Timeout runs each worker loop in an inner goroutine under
// a supervisor goroutine, which is the one the epoch's errgroup owns. Each
// call gets its own ctx and timer. At the deadline the timer cancels the
// ctx: an op that watches it returns, and its item fails with a
// *TimeoutError. An op that does not return within the grace period after
// that (a Python call stuck in C, a blocking read) is abandoned: the timer
// marks the call lost and wakes the supervisor, which fails the item,
// gives back what the call held (its NumThreads token, its auto gate
// token, its place in the reorder window) and starts a fresh inner worker
// in its place. The stuck goroutine is then nobody's: when the op returns
// at last, the inner worker sees the mark, releases the result and exits
// without touching the epoch. So Stop and the end of an epoch never wait
// for a lost call, and Stats counts them (StageStats.Abandoned).
//
// Whoever moves a call out of callRunning first (the worker on return, or
// the timer) decides its fate, so the item is accounted for exactly once.

const (
	callRunning int32 = iota
	callReturned
	callLost
)

// TimeoutError is the error of an item whose op call ran past its stage's
// Timeout. Abandoned says the call did not return even after its ctx was
// cancelled and the grace period passed; the engine stopped waiting for it.
type TimeoutError struct {
	After     time.Duration
	Abandoned bool
}

func (e *TimeoutError) Error() string {
	if e.Abandoned {
		return fmt.Sprintf("timed out after %v and did not return when cancelled; the call was abandoned", e.After)
	}
	return fmt.Sprintf("timed out after %v", e.After)
}

// graceAfter is how long a timed-out call may take to return once its ctx
// is cancelled before it is abandoned.
func graceAfter(timeout time.Duration) time.Duration {
	return min(max(timeout/4, 20*time.Millisecond), time.Second)
}

// timedCall is one op call under a timeout.
type timedCall struct {
	state   atomic.Int32
	expired atomic.Bool // the deadline passed (the ctx was cancelled for it)
	desc    string      // the item, described before the op took it
	seq     uint64      // ordered stages: the item's sequence number
	timer   *time.Timer
}

// inner is one inner worker's link to its supervisor.
type inner struct {
	cur  atomic.Pointer[timedCall] // the call running now, if any
	lost chan struct{}             // closed when a call of this worker is abandoned
	call *timedCall                // the lost call; written before lost is closed
}

// loseCall marks tc lost if it is still running and wakes the supervisor.
func (is *inner) loseCall(tc *timedCall) bool {
	if !tc.state.CompareAndSwap(callRunning, callLost) {
		return false
	}
	is.call = tc
	close(is.lost)
	return true
}

// errCallLost is what timed returns when its call was abandoned meanwhile:
// the worker must then return at once and touch nothing (the supervisor
// has settled the item and the worker's tokens).
var errCallLost = errors.New("pipeline: call abandoned")

// timed runs the op on v under the stage's Timeout, for w.call.
func (w *worker) timed(v any, seq uint64) (any, error) {
	s, is := w.s, w.is
	tc := &timedCall{desc: describeOwned(v), seq: seq}
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	grace := graceAfter(s.Timeout)
	// Armed only once tc.timer is set, which the callback reads.
	tc.timer = time.AfterFunc(time.Duration(math.MaxInt64), func() {
		if !tc.expired.Swap(true) {
			cancel()
			tc.timer.Reset(grace)
			return
		}
		is.loseCall(tc)
	})
	tc.timer.Reset(s.Timeout)
	is.cur.Store(tc)
	out, err := safeProcess(ctx, s.Op, v)
	tc.timer.Stop()
	if !tc.state.CompareAndSwap(callRunning, callReturned) {
		if err == nil {
			release(out) // the item already failed; nobody takes this
		}
		releaseErr(err)
		return nil, errCallLost
	}
	is.cur.Store(nil)
	if tc.expired.Load() && !isDone(w.done) {
		if err == nil {
			release(out)
		}
		releaseErr(err)
		return nil, &TimeoutError{After: s.Timeout}
	}
	return out, err
}

// supervise is the goroutine of a worker of a stage with a Timeout, the
// one the errgroup waits for: it runs the worker's loop in an inner
// goroutine, with a copy of w linked to it, and replaces each one whose
// call is abandoned.
func (w *worker) supervise() error {
	defer w.exit()
	for {
		is := &inner{lost: make(chan struct{})}
		iw := *w
		iw.is = is
		res := make(chan error, 1)
		go func() { res <- onThread(w.s.Op, iw.loop)() }()
		select {
		case err := <-res:
			return err
		case <-is.lost:
		case <-w.done:
			// Stopping: a worker in recv or send returns at once, and an
			// op that watches ctx soon; one stuck in a call is abandoned
			// after the grace period rather than holding Stop up.
			t := time.NewTimer(graceAfter(w.s.Timeout))
			select {
			case err := <-res:
				t.Stop()
				return err
			case <-is.lost:
				t.Stop()
			case <-t.C:
				if tc := is.cur.Load(); tc == nil || !is.loseCall(tc) {
					return <-res // between calls: it watches done
				}
			}
		}
		if w.settleLost(is.call) == fateFatal {
			return w.err
		}
		if isDone(w.done) {
			return nil
		}
	}
}

// settleLost fails a lost call's item and gives back what its worker held:
// its place in the active count, its NumThreads token, its auto gate token
// and (ordered stages) its place in the reorder window.
func (w *worker) settleLost(tc *timedCall) fate {
	ep := w.ep
	w.c.abandoned.Add(1)
	w.sl.active.Add(-1)
	if ep.tokens != nil && !w.s.ioBound {
		<-ep.tokens
	}
	f := fateDropped
	if !isDone(w.done) {
		f = w.failed(tc.desc, &TimeoutError{After: w.s.Timeout, Abandoned: true})
	}
	if w.r != nil {
		w.complete(tc.seq, nil, false)
	}
	w.c.leave()
	return f
}
