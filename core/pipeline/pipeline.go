package pipeline

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spdl-go/spdl-go/core/value"
)

// Op transforms one item. It owns its input: after Process returns, the
// engine never touches in again (on error, the op has released or kept in;
// the engine releases nothing it handed to the op). On error the returned
// value is ignored, so an op must not return an owned value with an error.
type Op interface {
	Process(ctx context.Context, in any) (any, error)
}

// OpFunc adapts a function to Op.
type OpFunc func(ctx context.Context, in any) (any, error)

// Process calls f.
func (f OpFunc) Process(ctx context.Context, in any) (any, error) { return f(ctx, in) }

// OpStatsReporter is implemented by ops that keep counters of their own
// (a read cache's hits); Stats shows them under the stage. OpStats must be
// safe to call at any time from any goroutine.
type OpStatsReporter interface {
	OpStats() map[string]int64
}

// StateReporter is implemented by sources that know something a
// checkpoint needs beyond the items handed out, such as how many samples
// each of a streaming source's shards holds. SourceState must be safe to
// call at any time from any goroutine, and marshal to JSON.
type StateReporter interface {
	SourceState() any
}

// IOBound is implemented by ops that spend their calls waiting on I/O
// (network reads): their calls do not take Config.NumThreads tokens,
// which bound CPU work, so that a read stage at concurrency 256 keeps 256
// requests in flight whatever the cap.
type IOBound interface {
	WaitsOnIO() bool
}

// ThreadBound is implemented by an Op or Iterator that keeps state tied to
// an OS thread, such as a Python thread state: the engine calls
// AttachThread on each goroutine that will call it, before the first call,
// and DetachThread on the same goroutine when that goroutine ends. Locking
// the goroutine to its thread (runtime.LockOSThread) is the hook's job.
type ThreadBound interface {
	AttachThread()
	DetachThread()
}

// onThread wraps a worker body with x's thread hooks, if it has them.
func onThread(x any, body func() error) func() error {
	tb, ok := x.(ThreadBound)
	if !ok {
		return body
	}
	return func() error {
		tb.AttachThread()
		defer tb.DetachThread()
		return body()
	}
}

// Source yields the items of an epoch. Open is called once per epoch, by
// Start.
type Source interface {
	Open(ctx context.Context) (Iterator, error)
}

// Iterator yields the items of one epoch. The engine calls Next and Close
// from one goroutine. ctx is cancelled when the epoch is stopped or fails.
type Iterator interface {
	// Next returns io.EOF at the end of the epoch; any other error is fatal
	// for the pipeline (a SourceError).
	Next(ctx context.Context) (any, error)
	Close() error
}

// Order is the output order of a pipe stage.
type Order int

const (
	OrderCompletion Order = iota // as ops finish: fastest
	OrderInput                   // as items came in; costs one extra hop per item
)

func (o Order) String() string {
	switch o {
	case OrderCompletion:
		return "completion"
	case OrderInput:
		return "input"
	}
	return fmt.Sprintf("Order(%d)", int(o))
}

// Kind is what a stage does.
type Kind int

const (
	KindPipe         Kind = iota // run Op on each item, Concurrency at once
	KindAggregate                // group Size items into a value.List
	KindDisaggregate             // emit each element of a list
)

func (k Kind) String() string {
	switch k {
	case KindPipe:
		return "pipe"
	case KindAggregate:
		return "aggregate"
	case KindDisaggregate:
		return "disaggregate"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// StageConfig describes one stage.
//
// Name: New keeps a unique non-empty name. An empty name becomes
// "<kind>_<index>" (e.g. "pipe_0"); a duplicate gets "_<index>" appended
// (e.g. the second "decode" at index 3 becomes "decode_3"). index is the
// stage's position in Config.Stages, from 0. "source" is taken, and so is
// "sink" when Config.SinkEncode is set (its failures are the sink's).
type StageConfig struct {
	Name        string
	Kind        Kind
	Op          Op    // KindPipe
	Concurrency int   // KindPipe: goroutines running Op; 0 means 1
	Order       Order // KindPipe
	Size        int   // KindAggregate, >= 1
	DropLast    bool  // KindAggregate: drop a last, partial group
	// AutoConcurrency (KindPipe) lets the engine choose how many of the
	// stage's workers run, online, by measured throughput: between 1 and
	// MaxConcurrency, within Config.CPUBudget, starting from Concurrency
	// (0 means the stage's share of the budget). See autotune.go.
	AutoConcurrency bool
	MaxConcurrency  int // with AutoConcurrency; 0 means twice Config.CPUBudget
	// Timeout (KindPipe), if > 0, bounds each Op.Process call: at the
	// deadline the call's ctx is cancelled and its item fails with a
	// *TimeoutError. A call that does not return soon after (a blocking
	// call that ignores ctx) is abandoned: the stage carries on with a
	// fresh worker, and Stop does not wait for the stuck one. Each call
	// costs a timer and a ctx; see timeout.go.
	Timeout time.Duration
	// MaxFailures is how many item failures this stage tolerates in an
	// epoch; -1 = unlimited, 0 = none (the first failure is fatal).
	MaxFailures int
	// MaxFailureRate, if set, limits the stage by its rate of failures
	// instead (limits.go); it is a limit of the stage's own.
	MaxFailureRate Rate
	// OwnLimit: MaxFailures is the stage's own limit and replaces the
	// pipeline's for it (SPDL's pipe(max_failures=N)); its failures still
	// count in the pipeline's total. Without it the stage is held to both.
	OwnLimit bool
}

// Config describes a pipeline.
type Config struct {
	Source      Source
	Stages      []StageConfig
	BufferSize  int // sink prefetch buffer, >= 1
	QueueSize   int // capacity of each channel between stages; 0 means 2
	MaxFailures int // item failures over all stages per epoch; -1 = unlimited, 0 = none
	// MaxFailureRate, if set, replaces MaxFailures: the pipeline fails when
	// its rate of failures exceeds it (limits.go).
	MaxFailureRate Rate
	NumThreads     int // cap on Ops running at once across all pipe stages; 0 = no cap
	// CPUBudget caps the workers that AutoConcurrency stages run, all
	// together; 0 means runtime.NumCPU().
	CPUBudget int
	// TuneInterval is the shortest window over which an AutoConcurrency
	// stage's throughput is measured; 0 means 100ms.
	TuneInterval time.Duration
	// SinkEncode, if set, turns every item into what Next returns, on its
	// way into the sink's prefetch buffer: a host binding encodes items
	// for the host with it, on the pipeline's goroutines rather than on the
	// thread that calls Next. It runs on the goroutines that send to the
	// sink: each worker of the last stage (so at that stage's concurrency;
	// an OrderInput stage's workers run it before their results are put
	// back in order), the aggregate or disaggregate goroutine, or the
	// source's goroutine when there are no stages. It must be safe to call
	// from several goroutines at once.
	//
	// It owns its input. On error it must have released (or kept) the
	// item, and the item fails as one of the stage "sink": counted in
	// Stats.Sink.Failures and against Config.MaxFailures (not the last
	// stage's), named in Stats.RecentErrors; a panic is recovered into a
	// *PanicError. It is not a stage: Stats.Stages and traces show only
	// Stages. Its time counts in the BusyNs of the stage that runs it,
	// not in that stage's latency percentiles.
	SinkEncode func(item any) (any, error)
	// StopGrace bounds how long Stop, Halt, Close and the next Start wait
	// for the goroutines of a cancelled epoch; 0 waits as long as it takes.
	// Native ops return soon after their ctx is cancelled, but an op stuck
	// in foreign code (a Python call in time.sleep or a hung read) may
	// never return: past StopGrace its calls are abandoned, as a stage's
	// Timeout abandons a call. They run on and their results are dropped;
	// Stop returns a *StopAbandonedError naming them.
	StopGrace time.Duration
}

const defaultQueueSize = 2

// Pipeline runs a Source through Stages into a prefetch buffer read by
// Next. See the package doc for which methods are safe concurrently.
type Pipeline struct {
	cfg    Config      // normalized copy
	stages []stageInfo // static, from New

	tuneMu sync.Mutex // tuner limits and status, read by Stats

	mu        sync.Mutex // serialises Start and Stop
	cur       atomic.Pointer[epoch]
	epochs    atomic.Int64
	trace     atomic.Pointer[trace] // non-nil while spans are recorded
	lastTrace atomic.Pointer[trace] // the last stopped trace
}

// stageInfo is what New derives from a StageConfig.
type stageInfo struct {
	StageConfig        // normalized; Concurrency is the worker count (MaxConcurrency for an auto stage)
	where       string // "pipe 1", for error messages
	ioBound     bool   // Op is IOBound: its calls take no NumThreads token
	own         bool   // its limit replaces the pipeline's (limits.go)
	watch       bool   // counts its invocations and checks its limits after each (limits.go)
	tuner       *tuner // AutoConcurrency stages only
}

// New validates cfg and builds a pipeline; it starts nothing. Errors name
// the bad field and, for a stage, its index and name.
func New(cfg Config) (*Pipeline, error) {
	if cfg.Source == nil {
		return nil, fmt.Errorf("pipeline: Config.Source is nil")
	}
	if cfg.BufferSize < 1 {
		return nil, fmt.Errorf("pipeline: Config.BufferSize must be >= 1, got %d", cfg.BufferSize)
	}
	if cfg.QueueSize < 0 {
		return nil, fmt.Errorf("pipeline: Config.QueueSize must be >= 0 (0 means %d), got %d", defaultQueueSize, cfg.QueueSize)
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = defaultQueueSize
	}
	if cfg.MaxFailures < -1 {
		return nil, fmt.Errorf("pipeline: Config.MaxFailures must be >= -1 (-1 = unlimited), got %d", cfg.MaxFailures)
	}
	if cfg.MaxFailureRate.IsSet() && !cfg.MaxFailureRate.valid() {
		return nil, fmt.Errorf("pipeline: Config.MaxFailureRate must be in (0, 1], got %v", cfg.MaxFailureRate)
	}
	if cfg.NumThreads < 0 {
		return nil, fmt.Errorf("pipeline: Config.NumThreads must be >= 0 (0 = no cap), got %d", cfg.NumThreads)
	}
	if cfg.CPUBudget < 0 {
		return nil, fmt.Errorf("pipeline: Config.CPUBudget must be >= 0 (0 = the number of CPUs), got %d", cfg.CPUBudget)
	}
	if cfg.CPUBudget == 0 {
		cfg.CPUBudget = runtime.NumCPU()
	}
	if cfg.TuneInterval < 0 {
		return nil, fmt.Errorf("pipeline: Config.TuneInterval must be >= 0 (0 = %v), got %v", defaultTuneInterval, cfg.TuneInterval)
	}
	if cfg.TuneInterval == 0 {
		cfg.TuneInterval = defaultTuneInterval
	}
	p := &Pipeline{cfg: cfg, stages: make([]stageInfo, len(cfg.Stages))}
	p.cfg.Stages = nil // p.stages holds the normalized copies
	taken := map[string]bool{"source": true, "sink": cfg.SinkEncode != nil}
	for i, sc := range cfg.Stages {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("pipeline: stage %d (%q, %s): %s", i, sc.Name, sc.Kind, fmt.Sprintf(format, args...))
		}
		switch sc.Kind {
		case KindPipe:
			if sc.Op == nil {
				return nil, bad("Op is nil")
			}
			if sc.Concurrency < 0 {
				return nil, bad("Concurrency must be >= 1 (0 means 1), got %d", sc.Concurrency)
			}
			if sc.Concurrency == 0 && !sc.AutoConcurrency {
				sc.Concurrency = 1
			}
			if sc.Order != OrderCompletion && sc.Order != OrderInput {
				return nil, bad("Order must be OrderCompletion or OrderInput, got %d", int(sc.Order))
			}
			if sc.AutoConcurrency {
				if sc.MaxConcurrency < 0 {
					return nil, bad("MaxConcurrency must be >= 0 (0 = twice Config.CPUBudget), got %d", sc.MaxConcurrency)
				}
				if sc.MaxConcurrency == 0 {
					// Past the budget only while every core is busy (autotune.go).
					sc.MaxConcurrency = oversubscribe * cfg.CPUBudget
				}
				if sc.Concurrency > sc.MaxConcurrency {
					return nil, bad("Concurrency (the starting point, %d) must be <= MaxConcurrency (%d)", sc.Concurrency, sc.MaxConcurrency)
				}
				if sc.Concurrency == 0 {
					// The stage's share of the budget (at least 1).
					sc.Concurrency = min(sc.MaxConcurrency, max(1, cfg.CPUBudget/autoStages(cfg.Stages)))
				}
			} else if sc.MaxConcurrency != 0 {
				return nil, bad("MaxConcurrency is set (%d) but AutoConcurrency is not", sc.MaxConcurrency)
			}
			if sc.Timeout < 0 {
				return nil, bad("Timeout must be >= 0 (0 = none), got %v", sc.Timeout)
			}
			if msg := checkFlusher(&sc); msg != "" {
				return nil, bad("%s", msg)
			}
		case KindAggregate:
			if sc.Size < 1 {
				return nil, bad("Size must be >= 1, got %d", sc.Size)
			}
			if sc.AutoConcurrency || sc.Timeout != 0 {
				return nil, bad("AutoConcurrency and Timeout are for pipe stages")
			}
			sc.Concurrency = 1
		case KindDisaggregate:
			if sc.AutoConcurrency || sc.Timeout != 0 {
				return nil, bad("AutoConcurrency and Timeout are for pipe stages")
			}
			sc.Concurrency = 1
		default:
			return nil, bad("Kind must be KindPipe, KindAggregate or KindDisaggregate, got %d", int(sc.Kind))
		}
		if sc.MaxFailures < -1 {
			return nil, bad("MaxFailures must be >= -1 (-1 = unlimited), got %d", sc.MaxFailures)
		}
		if sc.MaxFailureRate.IsSet() && !sc.MaxFailureRate.valid() {
			return nil, bad("MaxFailureRate must be in (0, 1], got %v", sc.MaxFailureRate)
		}
		name := sc.Name
		if name == "" {
			name = fmt.Sprintf("%s_%d", sc.Kind, i)
		}
		for taken[name] {
			name = fmt.Sprintf("%s_%d", name, i)
		}
		taken[name] = true
		sc.Name = name
		p.stages[i] = stageInfo{StageConfig: sc, where: fmt.Sprintf("%s %d", sc.Kind, i), own: sc.OwnLimit || sc.MaxFailureRate.IsSet()}

		if io, ok := sc.Op.(IOBound); ok && io.WaitsOnIO() {
			p.stages[i].ioBound = true
		}
		if sc.AutoConcurrency {
			p.stages[i].tuner = &tuner{max: sc.MaxConcurrency, limit: sc.Concurrency, status: "not started"}
			p.stages[i].Concurrency = sc.MaxConcurrency
		}
	}
	anyOwn := false
	for i := range p.stages {
		anyOwn = anyOwn || p.stages[i].own
	}
	for i := range p.stages {
		p.stages[i].watch = watchLimits(&p.stages[i], &cfg, anyOwn)
	}
	return p, nil
}

func autoStages(ss []StageConfig) int {
	n := 0
	for _, s := range ss {
		if s.AutoConcurrency {
			n++
		}
	}
	return max(n, 1)
}

// Start begins an epoch: it calls Source.Open and starts the stages. It
// fails if an epoch is running, that is, until Next has returned
// ErrEndOfData or a fatal error, or Stop was called. Items the previous
// epoch left in the prefetch buffer are released. If Open fails, Start
// returns a *SourceError and the epoch counts as started and failed: Next
// returns that error too.
func (p *Pipeline) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.cur.Load(); old != nil {
		if status(old.status.Load()) == statusRunning {
			return fmt.Errorf("pipeline: epoch %d is still running; read until ErrEndOfData or call Stop", p.epochs.Load())
		}
		old.dropSink.Store(true)
		old.cancel()
		if old.wait(p.grace(), false) {
			old.drainSink()
			old.discard()
		} else {
			old.abandon(p.grace())
			go old.retire() // owned by old: returns with its last goroutine
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ep := newEpoch(p, ctx, cancel)
	p.epochs.Add(1)
	p.cur.Store(ep)
	it, err := openSource(ctx, p.cfg.Source)
	if err != nil {
		// The epoch fails before it runs: Next and Stats report the
		// error, not the state of the epoch before.
		err = ep.failAt(0, &SourceError{Err: err})
		ep.elapsed.Store(int64(time.Since(ep.start)))
		close(ep.sink)
		close(ep.finished)
		ep.settle()
		return err
	}
	ep.launch(it)
	return nil
}

// grace is how long a stop waits for an epoch's goroutines (-1: as long as
// it takes).
func (p *Pipeline) grace() time.Duration {
	if p.cfg.StopGrace <= 0 {
		return -1
	}
	return p.cfg.StopGrace
}

func openSource(ctx context.Context, src Source) (it Iterator, err error) {
	defer func() {
		if r := recover(); r != nil {
			it, err = nil, &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	it, err = src.Open(ctx)
	if err == nil && it == nil {
		err = fmt.Errorf("Open returned a nil Iterator")
	}
	return it, err
}

// Next returns the next item of the epoch; the caller owns it. timeout < 0
// waits until an item comes or ctx is done; timeout == 0 only takes an item
// that is ready. It returns ErrEndOfData after the last item, ErrTimeout
// when nothing came in time (the epoch goes on), ErrNotStarted when no
// epoch runs (never started, or stopped, after the items Halt left),
// ctx.Err() when ctx is done, or the epoch's first fatal error after the
// last item the failure left (see the package doc); the end and the fatal
// error repeat on every call until the next Start, and the fatal error
// also after Stop.
func (p *Pipeline) Next(ctx context.Context, timeout time.Duration) (any, error) {
	ep := p.cur.Load()
	if ep == nil {
		return nil, ErrNotStarted
	}
	// Fast path: an item is ready; no timer, no ctx.
	select {
	case v, ok := <-ep.sink:
		return ep.take(v, ok)
	default:
	}
	switch status(ep.status.Load()) {
	case statusFailed:
		return nil, ep.haltErr()
	case statusStopped:
		if isDone(ep.settled) {
			return ep.afterStop()
		}
	}
	if timeout == 0 {
		return nil, ErrTimeout
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case v, ok := <-ep.sink:
		return ep.take(v, ok)
	case <-ep.halted:
		if status(ep.status.Load()) != statusStopped {
			return nil, ep.haltErr()
		}
		// Stopped: workers may still be handing items to the sink. Once
		// they have returned (or were abandoned), what is in the sink comes
		// first, then the end.
		select {
		case <-ep.settled:
			return ep.afterStop()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-expired:
			return nil, ErrTimeout
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-expired:
		return nil, ErrTimeout
	}
}

// Stop cancels the epoch, waits until every goroutine of the pipeline has
// returned, and releases the items left in queues and in the prefetch
// buffer. It is safe before Start, twice, and concurrently with any method.
// With Config.StopGrace set it waits at most that long and then returns a
// *StopAbandonedError naming the calls that had not returned; otherwise
// it returns nil. A fatal error is reported by Next, Err and Stats, and
// Stop after a failure or the end of data keeps that state.
func (p *Pipeline) Stop() error {
	return p.stop(p.grace(), true, false)
}

// Close is Stop, then it releases what the pipeline keeps to report the
// last epoch's failure (see ErrorReleaser); for an epoch whose calls were
// abandoned, that happens when the last of them returns. Use it when done
// with the pipeline; after Close, Next, Err and Errors report nothing
// useful.
func (p *Pipeline) Close() error {
	err := p.stop(p.grace(), true, false)
	p.mu.Lock()
	defer p.mu.Unlock()
	if ep := p.cur.Load(); ep != nil {
		if isDone(ep.finished) {
			ep.discard()
		} else {
			go ep.retire() // owned by ep: returns with its last goroutine
		}
	}
	return err
}

// Halt is Stop, except that the items already in the prefetch buffer stay
// there for Next, which returns them, then the epoch's fatal error if it
// had one, else ErrNotStarted. The next Start or Stop releases what is
// left. SPDL's stop() is this: a consumer may still read what was
// produced. It returns what Stop returns.
func (p *Pipeline) Halt() error {
	return p.stop(p.grace(), false, false)
}

// Err returns the first fatal error of the current (or last) epoch, or
// nil. It is set as soon as the error happens, while the stages
// downstream of it still pass on what they hold; Next returns it after the
// last item.
func (p *Pipeline) Err() error {
	if ep := p.cur.Load(); ep != nil {
		return ep.firstErr()
	}
	return nil
}

// Errors returns every fatal error of the current (or last) epoch, the
// first first: a stage downstream of a failure can exceed its own limit
// while it drains.
func (p *Pipeline) Errors() []error {
	if ep := p.cur.Load(); ep != nil {
		return ep.allErrs()
	}
	return nil
}

// StopWithin is Stop with d as the bound on the wait instead of
// Config.StopGrace (d < 0 waits as long as it takes): when the epoch's
// goroutines have not all returned within d, it returns false and leaves
// them to finish (and release what is left) on their own. It is for
// shutting down at process exit, where an op stuck in foreign code (a
// Python call blocked forever) must not hang the process.
func (p *Pipeline) StopWithin(d time.Duration) bool {
	return p.stop(d, true, true) == nil
}

// stop halts the current epoch and waits for its goroutines, at most d
// (d < 0: as long as it takes); drop releases what the sink holds. Once a
// stop abandoned the epoch's goroutines, the next ones wait only when
// rewait says so (StopWithin's explicit bound): the grace was spent. The
// wait is outside p.mu, so that a stop bounded by d (at process exit) is
// not held up by another one waiting longer.
func (p *Pipeline) stop(d time.Duration, drop, rewait bool) error {
	p.mu.Lock()
	ep := p.cur.Load()
	if ep == nil {
		p.mu.Unlock()
		return nil
	}
	if drop {
		ep.dropSink.Store(true)
	}
	ep.halt(statusStopped)
	ep.cancel()
	p.mu.Unlock()
	if !ep.wait(d, rewait) {
		return ep.abandon(d) // the waiter drains the sink once they return
	}
	if drop {
		ep.drainSink()
	}
	return nil
}

// Stats returns counters of the current (or last) epoch. It is safe from
// any goroutine at any time and reads only atomics and channel lengths.
func (p *Pipeline) Stats() Stats {
	st := Stats{
		State:  "built",
		Epoch:  int(p.epochs.Load()),
		Source: StageStats{Name: "source", Kind: "source", Concurrency: 1, QueueCap: p.cfg.QueueSize},
		Stages: make([]StageStats, len(p.stages)),
		Sink:   SinkStats{Cap: p.cfg.BufferSize},
	}
	if r, ok := p.cfg.Source.(OpStatsReporter); ok {
		st.Source.OpStats = r.OpStats()
	}
	for i, s := range p.stages {
		c := p.cfg.QueueSize
		if i == len(p.stages)-1 {
			c = p.cfg.BufferSize
		}
		st.Stages[i] = StageStats{Name: s.Name, Kind: s.Kind.String(), Concurrency: s.Concurrency, QueueCap: c}
		if r, ok := s.Op.(OpStatsReporter); ok {
			st.Stages[i].OpStats = r.OpStats()
		}
		if t := s.tuner; t != nil {
			p.report(t, &st.Stages[i])
		}
	}
	if len(p.stages) == 0 {
		st.Source.QueueCap = p.cfg.BufferSize
	}
	ep := p.cur.Load()
	if ep == nil {
		return st
	}
	ep.stats(&st)
	return st
}

// SourceState is the source's StateReporter answer, or nil.
func (p *Pipeline) SourceState() any {
	if r, ok := p.cfg.Source.(StateReporter); ok {
		return r.SourceState()
	}
	return nil
}

// release hands v to value.Release; named so that every drop is findable.
func release(v any) { value.Release(v) }
