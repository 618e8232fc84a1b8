package pipeline

import (
	"fmt"
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
// The tuner is a hill climber on measured throughput. It starts from the
// stage's share of the CPU budget (Config.CPUBudget over the number of auto
// stages, at most MaxConcurrency), unless Concurrency sets the start: where
// someone tuning by hand would start, so that a short epoch does not pay
// for a climb from 1. Every window (at least Config.TuneInterval and enough
// items to mean something) it reads the items the stage finished and its
// busy time, then:
//
//   - measure: the rate at the current limit becomes the baseline. If the
//     workers were busy (not starved by the stage before, not blocked by
//     the stage after) and the CPU budget has room, it probes limit+1;
//     otherwise, above 1, it probes limit-1 if the workers idled half the
//     time, or if this is a re-check (a probe down from busy workers
//     usually costs a window of throughput, which a short epoch would feel).
//   - probe up: if limit+1 beat the baseline by minGain, keep it and probe
//     up again; otherwise go back and, on a re-check, probe down from there.
//   - probe down: if limit-1 kept the throughput (within maxLoss of the
//     baseline) or its workers were idle half the time, keep it (fewer
//     threads for the same work) and probe down again; otherwise go back
//     (if the budget still has room) and settle.
//   - settled: after reprobeWindows windows, measure again, so that a
//     change in the data or in the machine's load is followed.
//
// The window right after a change is discarded: workers that were parked
// start cold, and items already in flight belong to the old setting.
// The limit (and the settled state) carry over to the next epoch.

const (
	defaultTuneInterval = 100 * time.Millisecond
	minGain             = 0.05 // a probe up must beat the baseline by 5%
	maxLoss             = 0.05 // a probe down may lose at most 5%
	idleToShed          = 0.5  // workers busier than this may not do with one fewer
	busyToGrow          = 0.75 // workers busier than this may use one more
	reprobeWindows      = 30
	minWindowItems      = 8 // per worker allowed, at least
	maxWindowIntervals  = 20
)

type tunePhase int

const (
	phaseMeasure tunePhase = iota
	phaseProbeUp
	phaseProbeDown
	phaseSettled
)

func (ph tunePhase) String() string {
	return [...]string{"measuring", "probing up", "probing down", "settled"}[ph]
}

// tuner is an auto stage's persistent state; only the epoch's controller
// goroutine writes it, except limit, which Stats reads.
type tuner struct {
	max     int
	limit   int
	phase   tunePhase
	base    float64 // items/s at the baseline limit
	settled int     // windows since settling
	changes int     // limit changes so far, over all epochs
	reprobe bool    // this measure phase is a re-check, not an epoch's start
	status  string  // for Stats; under Pipeline.tuneMu
}

// step takes one window's measurements and returns the new limit. room
// says whether the CPU budget allows one more worker.
func (t *tuner) step(rate, busy float64, room bool) int {
	grow := t.limit < t.max && room && busy >= busyToGrow
	settle := func() int {
		t.phase, t.settled = phaseSettled, 0
		return t.limit
	}
	switch t.phase {
	case phaseMeasure:
		t.base = rate
		if grow {
			t.phase = phaseProbeUp
			return t.limit + 1
		}
		// Probing down from busy workers usually costs throughput for a
		// window, so it waits for a re-check, when the stage has run a
		// while at its setting; idle workers are shed at once.
		if t.limit > 1 && (t.reprobe || busy < idleToShed) {
			t.phase = phaseProbeDown
			return t.limit - 1
		}
		return settle()
	case phaseProbeUp:
		if rate >= t.base*(1+minGain) {
			t.base = rate
			if grow {
				return t.limit + 1
			}
			return settle()
		}
		// Back to the baseline, then (on a re-check) see whether one
		// fewer does as well. (The baseline's rate stands for the limit
		// it was measured at.)
		if t.limit-1 > 1 && t.reprobe {
			t.phase = phaseProbeDown
			return t.limit - 2
		}
		t.phase, t.settled = phaseSettled, 0
		return t.limit - 1
	case phaseProbeDown:
		// Fewer threads are as good if the throughput held (against the
		// baseline of the limit the descent started from, so that small
		// losses do not add up) or the remaining workers still idle half
		// the time (then they are not what limits the stage).
		if rate >= t.base*(1-maxLoss) || busy < idleToShed {
			if t.limit > 1 {
				return t.limit - 1
			}
			return settle()
		}
		t.phase, t.settled = phaseSettled, 0
		if !room {
			return t.limit // another auto stage took the freed worker
		}
		return t.limit + 1
	case phaseSettled:
		t.settled++
		if t.settled >= reprobeWindows {
			t.phase, t.reprobe = phaseMeasure, true
		}
	}
	return t.limit
}

// autoWindow is the controller's view of one auto stage in one epoch.
type autoWindow struct {
	s       *stageInfo
	c       *stageCounters
	t0      time.Time
	items   int64 // finished items at t0
	busy    int64 // busy ns at t0
	discard bool  // the window after a change
	held    int   // gate tokens the controller holds
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
	tick := time.NewTicker(interval / 4)
	defer tick.Stop()
	now := time.Now()
	for _, w := range ws {
		w.items, w.busy = w.finished()
		w.t0 = now
	}
	for {
		select {
		case <-ep.done:
			return nil
		case <-allDone:
			return nil
		case now = <-tick.C:
		}
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
			limit := t.limit
			p.tuneMu.Unlock()
			if dt < interval || (items-w.items < int64(minWindowItems*limit) && dt < maxWindowIntervals*interval) {
				continue
			}
			rate := float64(items-w.items) / dt.Seconds()
			util := float64(busy-w.busy) / (float64(dt) * float64(limit))
			w.t0, w.items, w.busy = now, items, busy
			if w.discard {
				w.discard = false
				continue
			}
			next := t.step(rate, util, p.autoUsed() < p.cfg.CPUBudget)
			if next != limit && !ep.setLimit(w, next) {
				return nil
			}
			p.tuneMu.Lock()
			t.status = fmt.Sprintf("%s at %d (%.0f items/s, workers %.0f%% busy)", t.phase, t.limit, rate, min(util, 1)*100)
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

// newGate makes an auto stage's gate for an epoch, with the tokens of the
// parked workers already taken.
func newGate(t *tuner) (gate chan struct{}, held int) {
	gate = make(chan struct{}, t.max)
	for range t.max - t.limit {
		gate <- struct{}{}
	}
	return gate, t.max - t.limit
}
