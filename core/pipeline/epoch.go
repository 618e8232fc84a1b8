package pipeline

import (
	"context"
	"errors"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

type status int32

const (
	statusRunning status = iota
	statusDone           // Next saw the end of data
	statusFailed         // a fatal error; err is set
	statusStopped        // Stop was called
)

func (s status) String() string {
	return [...]string{"running", "done", "failed", "stopped"}[s]
}

// epoch is one run of the pipeline: its goroutines, channels and counters.
// A new epoch gets fresh ones, so nothing from the last epoch needs
// resetting and Stats never mixes two epochs.
type epoch struct {
	p      *Pipeline
	parent context.Context    // cancelled by cancel; the errgroup's ctx derives from it
	cancel context.CancelFunc // Stop, a fatal error, or the waiter at the end
	ctx    context.Context    // the errgroup's; ops and the iterator get it
	done   <-chan struct{}    // ctx.Done(), fetched once

	// status leaves statusRunning once; mu makes the first transition win
	// and err visible to whoever then loads the status.
	status atomic.Int32
	mu     sync.Mutex
	err    error
	halted chan struct{} // closed on statusFailed or statusStopped

	finished chan struct{} // closed when every goroutine has returned
	queues   []chan any    // queues[i]: output of the source (i=0) or of stage i-1; the last is sink
	sink     chan any
	tokens   chan struct{} // NumThreads cap; nil if none

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
		p:        p,
		parent:   parent,
		cancel:   cancel,
		halted:   make(chan struct{}),
		finished: make(chan struct{}),
		queues:   make([]chan any, n+1),
		counters: make([]*stageCounters, n+1),
		start:    time.Now(),
	}
	for i := range n {
		ep.queues[i] = make(chan any, p.cfg.QueueSize)
	}
	ep.queues[n] = make(chan any, p.cfg.BufferSize)
	ep.sink = ep.queues[n]
	ep.counters[0] = &stageCounters{slots: make([]slot, 1)}
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
	return ep
}

// launch starts every goroutine of the epoch under one errgroup, and the
// waiter that owns them: it waits, drains the queues and closes the sink.
func (ep *epoch) launch(it Iterator) {
	g, ctx := errgroup.WithContext(ep.parent)
	ep.ctx, ep.done = ctx, ctx.Done()
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
	src := add(worker{ep: ep, s: &sourceInfo, c: ep.counters[0], sl: &ep.counters[0].slots[0], out: ep.queues[0], closeOut: last >= 0})
	if last < 0 {
		src.sink = ep.p.cfg.SinkEncode
	}
	g.Go(onThread(it, func() error { return src.runSource(it) }))
	for i := range ep.p.stages {
		s := &ep.p.stages[i]
		c := ep.counters[i+1]
		w := worker{ep: ep, s: s, c: c, in: ep.queues[i], out: ep.queues[i+1], closeOut: i != last}
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
		_ = g.Wait() // the fatal error, if any, is already in ep.err
		ep.elapsed.Store(int64(time.Since(ep.start)))
		// Every producer has returned and closed its channel, so these
		// loops end. Items here exist only after a cancellation.
		for _, q := range ep.queues[:len(ep.queues)-1] {
			for v := range q {
				release(v)
			}
		}
		close(ep.sink)
		if s := status(ep.status.Load()); s == statusFailed || s == statusStopped {
			ep.drainSink()
		}
		ep.cancel()
		close(ep.finished)
	}()
}

// halt moves the epoch out of statusRunning, cancelling it when it failed
// or was stopped. The first call wins; it reports whether it did.
func (ep *epoch) halt(s status, err error) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if status(ep.status.Load()) != statusRunning {
		return false
	}
	ep.err = err
	ep.status.Store(int32(s))
	if s != statusDone {
		close(ep.halted)
		ep.cancel()
	}
	return true
}

// fail records a fatal error (if it is the first) and cancels the epoch.
// It returns err so that goroutines can `return ep.fail(err)`.
func (ep *epoch) fail(err error) error {
	ep.halt(statusFailed, err)
	return err
}

// haltErr is what Next returns once the epoch failed or was stopped.
func (ep *epoch) haltErr() error {
	if status(ep.status.Load()) == statusFailed {
		return ep.err
	}
	return errStopped
}

// take turns a receive from the sink into Next's result.
func (ep *epoch) take(v any, ok bool) (any, error) {
	if ok {
		if s := status(ep.status.Load()); s == statusFailed || s == statusStopped {
			release(v)
			return nil, ep.haltErr()
		}
		ep.delivered.Add(1)
		ep.sinkOcc.Add(int64(len(ep.sink)))
		return v, nil
	}
	// The waiter closed the sink after every goroutine returned.
	ep.halt(statusDone, nil)
	if status(ep.status.Load()) == statusDone {
		return nil, ErrEndOfData
	}
	return nil, ep.haltErr()
}

// drainSink releases what is left in the closed sink. Concurrent Next
// calls may take some of it; each item has exactly one receiver.
func (ep *epoch) drainSink() {
	for v := range ep.sink {
		release(v)
	}
}

// itemFailed records a failed item and returns a fatal error if a failure
// limit is exceeded.
func (ep *epoch) itemFailed(s *stageInfo, c *stageCounters, item string, err error) error {
	ie := &ItemError{Stage: s.Name, Item: item, Err: err, where: s.where}
	sf := c.failures.Add(1)
	tf := ep.failures.Add(1)
	ep.recentMu.Lock()
	ep.recent[ep.recentN%maxRecent] = ie.Error()
	ep.recentN++
	ep.recentMu.Unlock()
	if s.MaxFailures >= 0 && sf > int64(s.MaxFailures) {
		return ep.fail(&FailureLimitError{Stage: s.Name, Failures: int(sf), Limit: s.MaxFailures, Last: ie})
	}
	if m := ep.p.cfg.MaxFailures; m >= 0 && tf > int64(m) {
		return ep.fail(&FailureLimitError{Failures: int(tf), Limit: m, Last: ie})
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
	defer func() {
		if w.closeOut {
			close(w.out)
		}
	}()
	defer func() {
		if cerr := safeClose(it); cerr != nil && !isDone(ep.done) {
			err = ep.fail(&SourceError{Err: cerr})
		}
	}()
	for {
		v, err := safeNext(ep.ctx, it)
		if err != nil {
			if errors.Is(err, io.EOF) || isDone(ep.done) {
				return nil
			}
			var f *ItemFailure
			if errors.As(err, &f) {
				if w.failed(f.Item, f.Err) == fateFatal {
					return w.err
				}
				continue
			}
			return ep.fail(&SourceError{Err: err})
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
