package pipeline

import (
	"fmt"
	"math"
	"time"
)

// Autotuning (StageConfig.AutoConcurrency).
//
// An auto stage starts MaxConcurrency workers, but a gate lets only
// `limit` of them work: a worker takes a gate token before it takes an
// item and gives it back after the item has left, and the tuner holds the
// other MaxConcurrency-limit tokens. Raising the limit is giving a token
// back; lowering it is taking one, which waits for some worker to finish
// its item. Parked workers cost a goroutine each and nothing per item.
//
// The tuner starts from Concurrency (by default the stage's share of
// Config.CPUBudget, at most MaxConcurrency) and measures the stage over
// windows: at least a duration and enough items to mean something. It
// reads the items the stage finished, its workers' busy time and the
// process's CPU time, then:
//
//   - first guess (the tuner's first windows, which are short so that a
//     short epoch does not pay for them): if the workers are busy and the
//     process uses about as much CPU as the busy workers (a CPU-bound
//     op), fill the idle cores at once: limit + the cores (Cores)
//     the process leaves idle, within the budget. The next windows check
//     it: only a clear loss, twice running, takes it back (a gain or a tie
//     keeps it, since a CPU-bound op given idle cores rarely loses and a
//     short window is noisy). An op that waits (I/O, a sleep, a lock)
//     gets no guess: its tuner climbs as below.
//   - measure: the rate at the current limit becomes the baseline. If the
//     workers were busy (not starved by the stage before, not blocked by
//     the stage after) and the CPU budget has room, it probes up (past
//     the budget, up to twice it, only while the process uses every
//     core the machine has: see room);
//     otherwise, above 1, it probes down if the workers idled half the
//     time (straight to the workers that the measured busy time needs,
//     by Little's law), or if this is a re-check (a probe down from busy
//     workers usually costs a window of throughput, which a short epoch
//     would feel).
//   - probe up: if the probe beat the baseline by minGain, keep it and
//     probe up again, by a step that doubles after two (+1, +1, +2, +4:
//     a stage that scales reaches its ceiling in a few windows, one that
//     does not never sees more than 2 above its start); otherwise go back
//     and, on a re-check, probe down from there.
//   - probe down: if the probe kept the throughput (within maxLoss of the
//     baseline) or its workers were idle half the time, keep it (fewer
//     threads for the same work) and probe down again; otherwise go back
//     (if the budget still has room) and settle.
//   - settled: after a number of windows, measure again, so that a change
//     in the data or in the machine's load is followed. A re-check that
//     changes nothing doubles the wait before the next (up to
//     maxRecheckWindows): a stage at its best is not probed down every
//     few seconds.
//
// The window right after a change is discarded (workers that were parked
// start cold, and items already in flight belong to the old setting), but
// it lasts only until those items are through (and at least an eighth of
// the interval). The limit and the settled state carry over to the next
// epoch. Every decision goes to a short log that Stats reports
// (StageStats.TuningLog), with the window's rate, busy fraction and CPU.

const (
	defaultTuneInterval = 100 * time.Millisecond
	minGain             = 0.05 // a probe up must beat the baseline by 5%
	maxLoss             = 0.05 // a probe down may lose at most 5%
	guessLoss           = 0.10 // a first guess is taken back only below 90% of the baseline
	idleToShed          = 0.5  // workers busier than this may not do with one fewer
	busyToGrow          = 0.75 // workers busier than this may use one more
	cpuBound            = 0.8  // CPU per busy worker above which the op counts as CPU-bound
	saturatedSlack      = 0.25 // a process within this many cores of Cores uses every core
	oversubscribe       = 2    // auto stages may run this many times the budget while every core is busy
	reprobeWindows      = 30
	maxRecheckWindows   = 8 * reprobeWindows
	minWindowItems      = 8 // per worker allowed, at least
	maxWindowIntervals  = 20
	shortWindow         = 8 // warm-up and discarded windows last interval/shortWindow
	warmupWindows       = 3 // inconclusive first windows before the tuner settles anyway
	tuneLogLen          = 32
)

type tunePhase int

const (
	phaseMeasure tunePhase = iota
	phaseProbeUp
	phaseProbeDown
	phaseSettled
	phaseGuess
)

func (ph tunePhase) String() string {
	return [...]string{"measuring", "probing up", "probing down", "settled", "checking first guess"}[ph]
}

// tuner is an auto stage's persistent state; only the epoch's controller
// goroutine writes it, except limit, status and log, which Stats reads
// under Pipeline.tuneMu.
type tuner struct {
	max     int
	limit   int
	phase   tunePhase
	base    float64 // items/s at the baseline limit
	from    int     // the limit the baseline was measured at
	settled int     // windows since settling
	changes int     // limit changes so far, over all epochs
	reprobe bool    // this measure phase is a re-check, not an epoch's start
	status  string  // for Stats; under Pipeline.tuneMu

	warm    bool       // a decision was made: windows are full length from now on
	tries   int        // inconclusive warm-up windows so far
	lost    int        // windows in a row in which the first guess lost
	ups     int        // successful probes up in a row (sets the step)
	recheck int        // settled windows before the next re-check; 0 = reprobeWindows
	start   int        // the limit the current re-check started from
	reason  string     // why the last step decided what it did; "" if it decided nothing
	log     []TuneStep // the last tuneLogLen decisions; under Pipeline.tuneMu
}

// window is one window's measurements.
type window struct {
	rate  float64 // items/s the stage finished
	busy  float64 // busy fraction of the allowed workers
	cpu   float64 // cores the whole process used; < 0 if unknown
	room  int     // workers the CPU budget still allows
	cores int     // Cores
	over  bool    // the budget is used and so is every core: room is past the budget
}

// guess is the first guess for a CPU-bound stage: the workers that fill
// the cores the process leaves idle, or 0 if the op does not look
// CPU-bound (it waits, or the CPU is unknown) or no core is idle.
func (t *tuner) guess(m window) int {
	busyWorkers := m.busy * float64(t.limit)
	if m.cpu < 0 || m.cpu < cpuBound*busyWorkers {
		return 0
	}
	idle := math.Floor(float64(m.cores) - m.cpu + 0.5)
	return min(t.limit+int(idle), t.limit+m.room, t.max)
}

// upStep is the next probe's size: 1, 1, then doubling.
func (t *tuner) upStep() int {
	if t.ups < 2 {
		return 1
	}
	return 1 << (t.ups - 1)
}

// step takes one window's measurements and returns the new limit; it
// sets t.reason to why.
func (t *tuner) step(m window) int {
	grow := t.limit < t.max && m.room > 0 && m.busy >= busyToGrow
	up := func() int {
		if m.over {
			t.reason += " past the budget (every core is busy)"
		}
		t.from = t.limit
		t.phase = phaseProbeUp
		return min(t.limit+t.upStep(), t.limit+m.room, t.max)
	}
	settle := func(why string) int { return t.settle(t.limit, why) }
	switch t.phase {
	case phaseMeasure:
		t.base, t.from = m.rate, t.limit
		if grow {
			if !t.warm && !t.reprobe {
				if g := t.guess(m); g > t.limit {
					t.phase, t.warm = phaseGuess, true
					t.reason = fmt.Sprintf("first guess: CPU-bound op (process at %.1f of %d cores), fill the idle cores", max(m.cpu, 0), m.cores)
					return g
				}
			}
			t.warm, t.ups = true, 0
			t.reason = "workers busy and room to grow: probe up"
			return up()
		}
		// Probing down from busy workers usually costs throughput for a
		// window, so it waits for a re-check, when the stage has run a
		// while at its setting; idle workers are shed at once, down to
		// what the busy time needs (Little's law, with headroom).
		if t.limit > 1 && (t.reprobe || m.busy < idleToShed) {
			t.phase, t.warm = phaseProbeDown, true
			next := t.limit - 1
			if m.busy < idleToShed {
				next = min(next, max(1, int(math.Ceil(m.busy*float64(t.limit)/busyToGrow))))
				t.reason = "workers idle half the time: shed the idle ones"
			} else {
				t.reason = "re-check: see whether fewer workers do as well"
			}
			return next
		}
		// Workers neither busy nor idle: in the first short windows of a
		// fresh tuner that is often the pipeline filling up; look again.
		if !t.warm && t.tries < warmupWindows {
			t.tries++
			t.reason = ""
			return t.limit
		}
		return settle("workers neither saturated nor idle, or no room in the budget")
	case phaseGuess:
		// Only a clear loss, in two windows running, takes the guess back:
		// a short first window overstates or understates the baseline by
		// several percent, and one window can catch a burst of another
		// process's work.
		if m.rate < t.base*(1-guessLoss) && m.busy >= idleToShed {
			if t.lost == 0 {
				t.lost++
				t.reason = ""
				return t.limit
			}
			t.lost = 0
			return t.settle(t.from, fmt.Sprintf("first guess lost throughput against %.0f items/s at %d: back", t.base, t.from))
		}
		t.base, t.lost = m.rate, 0
		if grow {
			t.reason = "first guess kept; workers still busy: probe up"
			return up()
		}
		return settle("first guess kept")
	case phaseProbeUp:
		if m.rate >= t.base*(1+minGain) {
			why := fmt.Sprintf("gained over %.0f items/s at %d: keep", t.base, t.from)
			t.base, t.ups = m.rate, t.ups+1
			if grow {
				t.reason = why + ", probe up"
				return up()
			}
			return settle(why)
		}
		// Back to the baseline, then (on a re-check) see whether one
		// fewer does as well. (The baseline's rate stands for the limit
		// it was measured at.)
		t.ups = 0
		if t.from > 1 && t.reprobe {
			t.phase = phaseProbeDown
			t.reason = fmt.Sprintf("no gain over %.0f items/s: back, and probe down", t.base)
			return t.from - 1
		}
		return t.settle(t.from, fmt.Sprintf("no gain over %.0f items/s at %d: back", t.base, t.from))
	case phaseProbeDown:
		// Fewer threads are as good if the throughput held (against the
		// baseline of the limit the descent started from, so that small
		// losses do not add up) or the remaining workers still idle half
		// the time (then they are not what limits the stage).
		if m.rate >= t.base*(1-maxLoss) || m.busy < idleToShed {
			if t.limit > 1 {
				t.reason = "throughput held: keep, probe down"
				if m.busy < idleToShed {
					return max(1, min(t.limit-1, int(math.Ceil(m.busy*float64(t.limit)/busyToGrow))))
				}
				return t.limit - 1
			}
			return settle("throughput held at 1 worker")
		}
		if m.room <= 0 {
			return settle("lost throughput, but another auto stage took the freed worker")
		}
		return t.settle(t.limit+1, fmt.Sprintf("lost throughput against %.0f items/s: back", t.base))
	case phaseSettled:
		t.settled++
		if t.settled >= t.recheckAfter() {
			t.phase, t.reprobe, t.start = phaseMeasure, true, t.limit
		}
	}
	t.reason = ""
	return t.limit
}

// settle ends a climb at limit next. A re-check that ends where it
// started doubles the wait before the next one (a stage at its best is
// not probed every few seconds); one that moved resets it.
func (t *tuner) settle(next int, why string) int {
	t.phase, t.settled, t.warm, t.ups = phaseSettled, 0, true, 0
	t.reason = why
	if t.reprobe {
		if next == t.start {
			t.recheck = min(2*t.recheckAfter(), maxRecheckWindows)
		} else {
			t.recheck = reprobeWindows
		}
		t.reprobe, t.start = false, 0
	}
	return next
}

func (t *tuner) recheckAfter() int {
	if t.recheck == 0 {
		return reprobeWindows
	}
	return t.recheck
}

// autoWindow is the controller's view of one auto stage in one epoch.
type autoWindow struct {
	s       *stageInfo
	c       *stageCounters
	t0      time.Time
	items   int64         // finished items at t0
	busy    int64         // busy ns at t0
	cpu     time.Duration // process CPU at t0
	discard bool          // the window after a change
	held    int           // gate tokens the controller holds
}

// finished counts items the stage is done with (sent on or failed).
func (w *autoWindow) finished() (items, busy int64) {
	for i := range w.c.slots {
		items += w.c.slots[i].out.Load()
		busy += w.c.slots[i].busy.Load()
	}
	return items + w.c.failures.Load(), busy
}

// runTuner is the controller goroutine of an epoch with auto stages. It
// returns when the epoch is cancelled or allDone is closed (every auto
// stage's workers have returned).
func (ep *epoch) runTuner(ws []*autoWindow, allDone <-chan struct{}) error {
	p := ep.p
	interval := p.cfg.TuneInterval
	short := max(interval/shortWindow, 2*time.Millisecond)
	tick := time.NewTicker(short / 2)
	defer tick.Stop()
	now := time.Now()
	cpu, cpuOK := processCPU()
	for _, w := range ws {
		w.items, w.busy = w.finished()
		w.t0, w.cpu = now, cpu
		// A fresh tuner's first window is not discarded: no worker was
		// parked or moved, and the cold start of the first items costs
		// less than a window at the start's concurrency would.
		if !w.s.tuner.warm {
			w.discard = false
		}
	}
	for {
		select {
		case <-ep.done:
			return nil
		case <-allDone:
			return nil
		case now = <-tick.C:
		}
		// Once a read fails the CPU stays unknown: a window must not span
		// a missing reading.
		c, ok := processCPU()
		cpu, cpuOK = c, cpuOK && ok
		live := 0
		for _, w := range ws {
			if isDone(w.c.workersDone) {
				continue
			}
			live++
			items, busy := w.finished()
			dt := now.Sub(w.t0)
			p.tuneMu.Lock()
			t := w.s.tuner
			limit, warm, phase := t.limit, t.warm, t.phase
			p.tuneMu.Unlock()
			// Discarded windows last until the items in flight at the
			// change are through; a fresh tuner's first windows are short
			// (the first guess needs only the busy time and the CPU).
			least, need := interval, int64(minWindowItems*limit)
			first := false
			switch {
			case w.discard:
				least, need = short, int64(limit)
			case !warm && phase == phaseMeasure:
				least, first = short, true
			}
			if dt < least {
				continue
			}
			m := window{
				rate:  float64(items-w.items) / dt.Seconds(),
				busy:  float64(busy-w.busy) / (float64(dt) * float64(limit)),
				cpu:   -1,
				cores: Cores,
			}
			if cpuOK {
				m.cpu = float64(cpu-w.cpu) / float64(dt)
			}
			m.room, m.over = room(p.cfg.CPUBudget, p.autoUsed(), Cores, m.cpu)
			if items-w.items < need && dt < maxWindowIntervals*interval {
				// Too few items to compare rates. A fresh tuner's first
				// guess compares none: one finished item will do when the
				// guess fires (heavy items, such as video clips, would
				// otherwise run at the starting concurrency for
				// minWindowItems of them).
				// A quarter interval evens out the CPU that other threads
				// (the source, the consumer) add to a short window.
				if !first || items == w.items || dt < interval/4 || t.guess(m) <= limit {
					continue
				}
			}
			w.t0, w.items, w.busy, w.cpu = now, items, busy, cpu
			if w.discard {
				w.discard = false
				continue
			}
			next := t.step(m)
			if next != limit && !ep.setLimit(w, next) {
				return nil
			}
			p.tuneMu.Lock()
			t.status = fmt.Sprintf("%s at %d (%.0f items/s, workers %.0f%% busy)", t.phase, t.limit, m.rate, min(m.busy, 1)*100)
			if t.reason != "" {
				t.record(TuneStep{
					AtNs: int64(now.Sub(ep.start)), Epoch: int(p.epochs.Load()), From: limit, To: t.limit,
					Reason: t.reason, ItemsPerS: m.rate, Busy: min(m.busy, 1), CPU: m.cpu,
				})
			}
			p.tuneMu.Unlock()
		}
		if live == 0 {
			return nil
		}
	}
}

// setLimit moves gate tokens so that next workers may run; false if the
// epoch ended while it waited for a worker to give one back.
func (ep *epoch) setLimit(w *autoWindow, next int) bool {
	t := w.s.tuner
	for t.limit < next {
		<-w.c.gate // the controller holds held > 0 tokens here
		w.held--
		ep.p.setTunerLimit(t, t.limit+1)
	}
	for t.limit > next {
		select {
		case w.c.gate <- struct{}{}:
		case <-ep.done:
			return false
		case <-w.c.workersDone:
			return true
		}
		w.held++
		ep.p.setTunerLimit(t, t.limit-1)
	}
	w.discard = true
	return true
}

func (p *Pipeline) setTunerLimit(t *tuner, n int) {
	p.tuneMu.Lock()
	t.limit = n
	t.changes++
	p.tuneMu.Unlock()
}

// room is how many more workers the auto stages may run, given the budget,
// the workers they may run now, the machine's cores and the cores the
// process used (< 0 if unknown). Past the budget only when the budget is
// used up and the process already uses every core the machine has (over):
// more threads then cannot use more CPU than the budget allows, and they
// can still hide the waits between items (handoffs, wake-ups), which on a
// small machine is worth several percent. Whether they do is measured by
// the probe, not assumed.
func room(budget, used, cores int, cpu float64) (n int, over bool) {
	n = budget - used
	if n <= 0 && budget >= cores && cpu >= float64(cores)-saturatedSlack {
		return oversubscribe*budget - used, true
	}
	return n, false
}

// autoUsed is the workers all auto stages may run now.
func (p *Pipeline) autoUsed() int {
	p.tuneMu.Lock()
	defer p.tuneMu.Unlock()
	n := 0
	for i := range p.stages {
		if t := p.stages[i].tuner; t != nil {
			n += t.limit
		}
	}
	return n
}

// record appends a decision to the log, keeping the last tuneLogLen; the
// caller holds Pipeline.tuneMu.
func (t *tuner) record(s TuneStep) {
	t.log = append(t.log, s)
	if len(t.log) > tuneLogLen {
		t.log = append(t.log[:0:0], t.log[len(t.log)-tuneLogLen:]...)
	}
}

// report fills an auto stage's fields of its StageStats.
func (p *Pipeline) report(t *tuner, st *StageStats) {
	p.tuneMu.Lock()
	st.Concurrency, st.Tuning = t.limit, t.status
	st.TuningLog = append([]TuneStep(nil), t.log...)
	p.tuneMu.Unlock()
	st.Auto, st.MaxConcurrency = true, t.max
}

// newGate makes an auto stage's gate for an epoch, with the tokens of the
// parked workers already taken.
func newGate(t *tuner) (gate chan struct{}, held int) {
	gate = make(chan struct{}, t.max)
	for range t.max - t.limit {
		gate <- struct{}{}
	}
	return gate, t.max - t.limit
}
