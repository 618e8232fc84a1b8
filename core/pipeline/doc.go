// Package pipeline is the spdl-go engine: it runs a Source through a chain
// of stages, each in its own goroutines, into a prefetch buffer that the
// caller reads with Next.
//
// # Model
//
//	source ─q─▶ stage 0 ─q─▶ stage 1 ─ … ─▶ sink buffer ─▶ Next
//
// Every arrow is a bounded channel (Config.QueueSize; the sink holds
// Config.BufferSize), so a consumer that stops calling Next stops the
// source too: a pipeline holds at most about BufferSize + QueueSize per
// stage + Concurrency per pipe stage (2*Concurrency for OrderInput) +
// Size per aggregate stage items. Each stage reads like the errgroup
// md5all example: its producer closes its output when done, every send
// also waits on the epoch's context, and one errgroup per epoch owns every
// goroutine; one waiter goroutine waits for the group, releases what is
// left in the queues and closes the sink.
//
// Each goroutine that moves items (the source's, a pipe worker, an
// aggregate or disaggregate stage's) is a worker (worker.go): a struct
// with what it reads, runs and writes, whose loop is a few methods (take
// an item, call the op, pass the result on). Each step returns one fate
// of the item: passed on, dropped (failed and counted, or released as the
// epoch ends), fatal (a failure limit was exceeded), lost (its call was
// abandoned after a Timeout), or the end of the input.
//
// Config.SinkEncode, if set, turns each item into what Next returns on the
// goroutines that send to the sink (the last stage's, or the source's when
// there are no stages), so a host binding's encoding costs the caller of
// Next nothing. It is not a stage: Stats and traces show only Stages; its
// failures are the sink's (Stats.Sink.Failures, ItemError.Stage "sink").
//
// Stage kinds:
//   - KindPipe: exactly Concurrency goroutines call Op.Process. With
//     OrderCompletion items leave as they finish; with OrderInput they
//     leave in input order, through a reorder window of 2*Concurrency
//     items (a failed item leaves a gap that is skipped, not a stall).
//     Config.NumThreads caps the ops running at once over all pipe stages.
//   - KindAggregate: groups Size items into a value.List; at the end of
//     the epoch the partial group is emitted, or released if DropLast.
//   - KindDisaggregate: emits each element of a value.List, value.Tuple or
//     []any; any other item fails.
//
// An epoch begins with Start (which calls Source.Open) and ends when Next
// has returned ErrEndOfData or a fatal error, or with Stop or Halt; Start then
// begins the next epoch on the same pipeline. Counters in Stats are per
// epoch. Stats also give each pipe stage's Op.Process latency percentiles
// (p50/p90/p99, from a lock-free histogram), throughput and busy fraction,
// and Stats.Bottleneck names the stage that limits throughput (the
// consumer calling Next, the source, or a stage) from queue occupancies.
//
// # Failures
//
// An item fails when its op returns an error or panics (the panic is
// recovered into a *PanicError with the stack), when a disaggregate stage
// gets a non-list, or when Config.SinkEncode returns an error or panics.
// The item is dropped, the failure is counted and its *ItemError is kept
// in Stats.RecentErrors; a failure of Config.SinkEncode is the sink's and
// counts only against the pipeline's limit. A stage that fails more items
// than its limit allows, or a pipeline more than its own, fails with a
// *FailureLimitError (limits.go: counts and rates, and which limit holds a
// stage). Note that the zero value of MaxFailures is 0, which tolerates no
// failure; -1 is unlimited. A Source error (Open, Next, Close, or a panic
// in one of them) is fatal as a *SourceError.
//
// A fatal error keeps what was produced. The failing stage takes no more
// items (its calls in flight finish and pass on their results), the stages
// and source upstream of it are cancelled, and the stages downstream pass
// on everything they hold, in the order they produce it, into the sink.
// Next returns those items, then the first fatal error, which it repeats on
// every call until the next Start (also after Stop). Err returns it as
// soon as it happens, Errors every fatal error of the epoch (a stage
// downstream can exceed its own limit while it drains), and Stats.Error
// shows it. Stop still stops everything at once; Halt stops everything but
// leaves the sink's items for Next. An error that implements
// ErrorReleaser (a host's exception kept to be re-raised) is released once
// the engine will not report it.
//
// # Ownership
//
// An item has one owner at a time, and only its owner may release it
// (value.Release):
//   - the Source's iterator hands each item to the engine;
//   - the engine hands it to Op.Process, which owns it from then on, on
//     success and on error (an op that fails or panics releases or keeps
//     its input; the engine releases nothing it handed to an op, and
//     ignores the result of a failed op);
//   - the op's result belongs to the engine; Config.SinkEncode, if set,
//     owns the last one (and releases it if it fails), and its result
//     belongs to the engine;
//   - the item Next returns belongs to the caller.
//
// The engine releases, exactly once, every item it owns and drops: items in
// queues and in the sink buffer when an epoch is stopped or fails, a
// partial group dropped by an aggregate stage, and a non-list item failed
// by a disaggregate stage. An ItemError names the failed item with
// value.Describe only when that is memory-safe after the op took it: plain
// Go values and containers of them; an item holding a value.Releaser is
// named by its type.
//
// # Concurrency
//
// Next, Stop, Halt, Err and Stats are safe to call from any goroutine, at any time,
// concurrently with each other and with Start; several goroutines may call
// Next at once (each item goes to one of them). Start and Stop are
// serialised. Stop is safe before Start and twice; it cancels the epoch,
// waits until every goroutine of the pipeline has returned, releases what
// is left, and returns nil. Ops and iterators should watch ctx: Stop waits
// for a running Op.Process or Iterator.Next to return. An epoch that is
// neither read to its end nor stopped keeps its goroutines, so call Stop
// when done with a pipeline (defer p.Stop()).
//
// # Automatic concurrency
//
// A pipe stage with AutoConcurrency starts MaxConcurrency workers and lets
// a tuner decide how many of them work: it starts from Concurrency (by
// default the stage's share of Config.CPUBudget). In its first short window
// (an eighth of Config.TuneInterval) a stage whose busy workers use as much
// CPU as they are busy (a CPU-bound op) jumps to fill the cores the process
// leaves idle; a guess is taken back only after two windows that each lose
// 10%. Otherwise it measures throughput over windows of at least
// Config.TuneInterval, adds workers (+1, +1, +2, +4, ...) while each step
// raises the throughput by 5% or more and the workers are busy, and removes
// workers while that costs less than 5% or they idle half the time. All
// auto stages together stay within the budget, except while the process
// already uses every core of a machine no bigger than the budget: then
// they may probe up to twice the budget, since more threads cannot use
// more CPU there and can hide the waits between items (a probe is kept
// only if it gains 5%). MaxConcurrency defaults to twice the budget. The choice carries over to
// the next epoch and is re-checked after 30 windows, less often (up to 240)
// while re-checks change nothing. Stats reports it (Concurrency, Auto,
// MaxConcurrency, Tuning, and TuningLog: the last 32 decisions with their
// reason and measured rate). A gate token per item costs about 100 ns,
// which is small next to the decode-sized ops this is meant for.
//
// # Cost
//
// Measured with BenchmarkPipeStage (go test -bench PipeStage) on the
// project's 2-core machine (AMD EPYC, GOMAXPROCS=2): time per item through
// source, stages and Next, with a no-op Go op, and the stage's own share
// (minus the source_only baseline). Zero allocations per item.
//
//	pipeline                     QueueSize 2 (default)   QueueSize 64
//	source → Next                  230 ns                  147 ns
//	+ pipe, c=1                    740 ns (+510)           416 ns (+270)
//	+ pipe, c=4                    850 ns (+620)           400 ns (+255)
//	+ pipe, OrderInput, c=1        965 ns (+735)           508 ns (+360)
//	+ pipe, OrderInput, c=4       1000 ns (+770)           508 ns (+360)
//	+ 3 pipes, c=4                1990 ns (+590 each)      676 ns (+175 each)
//
// The cost is mostly goroutines handing items to each other; larger queues
// let them hand over in runs. Recording a pipe stage's latency histogram
// costs about 4 ns per item (BenchmarkLatRecord). Config.SinkEncode costs
// about 75 ns per item besides the hook's own work (two clock reads and a
// recover guard; BenchmarkSinkEncode), on the goroutine that feeds the
// sink: no hop, unlike a stage. Starting an epoch (New, Start, reading the
// end of an empty source, Stop, three stages) costs about 21 µs
// (BenchmarkStartup).
package pipeline
