package sampler_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/sampler"
)

func TestOrderIsAPermutation(t *testing.T) {
	for _, n := range []int64{1, 2, 3, 7, 64, 1000, 1<<16 + 1} {
		for _, shuffle := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/shuffle=%v", n, shuffle), func(t *testing.T) {
				o := sampler.NewOrder(n, shuffle, 42, 3)
				seen := make([]bool, n)
				moved := 0
				for p := range n {
					i := o.At(p)
					if i < 0 || i >= n || seen[i] {
						t.Fatalf("position %d -> %d: out of range or repeated", p, i)
					}
					seen[i] = true
					if i != p {
						moved++
					}
				}
				if !shuffle && moved != 0 {
					t.Fatalf("without shuffle %d positions moved", moved)
				}
				if shuffle && n >= 64 && moved < int(n)/2 {
					t.Fatalf("a shuffle moved only %d of %d positions", moved, n)
				}
			})
		}
	}
}

func TestOrderDependsOnSeedAndEpochOnly(t *testing.T) {
	at := func(seed uint64, epoch int64) []int64 {
		o := sampler.NewOrder(500, true, seed, epoch)
		out := make([]int64, 500)
		for p := range out {
			out[p] = o.At(int64(p))
		}
		return out
	}
	a := at(7, 0)
	if !slices.Equal(a, at(7, 0)) {
		t.Fatal("the same seed and epoch gave two orders")
	}
	if slices.Equal(a, at(7, 1)) || slices.Equal(a, at(8, 0)) {
		t.Fatal("another epoch or seed gave the same order")
	}
}

// deal returns every rank's items (dataset indices, with pads marked) of a
// plan from progress.
func deal(t *testing.T, cfg sampler.Config, p sampler.Progress) (plans []*sampler.Plan, items [][]int64, pads [][]bool) {
	t.Helper()
	for r := range cfg.World {
		c := cfg
		c.Rank = r
		pl, err := sampler.NewPlan(c, p)
		if err != nil {
			t.Fatal(err)
		}
		var its []int64
		var ps []bool
		for i := range pl.Len() {
			_, idx, pad := pl.At(i)
			its = append(its, idx)
			ps = append(ps, pad)
		}
		plans, items, pads = append(plans, pl), append(items, its), append(pads, ps)
	}
	return
}

func TestPlanSplitsAnEpochOverRanks(t *testing.T) {
	for _, tc := range []struct {
		n        int64
		world    int
		dropLast bool
	}{
		{10, 1, false}, {10, 2, false}, {10, 3, false}, {10, 3, true}, {11, 4, false}, {11, 4, true}, {3, 5, false}, {3, 5, true}, {1000, 7, false},
	} {
		for _, shuffle := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/w=%d/drop=%v/shuffle=%v", tc.n, tc.world, tc.dropLast, shuffle), func(t *testing.T) {
				cfg := sampler.Config{N: tc.n, World: tc.world, DropLast: tc.dropLast, Shuffle: shuffle, Seed: 1}
				_, items, pads := deal(t, cfg, sampler.Progress{Epoch: 2})
				count := map[int64]int{}
				for r := range items {
					if len(items[r]) != len(items[0]) {
						t.Fatalf("rank %d has %d items, rank 0 has %d", r, len(items[r]), len(items[0]))
					}
					for i, idx := range items[r] {
						if !pads[r][i] {
							count[idx]++
						}
					}
				}
				dropped := int64(0)
				if tc.dropLast {
					dropped = tc.n % int64(tc.world)
				}
				if int64(len(count)) != tc.n-dropped {
					t.Fatalf("%d distinct samples dealt, want %d", len(count), tc.n-dropped)
				}
				for idx, c := range count {
					if c != 1 {
						t.Fatalf("sample %d dealt %d times (not counting pads)", idx, c)
					}
				}
				if want := (tc.n + int64(tc.world) - 1) / int64(tc.world); !tc.dropLast && int64(len(items[0])) != want {
					t.Fatalf("padded count %d, want %d", len(items[0]), want)
				}
			})
		}
	}
}

// The core promise: consume part of an epoch (unevenly across ranks, some
// items out of order), save, merge, and deal the rest to a new number of
// ranks: every sample of the epoch is then consumed exactly once.
func TestResumeOnAnotherWorldSize(t *testing.T) {
	for _, tc := range []struct {
		n             int64
		before, after int
	}{
		{100, 1, 1}, {100, 2, 1}, {100, 1, 2}, {101, 2, 3}, {1000, 4, 2}, {1000, 3, 5}, {7, 2, 4},
	} {
		t.Run(fmt.Sprintf("n=%d/%d->%d", tc.n, tc.before, tc.after), func(t *testing.T) {
			checkResume(t, tc.n, tc.before, tc.after, 1)
		})
	}
}

// FuzzResume checks the exactly-once promise for any size, world sizes and
// pattern of consumption.
func FuzzResume(f *testing.F) {
	f.Add(uint16(100), uint8(2), uint8(3), uint64(1))
	f.Add(uint16(1), uint8(1), uint8(4), uint64(2))
	f.Add(uint16(7), uint8(5), uint8(2), uint64(3))
	f.Fuzz(func(t *testing.T, n uint16, before, after uint8, seed uint64) {
		if n == 0 || before == 0 || after == 0 || before > 16 || after > 16 {
			t.Skip()
		}
		checkResume(t, int64(n), int(before), int(after), seed)
	})
}

// checkResume consumes part of an epoch (unevenly across ranks, some items
// out of order), saves each rank's state through JSON, merges them, deals
// the rest to a new number of ranks, and checks that every sample of the
// epoch is consumed exactly once and that the progress stays compact.
func checkResume(t *testing.T, n int64, before, after int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	cfg := sampler.Config{N: n, World: before, Shuffle: true, Seed: 9}
	plans, items, pads := deal(t, cfg, sampler.Progress{Epoch: 5})
	consumed := map[int64]int{}
	var states []sampler.RankState
	for r, pl := range plans {
		tr := pl.Tracker()
		k := rng.Int64N(pl.Len() + 1) // consumed in order
		for i := range k {
			tr.Consumed(i)
		}
		for range 3 { // and a few out of order (still in flight before them)
			if k+2 < pl.Len() {
				tr.Consumed(k + 1 + rng.Int64N(pl.Len()-k-1))
			}
		}
		st := tr.State()
		for i := range pl.Len() {
			if (i < st.Count || slices.Contains(st.Extra, i)) && !pads[r][i] {
				consumed[items[r][i]]++
			}
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var back sampler.RankState
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		states = append(states, back)
	}
	prog, err := sampler.Merge(n, states)
	if err != nil {
		t.Fatal(err)
	}
	if prog.Epoch != 5 {
		t.Fatalf("merged epoch %d, want 5", prog.Epoch)
	}
	// Only what some rank consumed beyond the slowest one stays listed.
	minC, bound := states[0].Count, 0
	for _, st := range states {
		minC = min(minC, st.Count)
	}
	for _, st := range states {
		bound += int(st.Count-minC) + len(st.Extra)
	}
	if len(prog.Done) > bound {
		t.Errorf("progress keeps %d done positions, more than the %d consumed past the slowest rank", len(prog.Done), bound)
	}
	cfg.World = after
	_, rest, restPads := deal(t, cfg, prog)
	all := consumed
	for r := range rest {
		for i, idx := range rest[r] {
			if !restPads[r][i] {
				all[idx]++
			}
		}
	}
	if int64(len(all)) != n {
		t.Fatalf("%d distinct samples over the epoch, want %d", len(all), n)
	}
	for idx, c := range all {
		if c != 1 {
			t.Fatalf("sample %d seen %d times over the interrupted epoch", idx, c)
		}
	}
}

func TestResumeInOrderMatchesAnUninterruptedRun(t *testing.T) {
	cfg := sampler.Config{N: 50, World: 1, Shuffle: true, Seed: 3}
	_, full, _ := deal(t, cfg, sampler.Progress{})
	plans, _, _ := deal(t, cfg, sampler.Progress{})
	tr := plans[0].Tracker()
	for i := range int64(20) {
		tr.Consumed(i)
	}
	prog, err := sampler.Merge(50, []sampler.RankState{tr.State()})
	if err != nil {
		t.Fatal(err)
	}
	if prog.Prefix != 20 || prog.Done != nil {
		t.Fatalf("progress %+v, want prefix 20", prog)
	}
	_, rest, _ := deal(t, cfg, prog)
	if got := append(slices.Clone(full[0][:20]), rest[0]...); !slices.Equal(got, full[0]) {
		t.Fatalf("resumed order %v, want %v", got, full[0])
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"size", func() error {
			_, err := sampler.NewPlan(sampler.Config{N: 0, World: 1}, sampler.Progress{})
			return err
		}, "dataset size"},
		{"world", func() error {
			_, err := sampler.NewPlan(sampler.Config{N: 5, World: 0}, sampler.Progress{})
			return err
		}, "world size"},
		{"rank", func() error {
			_, err := sampler.NewPlan(sampler.Config{N: 5, World: 2, Rank: 2}, sampler.Progress{})
			return err
		}, "rank must be in [0, 2)"},
		{"prefix", func() error {
			_, err := sampler.NewPlan(sampler.Config{N: 5, World: 1}, sampler.Progress{Prefix: 6})
			return err
		}, "prefix 6"},
		{"done", func() error {
			_, err := sampler.NewPlan(sampler.Config{N: 5, World: 1}, sampler.Progress{Prefix: 1, Done: []int64{3, 2}})
			return err
		}, "sorted"},
		{"merge count", func() error {
			_, err := sampler.Merge(5, []sampler.RankState{{World: 2}})
			return err
		}, "1 rank states for world size 2"},
		{"merge plans", func() error {
			_, err := sampler.Merge(5, []sampler.RankState{{World: 2}, {World: 2, Rank: 1, Base: sampler.Progress{Epoch: 1}}})
			return err
		}, "another plan"},
		{"merge ranks", func() error {
			_, err := sampler.Merge(5, []sampler.RankState{{World: 2}, {World: 2}})
			return err
		}, "repeated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func BenchmarkOrderAt(b *testing.B) {
	o := sampler.NewOrder(1_281_167, true, 1, 0)
	var p int64
	for b.Loop() {
		_ = o.At(p % 1_281_167)
		p++
	}
}

func TestItemInvertsAt(t *testing.T) {
	for _, tc := range []struct {
		n     int64
		world int
		drop  bool
		prog  sampler.Progress
	}{
		{1, 1, false, sampler.Progress{}}, {10, 3, false, sampler.Progress{Epoch: 1}}, {10, 3, true, sampler.Progress{}},
		{101, 4, false, sampler.Progress{Epoch: 2, Prefix: 17, Done: []int64{20, 33, 90}}}, {5, 8, false, sampler.Progress{}},
	} {
		for _, shuffle := range []bool{false, true} {
			cfg := sampler.Config{N: tc.n, World: tc.world, DropLast: tc.drop, Shuffle: shuffle, Seed: 4}
			plans, items, pads := deal(t, cfg, tc.prog)
			mine := make([]map[int64]bool, tc.world)
			for r, pl := range plans {
				mine[r] = map[int64]bool{}
				for i, idx := range items[r] {
					mine[r][idx] = true
					got, ok := pl.Item(idx)
					if !ok || (got != int64(i) && !pads[r][i]) {
						t.Fatalf("n=%d w=%d shuffle=%v rank %d: Item(%d) = %d, %v; want %d", tc.n, tc.world, shuffle, r, idx, got, ok, i)
					}
					if _, _, pad := pl.At(got); pad != pads[r][got] {
						t.Fatalf("Item returned a different copy of a padded index")
					}
				}
			}
			for r, pl := range plans {
				for idx := range tc.n {
					if _, ok := pl.Item(idx); ok != mine[r][idx] {
						t.Fatalf("n=%d rank %d: Item(%d) ok=%v, but the index is dealt to it: %v", tc.n, r, idx, ok, mine[r][idx])
					}
				}
			}
		}
	}
}
