package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

type status int32

const (
	statusRunning status = iota
	statusDone           // Next saw the end of data
	statusFailed         // Next saw the end of data after a fatal error; err is set
	statusStopped        // Stop or Halt was called
)

func (s status) String() string {
	return [...]string{"running", "done", "failed", "stopped"}[s]
}

// epoch is one run of the pipeline: its goroutines, channels and counters.
// A new epoch gets fresh ones, so nothing from the last epoch needs
// resetting and Stats never mixes two epochs.
type epoch struct {
	p      *Pipeline
	parent context.Context    // cancelled by cancel; every stage's ctx derives from it
	cancel context.CancelFunc // Stop, or the waiter at the end
	ctx    context.Context    // parent: the tuner watches it
	done   <-chan struct{}    // ctx.Done(), fetched once

	// ctxs[0] is the source's, ctxs[i+1] stage i's; each derives from the
	// next one downstream (the last stage's from parent), so cancelling
	// one stops that stage and everything upstream of it while the stages
	// downstream drain what they hold (see failAt).
	ctxs    []context.Context
	cancels []context.CancelFunc

	// status leaves statusRunning once; mu makes the first transition win.
	// err (the first fatal error) and errs (every fatal error, err first)
	// are written under mu, and failed is set after them.
	status   atomic.Int32
	mu       sync.Mutex
	err      error
	errs     []error
	failed   atomic.Bool
	dropSink atomic.Bool   // Stop: items left in the sink are released, not delivered
	halted   chan struct{} // closed on statusFailed or statusStopped
	lastFail atomic.Pointer[ItemError]
	calls    atomic.Int64 // invocations over all stages; counted only under a pipeline rate limit
	over     atomic.Bool  // the pipeline's limit was reported (limits.go)

	finished chan struct{} // closed when every goroutine has returned
	// settled is closed once finished is, or once a stop gave up waiting
	// and abandoned the goroutines left (abandoned closed, abandonErr set).
	settled     chan struct{}
	settleOnce  sync.Once
	abandoned   chan struct{}
	abandonOnce sync.Once
	abandonErr  *StopAbandonedError
	queues      []chan any // queues[i]: output of the source (i=0) or of stage i-1; the last is sink
	sink        chan any
	tokens      chan struct{} // NumThreads cap; nil if none

	counters     []*stageCounters // [0] source, [i+1] stage i
	sinkCounters stageCounters    // failures of Config.SinkEncode
	failures     atomic.Int64     // over all stages
	delivered    atomic.Int64
	sinkOcc      atomic.Int64 // sum of len(sink) sampled after each delivery
	start        time.Time
	elapsed      atomic.Int64 // set when finished

	recentMu sync.Mutex
	recent   [maxRecent]string // ring of the last item errors
	recentN  int               // item errors recorded so far
}

const maxRecent = 16

// stageCounters are one stage's counters, split into one padded slot per
// goroutine so that parallel workers never write the same cache line.
type stageCounters struct {
	slots    []slot
	failures atomic.Int64

	// Pipe stages: the last worker to return closes workersDone (and the
	// stage's output, unless the waiter owns it).
	remaining   atomic.Int32
	workersDone chan struct{}
	gate        chan struct{} // AutoConcurrency stages; see autotune.go
	abandoned   atomic.Int64  // calls abandoned after a timeout; see timeout.go
	calls       atomic.Int64  // invocations; counted only under the stage's own rate limit (limits.go)
	stopped     atomic.Bool   // the stage failed: it takes no more items (epoch.failAt)
	over        atomic.Bool   // the stage's limit was reported (limits.go)
	onDone      func()        // called after workersDone is closed; may be nil
}

// enter takes a gate token (auto stages) before a worker takes an item;
// false if the epoch was cancelled first.
func (c *stageCounters) enter(done <-chan struct{}) bool {
	return c.gate == nil || send(c.gate, struct{}{}, done)
}

// leave gives the token back once the item has left the worker.
func (c *stageCounters) leave() {
	if c.gate != nil {
		<-c.gate
	}
}

type slot struct {
	in, out, busy, active, occ atomic.Int64
	lat                        *latHist // Op.Process durations
	stage, worker              int32    // where this slot is, for traces
	_                          [8]byte  // pad to a 64-byte cache line
}

func newEpoch(p *Pipeline, parent context.Context, cancel context.CancelFunc) *epoch {
	n := len(p.stages)
	ep := &epoch{
		p:         p,
		parent:    parent,
		cancel:    cancel,
		halted:    make(chan struct{}),
		finished:  make(chan struct{}),
		settled:   make(chan struct{}),
		abandoned: make(chan struct{}),
		queues:    make([]chan any, n+1),
		counters:  make([]*stageCounters, n+1),
		start:     time.Now(),
	}
	for i := range n {
		ep.queues[i] = make(chan any, p.cfg.QueueSize)
	}
	ep.queues[n] = make(chan any, p.cfg.BufferSize)
	ep.sink = ep.queues[n]
	ep.counters[0] = &stageCounters{slots: make([]slot, 1)}
	ep.counters[0].remaining.Store(1) // the source's goroutine
	for i, s := range p.stages {
		// Pipe workers use slots [0, C); aggregate and disaggregate slot C.
		c := &stageCounters{slots: make([]slot, s.Concurrency+1), workersDone: make(chan struct{})}
		c.remaining.Store(int32(s.Concurrency))
		for w := range c.slots {
			c.slots[w].stage, c.slots[w].worker = int32(i), int32(w)
		}
		if s.Kind == KindPipe {
			for w := range s.Concurrency {
				c.slots[w].lat = new(latHist)
			}
		}
		ep.counters[i+1] = c
	}
	if p.cfg.NumThreads > 0 {
		ep.tokens = make(chan struct{}, p.cfg.NumThreads)
	}
	ep.ctx, ep.done = parent, parent.Done()
	ep.ctxs, ep.cancels = make([]context.Context, n+1), make([]context.CancelFunc, n+1)
	up := parent
	for i := n; i >= 0; i-- {
		ep.ctxs[i], ep.cancels[i] = context.WithCancel(up)
		up = ep.ctxs[i]
	}
	return ep
}

// launch starts every goroutine of the epoch under one errgroup, and the
// waiter that owns them: it waits, drains the queues and closes the sink.
func (ep *epoch) launch(it Iterator) {
	// No errgroup context: a fatal error stops only its stage and those
	// upstream (failAt), and Stop cancels parent.
	var g errgroup.Group
	last := len(ep.p.stages) - 1
	var auto []*autoWindow
	for i := range ep.p.stages {
		if t := ep.p.stages[i].tuner; t != nil {
			c := ep.counters[i+1]
			var held int
			c.gate, held = newGate(t)
			t.phase, t.reprobe = phaseMeasure, false // re-baseline: this epoch's data may differ
			auto = append(auto, &autoWindow{s: &ep.p.stages[i], c: c, held: held, discard: true})
		}
	}
	if len(auto) > 0 {
		// The tuner returns when the last auto stage's workers have.
		left, allDone := new(atomic.Int32), make(chan struct{})
		left.Store(int32(len(auto)))
		for _, w := range auto {
			w.c.onDone = func() {
				if left.Add(-1) == 0 {
					close(allDone)
				}
			}
		}
		g.Go(func() error { return ep.runTuner(auto, allDone) })
	}
	// Every worker of the epoch, in one allocation.
	n := 1
	for i := range ep.p.stages {
		if s := &ep.p.stages[i]; s.Kind == KindPipe {
			n += s.Concurrency
		} else {
			n++
		}
	}
	ws := make([]worker, 0, n)
	add := func(w worker) *worker {
		ws = append(ws, w)
		return &ws[len(ws)-1]
	}
	src := add(worker{ep: ep, s: &sourceInfo, c: ep.counters[0], sl: &ep.counters[0].slots[0], out: ep.queues[0], closeOut: last >= 0,
		at: 0, ctx: ep.ctxs[0], done: ep.ctxs[0].Done()})
	if last < 0 {
		src.sink = ep.p.cfg.SinkEncode
	}
	g.Go(onThread(it, func() error { return src.runSource(it) }))
	for i := range ep.p.stages {
		s := &ep.p.stages[i]
		c := ep.counters[i+1]
		w := worker{ep: ep, s: s, c: c, in: ep.queues[i], out: ep.queues[i+1], closeOut: i != last,
			at: i + 1, ctx: ep.ctxs[i+1], done: ep.ctxs[i+1].Done()}
		if i == last {
			w.sink = ep.p.cfg.SinkEncode
		}
		if s.Kind != KindPipe {
			// One goroutine, in the slot after the pipe workers'.
			w.sl = &c.slots[s.Concurrency]
			if wp := add(w); s.Kind == KindAggregate {
				g.Go(wp.runAggregate)
			} else {
				g.Go(wp.runDisaggregate)
			}
			continue
		}
		if s.Order == OrderInput {
			w.r = newReorder(2 * s.Concurrency)
		}
		for k := range s.Concurrency {
			w.sl = &c.slots[k]
			if wk := add(w); s.Timeout > 0 {
				g.Go(wk.supervise)
			} else {
				g.Go(onThread(s.Op, wk.run))
			}
		}
	}
	go func() {
		_ = g.Wait() // the fatal errors, if any, are already in ep.errs
		ep.elapsed.Store(int64(time.Since(ep.start)))
		// Every producer has returned and closed its channel, so these
		// loops end. Items here exist only after a cancellation (of the
		// epoch, or of the stages upstream of a failure).
		for _, q := range ep.queues[:len(ep.queues)-1] {
			for v := range q {
				release(v)
			}
		}
		close(ep.sink)
		if ep.dropSink.Load() {
			ep.drainSink() // a StopWithin that gave up waiting
		}
		ep.cancel()
		close(ep.finished)
		ep.settle()
	}()
}

func (ep *epoch) settle() { ep.settleOnce.Do(func() { close(ep.settled) }) }

// wait waits for the epoch's goroutines to return, at most d (d < 0: as
// long as it takes; once they were abandoned, only if rewait), and
// reports whether they have.
func (ep *epoch) wait(d time.Duration, rewait bool) bool {
	if isDone(ep.finished) {
		return true
	}
	if d < 0 {
		<-ep.finished
		return true
	}
	if !rewait && isDone(ep.abandoned) {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ep.finished:
		return true
	case <-t.C:
		return false
	}
}

// abandon gives up on the goroutines of a cancelled epoch that have not
// returned d after the stop (the first call names them) and returns the
// error that says so. They run on: each result is released when its call
// returns, and the waiter drains the sink after the last one.
func (ep *epoch) abandon(d time.Duration) error {
	ep.abandonOnce.Do(func() {
		ep.abandonErr = &StopAbandonedError{After: d, Calls: ep.inFlight()}
		close(ep.abandoned)
		ep.settle()
	})
	return ep.abandonErr
}

// inFlight names the goroutines of the epoch that have not returned: the
// source's, and each pipe stage's workers.
func (ep *epoch) inFlight() string {
	var parts []string
	if ep.counters[0].remaining.Load() > 0 {
		parts = append(parts, "the source's next item")
	}
	for i := range ep.p.stages {
		s := &ep.p.stages[i]
		if s.Kind != KindPipe {
			continue
		}
		if n := ep.counters[i+1].remaining.Load(); n == 1 {
			parts = append(parts, fmt.Sprintf("1 call of stage %q", s.Name))
		} else if n > 1 {
			parts = append(parts, fmt.Sprintf("%d calls of stage %q", n, s.Name))
		}
	}
	if len(parts) == 0 {
		return "the epoch's last goroutines"
	}
	return strings.Join(parts, ", ")
}

// retire waits for the last goroutine of an epoch whose stop abandoned
// some, then releases what the epoch still holds.
func (ep *epoch) retire() {
	<-ep.finished
	ep.drainSink()
	ep.discard()
}

// afterStop is Next on a stopped epoch once its goroutines have returned
// or were abandoned: what is left in the sink, then the end.
func (ep *epoch) afterStop() (any, error) {
	select {
	case v, ok := <-ep.sink:
		return ep.take(v, ok)
	default:
		return nil, ep.haltErr()
	}
}

// halt moves the epoch out of statusRunning; the first call wins and
// reports whether it did. Stopping cancels the whole epoch.
func (ep *epoch) halt(s status) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if status(ep.status.Load()) != statusRunning {
		return false
	}
	ep.status.Store(int32(s))
	if s != statusDone {
		close(ep.halted)
	}
	if s == statusStopped {
		ep.cancel()
	}
	return true
}

// failAt records a fatal error at index at (0 the source, i+1 stage i):
// everything upstream of it is cancelled, the failing stage takes no more
// items (those its workers hold finish and pass their results on), and the
// stages downstream pass on what they hold; the sink keeps it for Next,
// which returns the first fatal error after the last item. It returns err
// so that goroutines can `return ep.failAt(w.at, err)`.
func (ep *epoch) failAt(at int, err error) error {
	ep.mu.Lock()
	if ep.err == nil {
		ep.err = err
	}
	ep.errs = append(ep.errs, err)
	ep.failed.Store(true)
	ep.mu.Unlock()
	ep.counters[at].stopped.Store(true)
	ep.cancels[max(at-1, 0)]()
	return err
}

// firstErr is the epoch's first fatal error, or nil.
func (ep *epoch) firstErr() error {
	if !ep.failed.Load() {
		return nil
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.err
}

// allErrs is every fatal error of the epoch, the first first.
func (ep *epoch) allErrs() []error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return append([]error(nil), ep.errs...)
}

// haltErr is what Next returns once the sink is empty and the epoch ended
// other than by its end of data: the first fatal error, or errStopped.
func (ep *epoch) haltErr() error {
	if err := ep.firstErr(); err != nil {
		return err
	}
	return errStopped
}

// take turns a receive from the sink into Next's result.
func (ep *epoch) take(v any, ok bool) (any, error) {
	if ok {
		if ep.dropSink.Load() {
			release(v)
			return nil, ep.haltErr()
		}
		ep.delivered.Add(1)
		ep.sinkOcc.Add(int64(len(ep.sink)))
		return v, nil
	}
	// The waiter closed the sink after every goroutine returned.
	if ep.failed.Load() {
		ep.halt(statusFailed)
	} else {
		ep.halt(statusDone)
	}
	if status(ep.status.Load()) == statusDone {
		return nil, ErrEndOfData
	}
	return nil, ep.haltErr()
}

// discard releases what the epoch keeps for reporting: its fatal errors
// and its last item failure.
func (ep *epoch) discard() {
	errs := ep.allErrs()
	last := ep.lastFail.Swap(nil)
	for _, err := range errs {
		if fl, ok := err.(*FailureLimitError); ok && fl.Last == last {
			last = nil
		}
		releaseErr(err)
	}
	if last != nil {
		releaseErr(last.Err)
	}
}

// drainSink releases what is left in the closed sink. Concurrent Next
// calls may take some of it; each item has exactly one receiver.
func (ep *epoch) drainSink() {
	for v := range ep.sink {
		release(v)
	}
}

// itemFailed records a failed item and returns the fatal error (for the
// caller to failAt) if that exceeds a failure limit. The last failure's
// error is kept until the next one (or the epoch's end) and then released
// (ErrorReleaser).
func (ep *epoch) itemFailed(s *stageInfo, c *stageCounters, item string, err error) error {
	ie := &ItemError{Stage: s.Name, Item: item, Err: err, where: s.where}
	// Kept before the counts (whoever sees them sees ie), to name in a
	// limit crossed without a failure; the one it replaces is done with.
	if prev := ep.lastFail.Swap(ie); prev != nil {
		releaseErr(prev.Err)
	}
	c.failures.Add(1)
	ep.failures.Add(1)
	ep.recentMu.Lock()
	ep.recent[ep.recentN%maxRecent] = ie.Error()
	ep.recentN++
	ep.recentMu.Unlock()
	if ferr := ep.overLimit(s, c, ie); ferr != nil {
		return ferr
	}
	return nil
}

// Channel helpers. Each tries the channel alone first: a select that also
// waits on done locks done's channel too, which every goroutine of the
// epoch shares, so the fast path keeps them from contending on it.

// send hands v to out, or reports false when the epoch is cancelled first
// (the caller still owns v).
func send[T any](out chan<- T, v T, done <-chan struct{}) bool {
	select {
	case out <- v:
		return true
	default:
	}
	select {
	case out <- v:
		return true
	case <-done:
		return false
	}
}

// recv takes an item from in; ok is false when in is closed or the epoch
// is cancelled.
func recv(in <-chan any, done <-chan struct{}) (v any, ok bool) {
	select {
	case v, ok = <-in:
		return v, ok
	default:
	}
	select {
	case v, ok = <-in:
		return v, ok
	case <-done:
		return nil, false
	}
}

func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// runSource is the source's goroutine: w.out is the first queue (the sink
// when there are no stages).
func (w *worker) runSource(it Iterator) (err error) {
	ep := w.ep
	defer w.c.remaining.Add(-1)
	defer func() {
		if w.closeOut {
			close(w.out)
		}
	}()
	defer func() {
		if cerr := safeClose(it); cerr != nil {
			if isDone(w.done) {
				releaseErr(cerr)
			} else {
				err = ep.failAt(w.at, &SourceError{Err: cerr})
			}
		}
	}()
	for {
		v, err := safeNext(w.ctx, it)
		if err != nil {
			if errors.Is(err, io.EOF) || isDone(w.done) {
				releaseErr(err)
				return nil
			}
			var f *ItemFailure
			if errors.As(err, &f) {
				if w.failed(f.Item, f.Err) == fateFatal {
					return w.err
				}
				continue
			}
			return ep.failAt(w.at, &SourceError{Err: err})
		}
		switch w.pass(v) {
		case fateDropped:
			continue
		case fateFatal:
			return w.err
		case fateEnd:
			return nil
		}
	}
}

// sourceInfo describes the source to itemFailed: its failures count only
// against Config.MaxFailures.
var sourceInfo = stageInfo{StageConfig: StageConfig{Name: "source", MaxFailures: -1}}

func safeNext(ctx context.Context, it Iterator) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return it.Next(ctx)
}

func safeClose(it Iterator) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	if err := it.Close(); err != nil {
		return &closeError{err}
	}
	return nil
}

type closeError struct{ err error }

func (e *closeError) Error() string { return "close: " + e.err.Error() }
func (e *closeError) Unwrap() error { return e.err }
