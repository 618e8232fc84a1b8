package pipeline

import (
	"context"
	"errors"
	"runtime/debug"
	"time"
)

// worker is one goroutine of the epoch that moves items: the source's, a
// pipe stage's worker, or an aggregate or disaggregate stage's goroutine.
// It holds what that goroutine reads, runs and writes, so the steps of its
// loop are methods on it. launch builds one per goroutine; a supervised
// worker (a stage with a Timeout) gives each inner goroutine a copy.
type worker struct {
	ep       *epoch
	s        *stageInfo
	c        *stageCounters
	sl       *slot // this goroutine's counters
	in       <-chan any
	out      chan<- any
	closeOut bool     // the stage closes out when its last worker returns; false for the sink, which the waiter closes
	r        *reorder // OrderInput stages; nil otherwise
	is       *inner   // stages with a Timeout: this inner goroutine's link to its supervisor; nil otherwise

	// sink is Config.SinkEncode on the goroutines that send to the sink
	// (the last stage's, or the source's when there are no stages); nil
	// elsewhere.
	sink func(any) (any, error)

	err error // the fatal error this worker hit (fateFatal), for the errgroup

	// at is where the worker is: 0 the source, i+1 stage i. ctx is that
	// stage's context (cancelled by Stop, or by a fatal error here or
	// downstream: see epoch.failAt), done its Done channel.
	at   int
	ctx  context.Context
	done <-chan struct{}
}

// fate is what became of an item a worker took: the one result of each
// step of a worker's loop.
type fate int8

const (
	fatePassed  fate = iota // it went on (from call: the op returned a result to pass on)
	fateDropped             // it failed and was counted, or was released as the epoch ends; the worker goes on
	fateFatal               // its failure exceeded a limit: the epoch failed and w.err is set; the worker returns
	fateLost                // its call was abandoned after the stage's Timeout: the worker returns and touches nothing (timeout.go)
	fateEnd                 // the input is closed or the epoch cancelled: the worker returns
)

// run is the goroutine of a pipe worker without a Timeout.
func (w *worker) run() error {
	// Emitting happens only inside one or orderedOne, so once the last
	// worker is here nobody can send to out any more.
	defer w.exit()
	if err := w.loop(); err != nil {
		return err
	}
	return w.flush() // flush.go: a Flusher op's end of input
}

// exit is deferred by every pipe worker (by its supervisor in a stage
// with a Timeout). The last to return closes workersDone, and out unless
// out is the sink.
func (w *worker) exit() {
	c := w.c
	if c.remaining.Add(-1) == 0 {
		if w.closeOut {
			close(w.out)
		}
		close(c.workersDone)
		if c.onDone != nil {
			c.onDone()
		}
	}
}

// loop is the body of a pipe worker (of an inner goroutine, in a stage
// with a Timeout): it takes items one at a time until the input ends, the
// epoch is cancelled or fails, or its call is lost.
func (w *worker) loop() error {
	for w.c.enter(w.done) {
		var f fate
		if w.r != nil {
			f = w.orderedOne()
		} else {
			f = w.one()
		}
		if f == fateLost {
			return nil // the supervisor settled the item and gave back the tokens
		}
		w.c.leave()
		if f == fateFatal || f == fateEnd {
			return w.err
		}
	}
	return nil
}

// one takes one item, runs the op and passes the result on (an unordered
// stage).
func (w *worker) one() fate {
	if w.c.stopped.Load() {
		return fateEnd
	}
	v, ok := recv(w.in, w.done)
	if !ok {
		return fateEnd
	}
	w.sl.in.Add(1)
	if isDone(w.done) {
		release(v)
		return fateEnd
	}
	res, f := w.call(v, 0)
	if f != fatePassed {
		return f
	}
	return w.emit(res) // emit.go: one item, none, or a stream's
}

// pass sends v to w.out, through Config.SinkEncode first on the goroutines
// that feed the sink. It returns fatePassed; fateDropped or fateFatal when
// the hook failed the item; fateEnd when the epoch was cancelled first (v
// is released).
func (w *worker) pass(v any) fate {
	if w.out == w.ep.sink && status(w.ep.status.Load()) == statusStopped {
		// Stopped: Next reports the end once the workers have returned or
		// were abandoned; nothing may reach the sink after that.
		release(v)
		return fateEnd
	}
	if w.sink != nil {
		var f fate
		if v, f = w.encode(v); f != fatePassed {
			return f
		}
	}
	if !send(w.out, v, w.done) {
		release(v)
		return fateEnd
	}
	w.sl.out.Add(1)
	w.sl.occ.Add(int64(len(w.out)))
	return fatePassed
}

// encode runs Config.SinkEncode on v. Its time counts in the worker's
// busy time (so an auto stage's tuner sees the work), not in its latency
// histogram or traces. On error the hook has released v, and the item
// fails as the sink's.
func (w *worker) encode(v any) (any, fate) {
	t0 := time.Now()
	out, err := safeEncode(w.sink, v)
	w.sl.busy.Add(int64(time.Since(t0)))
	if err == nil {
		return out, fatePassed
	}
	if ferr := w.ep.itemFailed(&sinkInfo, &w.ep.sinkCounters, describeFailed(v, err), err); ferr != nil {
		w.err = w.ep.failAt(w.at, ferr)
		return nil, fateFatal
	}
	return nil, fateDropped
}

// sinkInfo describes Config.SinkEncode to itemFailed: its failures count
// only against Config.MaxFailures.
var sinkInfo = stageInfo{StageConfig: StageConfig{Name: "sink", MaxFailures: -1}}

func safeEncode(f func(any) (any, error), v any) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return f(v)
}

// failed counts a failed item against the worker's stage: fateDropped, or
// fateFatal (w.err set) when that exceeds a failure limit.
func (w *worker) failed(item string, err error) fate {
	if ferr := w.ep.itemFailed(w.s, w.c, item, err); ferr != nil {
		w.err = w.ep.failAt(w.at, ferr)
		return fateFatal
	}
	return fateDropped
}

// invoked counts one invocation of the worker's stage (an op call, an
// aggregate or disaggregate input) for the rate limits and, if ok (it
// succeeded), checks the limits an invocation can cross without failing
// (limits.go): fatePassed, or fateFatal with w.err set.
func (w *worker) invoked(ok bool) fate {
	if !w.s.watch {
		return fatePassed
	}
	if ferr := w.ep.invoked(w.s, w.c, ok); ferr != nil {
		w.err = w.ep.failAt(w.at, ferr)
		return fateFatal
	}
	return fatePassed
}

// call runs the op on v under the NumThreads cap (and the stage's Timeout,
// when w.is is set); seq is v's sequence number in an ordered stage. It
// returns the op's result and fatePassed, or nil and fateDropped (the item
// failed, or the epoch ended first), fateFatal or fateLost.
func (w *worker) call(v any, seq uint64) (any, fate) {
	ep, sl := w.ep, w.sl
	tokens := ep.tokens
	if w.s.ioBound {
		tokens = nil
	}
	if tokens != nil && !send(tokens, struct{}{}, w.done) {
		release(v) // never handed to the op: still ours
		return nil, fateDropped
	}
	sl.active.Add(1)
	t0 := time.Now()
	var out any
	var err error
	if w.is != nil {
		if out, err = w.timed(v, seq); err == errCallLost {
			return nil, fateLost
		}
	} else {
		out, err = safeProcess(w.ctx, w.s.Op, v)
	}
	w.callEnded(t0, err != nil)
	if tokens != nil {
		<-tokens
	}
	if err == nil {
		if w.invoked(true) == fateFatal {
			release(out) // the stage stops here
			return nil, fateFatal
		}
		return out, fatePassed
	}
	if isDone(w.done) {
		releaseErr(err)
		return nil, fateDropped // most likely the cancellation itself: not the item's fault
	}
	w.invoked(false)
	return nil, w.failed(describeFailed(v, err), err)
}

// callEnded accounts for an op call (or a flush) that began at t0: the
// worker's busy time, its latency histogram, the trace, its active count.
func (w *worker) callEnded(t0 time.Time, failed bool) {
	sl := w.sl
	d := time.Since(t0)
	sl.busy.Add(int64(d))
	sl.lat.record(d)
	if tr := w.ep.p.trace.Load(); tr != nil {
		tr.add(sl, t0, d, failed)
	}
	sl.active.Add(-1)
}

// ItemDescriber is implemented by an op's error that can name the failed
// item better than the engine can (the engine sees a Python object only as
// a reference, for example).
type ItemDescriber interface {
	FailedItem() string
}

func describeFailed(v any, err error) string {
	var d ItemDescriber
	if errors.As(err, &d) {
		if s := d.FailedItem(); s != "" {
			return s
		}
	}
	return describeOwned(v)
}

func safeProcess(ctx context.Context, op Op, v any) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return op.Process(ctx, v)
}
