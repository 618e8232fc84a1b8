package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// plant models a stage for the tuner: what one window at a given limit
// measures. The tuner is driven window by window with no clock, so these
// tests check its decisions, not the machine's timing.
type plant func(limit int) (rate, busy, cpu float64)

// cpuOp scales with workers up to the cores that `other` cores of work
// elsewhere in the process leave it (each busy worker uses a core).
func cpuOp(perWorker float64, cores int, other float64) plant {
	return func(l int) (float64, float64, float64) {
		used := min(float64(l), float64(cores)-other)
		return perWorker * used, 0.97, other + used*0.97
	}
}

// waitOp scales with workers up to scaleTo and uses almost no CPU (I/O,
// sleep, or a lock when scaleTo is 1).
func waitOp(perWorker float64, scaleTo int) plant {
	return func(l int) (float64, float64, float64) {
		return perWorker * float64(min(l, scaleTo)), 0.99, 0.05
	}
}

// hidesWaits is a CPU-bound op on `cores` cores that the process keeps
// busy (other work fills them when the stage's workers are fewer), where
// a thread past the cores multiplies the rate by g1, and the next by g2.
func hidesWaits(perWorker float64, cores int, g1, g2 float64) plant {
	return func(l int) (float64, float64, float64) {
		r := perWorker * float64(min(l, cores))
		if l > cores {
			r *= g1
		}
		if l > cores+1 {
			r *= g2
		}
		cpu := 0.97 * float64(min(l, cores))
		if l == 1 {
			cpu = 1.0
		}
		return r, 0.97, cpu
	}
}

// run drives a fresh tuner for n windows and returns the limit after
// each (the start first) and the tuner.
func run(p plant, start, maxC, budget, cores, n int) ([]int, *tuner) {
	t := &tuner{max: maxC, limit: start}
	seen := []int{start}
	for range n {
		rate, busy, cpu := p(t.limit)
		m := window{rate: rate, busy: busy, cpu: cpu, cores: cores}
		m.room, m.over = room(budget, t.limit, cores, cpu)
		t.limit = t.step(m)
		seen = append(seen, t.limit)
	}
	return seen, t
}

func TestTunerDecisions(t *testing.T) {
	tests := []struct {
		name                      string
		p                         plant
		start, max, budget, cores int
		windows                   int
		want                      []int // the limit after each window, the start first
	}{
		// A CPU-bound op jumps to the idle cores at once and keeps them.
		{"cpu-bound, 2 cores, from 1", cpuOp(500, 2, 0.3), 1, 2, 2, 2, 4, []int{1, 2, 2, 2, 2}},
		{"cpu-bound, 8 cores, from 1", cpuOp(500, 8, 0.1), 1, 8, 8, 8, 3, []int{1, 8, 8, 8}},
		// The process uses 3 of 8 cores elsewhere: only 4 more (8 - 4.1);
		// a probe beyond them gains nothing.
		{"cpu-bound, other work", cpuOp(500, 8, 3.1), 1, 8, 8, 8, 4, []int{1, 5, 6, 5, 5}},
		// The guess is capped by the budget.
		{"cpu-bound, budget below cores", cpuOp(500, 8, 0.1), 1, 8, 3, 8, 3, []int{1, 3, 3, 3}},
		// Every core busy: threads past the budget are probed, and kept
		// while they gain (they hide the waits between items)...
		{"cpu-bound, more threads hide waits", hidesWaits(1000, 2, 1.06, 1.01), 1, 4, 2, 2, 5, []int{1, 2, 3, 4, 3, 3}},
		// ...and given back when they do not.
		{"cpu-bound, more threads do not help", hidesWaits(1000, 2, 1.0, 1.0), 1, 4, 2, 2, 4, []int{1, 2, 3, 2, 2}},
		// Not when the budget leaves cores to others.
		{"cpu-bound, budget below cores, all busy", hidesWaits(1000, 2, 1.06, 1.01), 1, 8, 2, 8, 4, []int{1, 2, 2, 2, 2}},
		// A waiting op has no first guess: it climbs +1, +1, +2, +4.
		{"waiting op climbs", waitOp(300, 8), 1, 8, 8, 2, 6, []int{1, 2, 3, 5, 8, 8, 8}},
		{"waiting op climbs to where it stops scaling", waitOp(300, 4), 1, 8, 8, 2, 6, []int{1, 2, 3, 5, 8, 5, 5}},
		// A serial op never sees more than one worker above its start.
		{"serial op", waitOp(300, 1), 1, 8, 8, 2, 4, []int{1, 2, 1, 1, 1}},
		// Idle workers are shed straight to what the busy time needs.
		{"idle workers shed", func(l int) (float64, float64, float64) {
			return 200, min(1, 0.5/float64(l)), 0.2
		}, 6, 8, 8, 2, 3, []int{6, 1, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, tu := run(tc.p, tc.start, tc.max, tc.budget, tc.cores, tc.windows)
			if !slices.Equal(got, tc.want) {
				t.Errorf("limits %v, want %v (log: %s)", got, tc.want, tu.reason)
			}
		})
	}
}

// A first guess that loses clearly, in two windows running, is taken
// back; one that ties (within the noise of a short first window) is kept,
// and so is one that loses in one window only (a burst of other work).
func TestTunerFirstGuessVerdict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ratio float64 // rate at the guess over the rate at the start
		end   int
	}{
		{"clear loss: back", 0.8, 1},
		{"tie: kept", 0.95, 2},
		{"gain: kept", 1.6, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := func(l int) (float64, float64, float64) {
				if l == 1 {
					return 1000, 0.97, 1.3
				}
				return 1000 * tc.ratio, 0.97, 1.9
			}
			got, tu := run(p, 1, 2, 2, 2, 4)
			if got[1] != 2 || got[4] != tc.end {
				t.Errorf("limits %v, want a guess of 2 that ends at %d", got, tc.end)
			}
			if tu.phase != phaseSettled {
				t.Errorf("phase %v, want settled", tu.phase)
			}
		})
	}
}

// A re-check that changes nothing doubles the wait before the next, up to
// maxRecheckWindows; the probes cost at most one window each.
func TestTunerRecheckBacksOff(t *testing.T) {
	// Best at 2 of 2 cores: a re-check probes down to 1, loses, goes back.
	got, tu := run(cpuOp(500, 2, 0.3), 1, 2, 2, 2, 2000)
	var rechecks []int // window index of each probe down
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			rechecks = append(rechecks, i)
		}
		if got[i] < 1 || got[i] > 2 {
			t.Fatalf("window %d: limit %d", i, got[i])
		}
	}
	if got[len(got)-1] != 2 {
		t.Errorf("ended at %d, want 2", got[len(got)-1])
	}
	var gaps []int
	for i := 1; i < len(rechecks); i++ {
		gaps = append(gaps, rechecks[i]-rechecks[i-1])
	}
	if len(gaps) < 3 || gaps[0] >= gaps[1] || gaps[1] >= gaps[2] || slices.Max(gaps) > maxRecheckWindows+4 {
		t.Errorf("re-checks at windows %v (gaps %v): want growing gaps, at most %d", rechecks, gaps, maxRecheckWindows+4)
	}
	if tu.recheck != maxRecheckWindows {
		t.Errorf("recheck wait %d, want it capped at %d", tu.recheck, maxRecheckWindows)
	}
}

// A re-check that moves the limit resets the wait.
func TestTunerRecheckFollowsChange(t *testing.T) {
	tu := &tuner{max: 4, limit: 4, phase: phaseSettled, warm: true, recheck: maxRecheckWindows}
	// The op became serial (a lock, say): one worker does as well as 4.
	for range maxRecheckWindows + 10 {
		tu.limit = tu.step(window{rate: 400, busy: 0.9, cpu: 0.1, room: 4 - tu.limit, cores: 2})
	}
	if tu.limit != 1 || tu.recheck != reprobeWindows {
		t.Errorf("limit %d, recheck %d: want 1 worker and the wait reset to %d", tu.limit, tu.recheck, reprobeWindows)
	}
}

// Every decision lands in the log that Stats reports, bounded.
func TestTunerLogBounded(t *testing.T) {
	p := &Pipeline{}
	tu := &tuner{max: 2, limit: 1, status: "x"}
	for i := range 3 * tuneLogLen {
		tu.record(TuneStep{From: i, To: i + 1, Reason: fmt.Sprint(i)})
	}
	var st StageStats
	p.report(tu, &st)
	if len(st.TuningLog) != tuneLogLen || st.TuningLog[0].From != 2*tuneLogLen || !st.Auto || st.MaxConcurrency != 2 {
		t.Errorf("log of %d from %d, auto %v max %d", len(st.TuningLog), st.TuningLog[0].From, st.Auto, st.MaxConcurrency)
	}
	if !strings.Contains(st.Tuning, "x") {
		t.Errorf("status %q", st.Tuning)
	}
}

// One window of loss after a first guess (another process's burst) does
// not take the guess back when the next window is fine.
func TestTunerFirstGuessSurvivesOneBadWindow(t *testing.T) {
	rates := []float64{1000, 700, 1500, 1500} // at 1, then at the guess
	tu := &tuner{max: 2, limit: 1}
	var seen []int
	for _, r := range rates {
		tu.limit = tu.step(window{rate: r, busy: 0.97, cpu: 1.2, room: 2 - tu.limit, cores: 2})
		seen = append(seen, tu.limit)
	}
	if !slices.Equal(seen, []int{2, 2, 2, 2}) || tu.phase != phaseSettled {
		t.Errorf("limits %v, phase %v: want the guess of 2 kept and settled", seen, tu.phase)
	}
}
