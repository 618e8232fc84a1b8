package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
)

// napOp takes d per item without using a CPU, so that its throughput
// scales with concurrency however loaded the machine running the test is.
// It records the most calls it saw at once.
type napOp struct {
	d        time.Duration
	mu       *sync.Mutex // if set, calls are serial: concurrency cannot help
	cur, max atomic.Int64
}

func (o *napOp) Process(ctx context.Context, in any) (any, error) {
	n := o.cur.Add(1)
	defer o.cur.Add(-1)
	for m := o.max.Load(); n > m && !o.max.CompareAndSwap(m, n); m = o.max.Load() {
	}
	if o.mu != nil {
		o.mu.Lock()
		defer o.mu.Unlock()
	}
	select {
	case <-time.After(o.d):
		return in, nil
	case <-ctx.Done():
		value.Release(in) // an op owns its input, also when it fails
		return nil, ctx.Err()
	}
}

// watchConcurrency samples each stage's Concurrency until stop is closed
// and returns the largest value seen per stage and summed over stages.
func watchConcurrency(p *pipeline.Pipeline, stop <-chan struct{}) (per []int, sum int) {
	for {
		st := p.Stats()
		if per == nil {
			per = make([]int, len(st.Stages))
		}
		s := 0
		for i, ss := range st.Stages {
			per[i] = max(per[i], ss.Concurrency)
			if ss.Auto {
				s += ss.Concurrency
			}
		}
		sum = max(sum, s)
		select {
		case <-stop:
			return per, sum
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func TestAutoConcurrency(t *testing.T) {
	auto := func(op pipeline.Op, start, maxC int) pipeline.StageConfig {
		return pipeline.StageConfig{Name: "auto", Kind: pipeline.KindPipe, Op: op, AutoConcurrency: true, Concurrency: start, MaxConcurrency: maxC, MaxFailures: -1}
	}
	// nap is the op's time per item; 3 ms is long enough that a loaded
	// machine's timer and scheduling delays do not make 8 workers look no
	// faster than 3.
	one := func(start int, serial bool, nap time.Duration) func() ([]pipeline.StageConfig, []*napOp) {
		return func() ([]pipeline.StageConfig, []*napOp) {
			op := &napOp{d: nap}
			if serial {
				// Long enough that the engine's own work per item, which
				// a second worker overlaps, is well under the 5% a probe
				// must gain (also under -race).
				op.d, op.mu = 3*time.Millisecond, new(sync.Mutex)
			}
			return []pipeline.StageConfig{auto(op, start, 8)}, []*napOp{op}
		}
	}
	tests := []struct {
		name   string
		items  int64
		stages func() ([]pipeline.StageConfig, []*napOp)
		budget int
		// bounds on the concurrency each stage ends at, and on the most
		// that each, and all auto stages together, ran at once
		minEnd, maxEnd, maxSeen []int
		maxSum                  int
		slowConsumer            time.Duration
	}{
		{
			name: "parallel op stays at its budget share", items: 2000, stages: one(0, false, 3*time.Millisecond),
			budget: 8, minEnd: []int{5}, maxEnd: []int{8}, maxSeen: []int{8}, maxSum: 8,
		},
		{
			name: "parallel op grows from 1 towards its ceiling", items: 2500, stages: one(1, false, 3*time.Millisecond),
			budget: 8, minEnd: []int{4}, maxEnd: []int{8}, maxSeen: []int{8}, maxSum: 8,
		},
		{
			name: "serial op does not grow where threads do not help", items: 400, stages: one(1, true, 0),
			budget: 8, minEnd: []int{1}, maxEnd: []int{2}, maxSeen: []int{3}, maxSum: 3,
		},
		{
			// Its workers idle most of the time: it sheds them.
			name: "a slow consumer holds the stage back", items: 600, stages: one(4, false, time.Millisecond),
			budget: 8, minEnd: []int{1}, maxEnd: []int{2}, maxSeen: []int{5}, maxSum: 5,
			slowConsumer: 2 * time.Millisecond,
		},
		{
			name:  "two auto stages share the CPU budget",
			items: 3000,
			stages: func() ([]pipeline.StageConfig, []*napOp) {
				a, b := &napOp{d: time.Millisecond}, &napOp{d: time.Millisecond}
				sa, sb := auto(a, 0, 8), auto(b, 0, 8)
				sa.Name, sb.Name = "a", "b"
				return []pipeline.StageConfig{sa, sb}, []*napOp{a, b}
			},
			budget: 4, minEnd: []int{1, 1}, maxEnd: []int{3, 3}, maxSeen: []int{3, 3}, maxSum: 4,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stages, ops := tc.stages()
			p := mustNew(t, pipeline.Config{
				Source: pipeline.Range(0, tc.items, 1), Stages: stages, BufferSize: 2,
				CPUBudget: tc.budget, TuneInterval: 10 * time.Millisecond,
			})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			type seen struct {
				per []int
				sum int
			}
			res := make(chan seen, 1)
			go func() { per, sum := watchConcurrency(p, stop); res <- seen{per, sum} }()
			var got []int64
			ctx, cancel := context.WithTimeout(context.Background(), 4*deadline)
			defer cancel()
			for {
				v, err := p.Next(ctx, -1)
				if errors.Is(err, pipeline.ErrEndOfData) {
					break
				}
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				got = append(got, v.(int64))
				if tc.slowConsumer > 0 {
					time.Sleep(tc.slowConsumer)
				}
			}
			close(stop)
			s := <-res
			st := p.Stats()
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
			if !equal(sorted(got), seq(int(tc.items))) {
				t.Fatalf("got %d items, not each of 0..%d once", len(got), tc.items-1)
			}
			for i, ss := range st.Stages {
				if !ss.Auto || ss.MaxConcurrency != 8 || ss.Tuning == "" {
					t.Errorf("stage %s: Auto=%v MaxConcurrency=%d Tuning=%q", ss.Name, ss.Auto, ss.MaxConcurrency, ss.Tuning)
				}
				if ss.Concurrency < tc.minEnd[i] || ss.Concurrency > tc.maxEnd[i] {
					t.Errorf("stage %s ended at concurrency %d, want %d..%d (%s)", ss.Name, ss.Concurrency, tc.minEnd[i], tc.maxEnd[i], ss.Tuning)
				}
				if s.per[i] > tc.maxSeen[i] {
					t.Errorf("stage %s reached concurrency %d, want <= %d (%s)", ss.Name, s.per[i], tc.maxSeen[i], ss.Tuning)
				}
				// The log explains the end state: each decision starts
				// where the last ended, within the ceiling, with a reason
				// and the window it measured.
				if len(ss.TuningLog) == 0 || ss.TuningLog[len(ss.TuningLog)-1].To != ss.Concurrency {
					t.Errorf("stage %s: tuning log %+v does not end at concurrency %d", ss.Name, ss.TuningLog, ss.Concurrency)
				}
				for j, d := range ss.TuningLog {
					if (j > 0 && d.From != ss.TuningLog[j-1].To) || d.To < 1 || d.To > 8 || d.Reason == "" || d.ItemsPerS <= 0 || d.Busy < 0 || d.Busy > 1 {
						t.Errorf("stage %s: tuning log entry %d inconsistent: %+v", ss.Name, j, ss.TuningLog)
						break
					}
				}
				// The gate lets no more ops run than the stage's ceiling.
				if m := ops[i].max.Load(); m > 8 {
					t.Errorf("stage %s: %d ops ran at once, ceiling 8", ss.Name, m)
				}
			}
			if s.sum > tc.maxSum {
				t.Errorf("auto stages ran %d workers at once, want <= %d", s.sum, tc.maxSum)
			}
		})
	}
}

// The gate must never let more ops run than the limit the tuner chose;
// with the tuner pinned at its start (a huge interval), exactly
// Concurrency ops run at once, in order when asked, across epochs.
func TestAutoConcurrencyGateHoldsLimitAcrossEpochs(t *testing.T) {
	for _, order := range []pipeline.Order{pipeline.OrderCompletion, pipeline.OrderInput} {
		t.Run(order.String(), func(t *testing.T) {
			g := newGauge(3)
			p := mustNew(t, pipeline.Config{
				Source: pipeline.Range(0, 300, 1),
				Stages: []pipeline.StageConfig{{
					Kind: pipeline.KindPipe, Op: pipeline.OpFunc(g.op), Order: order,
					AutoConcurrency: true, Concurrency: 3, MaxConcurrency: 6,
				}},
				BufferSize: 2, TuneInterval: time.Hour,
			})
			for epoch := range 2 {
				if err := p.Start(); err != nil {
					t.Fatal(err)
				}
				out, err := drain(t, p)
				if err != nil {
					t.Fatalf("epoch %d: %v", epoch, err)
				}
				got := int64s(out)
				if order == pipeline.OrderInput && !equal(got, seq(300)) {
					t.Fatalf("epoch %d: output out of order", epoch)
				}
				if !equal(sorted(got), seq(300)) {
					t.Fatalf("epoch %d: %d items, not each of 0..299 once", epoch, len(got))
				}
			}
			if m := g.max.Load(); m != 3 {
				t.Errorf("%d ops ran at once, want exactly the limit 3", m)
			}
			if c := p.Stats().Stages[0].Concurrency; c != 3 {
				t.Errorf("Stats concurrency %d, want 3", c)
			}
			p.Stop()
			goleak.VerifyNone(t)
		})
	}
}

// Stop while the tuner is probing and workers are parked: every goroutine
// returns and every item is accounted for.
func TestAutoConcurrencyStopMidTuning(t *testing.T) {
	l := &ledger{}
	op := &napOp{d: 200 * time.Microsecond}
	p := mustNew(t, pipeline.Config{
		Source: &trackedSource{n: 1 << 30, l: l},
		Stages: []pipeline.StageConfig{{
			Kind: pipeline.KindPipe, Op: op, Order: pipeline.OrderInput, AutoConcurrency: true, MaxConcurrency: 8, MaxFailures: -1,
		}},
		BufferSize: 4, TuneInterval: 5 * time.Millisecond,
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var delivered int64
	for range 300 {
		v, err := p.Next(context.Background(), deadline)
		if err != nil {
			t.Fatal(err)
		}
		delivered += countItems(v)
	}
	p.Stop()
	goleak.VerifyNone(t)
	l.check(t, delivered)
}

func TestAutoConcurrencyConfigErrors(t *testing.T) {
	op := pipeline.OpFunc(identity)
	tests := []struct {
		name  string
		cfg   pipeline.Config
		wants string
	}{
		{"negative budget", pipeline.Config{CPUBudget: -1}, "CPUBudget must be >= 0"},
		{"negative interval", pipeline.Config{TuneInterval: -time.Second}, "TuneInterval must be >= 0"},
		{"max without auto", pipeline.Config{Stages: []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op, MaxConcurrency: 4}}}, "MaxConcurrency is set (4) but AutoConcurrency is not"},
		{"start above max", pipeline.Config{Stages: []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op, AutoConcurrency: true, Concurrency: 5, MaxConcurrency: 4}}}, "must be <= MaxConcurrency (4)"},
		{"negative max", pipeline.Config{Stages: []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op, AutoConcurrency: true, MaxConcurrency: -2}}}, "MaxConcurrency must be >= 0"},
		{"auto aggregate", pipeline.Config{Stages: []pipeline.StageConfig{{Kind: pipeline.KindAggregate, Size: 2, AutoConcurrency: true}}}, "AutoConcurrency and Timeout are for pipe stages"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Source = pipeline.Range(0, 1, 1)
			tc.cfg.BufferSize = 1
			_, err := pipeline.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.wants)
			}
		})
	}
}

// An auto stage with no MaxConcurrency may go to twice the budget (only
// while every core is busy: autotune.go's room), and starts at its share.
func TestAutoConcurrencyDefaultMax(t *testing.T) {
	p := mustNew(t, pipeline.Config{
		Source: pipeline.Range(0, 10, 1),
		Stages: []pipeline.StageConfig{{
			Kind: pipeline.KindPipe, Op: pipeline.OpFunc(func(_ context.Context, v any) (any, error) { return v, nil }),
			AutoConcurrency: true,
		}},
		BufferSize: 2, CPUBudget: 3,
	})
	st := p.Stats().Stages[0]
	if st.MaxConcurrency != 6 || st.Concurrency != 3 {
		t.Errorf("MaxConcurrency %d, Concurrency %d; want 6 and 3", st.MaxConcurrency, st.Concurrency)
	}
}
