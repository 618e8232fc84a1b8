package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

// sleepOp sleeps slow for items where isSlow(item), else returns at once.
func sleepOp(slow time.Duration, isSlow func(int64) bool) pipeline.Op {
	return pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		if isSlow(in.(int64)) {
			time.Sleep(slow)
		}
		return in, nil
	})
}

// timedOp sleeps slow for items where isSlow(item) and records how long
// each call took by its own clock, so that the engine's percentiles are
// compared with what happened, not with what a loaded machine's sleeps
// were asked for.
type timedOp struct {
	slow   time.Duration
	isSlow func(int64) bool
	mu     sync.Mutex
	took   []time.Duration
}

func (o *timedOp) Process(_ context.Context, in any) (any, error) {
	t0 := time.Now()
	if o.isSlow(in.(int64)) {
		time.Sleep(o.slow)
	}
	d := time.Since(t0)
	o.mu.Lock()
	o.took = append(o.took, d)
	o.mu.Unlock()
	return in, nil
}

// quantile is the nearest-rank q-quantile of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func TestLatencyPercentiles(t *testing.T) {
	const d = 5 * time.Millisecond
	always := func(int64) bool { return true }
	tenth := func(i int64) bool { return i%10 == 9 }
	for _, c := range []struct {
		name   string
		n      int64
		isSlow func(int64) bool
	}{
		{"fixed", 40, always},
		{"90% fast 10% slow", 100, tenth},
		{"zero items", 0, always},
	} {
		t.Run(c.name, func(t *testing.T) {
			op := &timedOp{slow: d, isSlow: c.isSlow}
			_, st, err := runAll(t, pipeline.Config{
				Source:    pipeline.Range(0, c.n, 1),
				Stages:    []pipeline.StageConfig{{Name: "op", Op: op, Concurrency: 2}},
				QueueSize: 4, BufferSize: 4,
			})
			if err != nil {
				t.Fatal(err)
			}
			s := st.Stages[0]
			for _, q := range []struct {
				name string
				got  int64
				q    float64
			}{{"p50", s.LatencyP50Ns, 0.5}, {"p99", s.LatencyP99Ns, 0.99}} {
				// A histogram bucket spans 1/8 of its power of two; the
				// engine's clock also covers its own call overhead.
				want := quantile(op.took, q.q)
				tol := want/8 + 200*time.Microsecond
				if diff := time.Duration(q.got) - want; diff < -tol || diff > tol {
					t.Errorf("%s = %v, calls measured %v (tolerance %v)", q.name, time.Duration(q.got), want, tol)
				}
			}
			if s.LatencyP50Ns > s.LatencyP90Ns || s.LatencyP90Ns > s.LatencyP99Ns {
				t.Errorf("percentiles out of order: %d %d %d", s.LatencyP50Ns, s.LatencyP90Ns, s.LatencyP99Ns)
			}
			if s.BusyFraction < 0 || s.BusyFraction > 1 {
				t.Errorf("busy fraction %v out of [0, 1]", s.BusyFraction)
			}
			if c.n == 0 && (s.ItemsPerS != 0 || s.BusyFraction != 0) {
				t.Errorf("zero items: items/s %v busy %v", s.ItemsPerS, s.BusyFraction)
			}
			if c.n > 0 && s.ItemsPerS <= 0 {
				t.Errorf("items/s = %v", s.ItemsPerS)
			}
		})
	}
}

func TestBottleneck(t *testing.T) {
	const d = 2 * time.Millisecond
	const n = 60
	slowSource := funcSource(func(_ context.Context, i int) (any, error) {
		if i >= n {
			return nil, io.EOF
		}
		time.Sleep(d)
		return int64(i), nil
	})
	id := pipeline.OpFunc(identity)
	slow := sleepOp(d, func(int64) bool { return true })
	for _, c := range []struct {
		name     string
		src      pipeline.Source
		stages   []pipeline.StageConfig
		nextWait time.Duration // the consumer's time per item
		want     string
	}{
		{"slow consumer", pipeline.Range(0, n, 1), []pipeline.StageConfig{{Name: "a", Op: id}}, d, "consumer"},
		{"slow middle stage", pipeline.Range(0, n, 1), []pipeline.StageConfig{{Name: "a", Op: id}, {Name: "slow", Op: slow}, {Name: "b", Op: id}}, 0, "slow"},
		{"slow source", slowSource, []pipeline.StageConfig{{Name: "a", Op: id}, {Name: "b", Op: id}}, 0, "source"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := mustNew(t, pipeline.Config{Source: c.src, Stages: c.stages, QueueSize: 4, BufferSize: 4})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			for {
				if _, err := p.Next(ctx, -1); err != nil {
					if err != pipeline.ErrEndOfData {
						t.Fatal(err)
					}
					break
				}
				time.Sleep(c.nextWait)
			}
			st := p.Stats()
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
			r := st.Bottleneck()
			if r.Stage != c.want || r.Reason == "" || r.Advice == "" {
				b, _ := json.MarshalIndent(st, "", " ")
				t.Errorf("bottleneck %+v, want stage %q; stats %s", r, c.want, b)
			}
			b, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"bottleneck":{"stage":"`+c.want+`"`) {
				t.Errorf("JSON lacks the bottleneck: %s", b)
			}
		})
	}
}

// The report from occupancies alone: short queues that hold items a
// quarter of the time already show where items wait.
func TestBottleneckFromOccupancies(t *testing.T) {
	type stage struct {
		kind string
		out  float64 // the stage's output queue occupancy
	}
	pipe := func(out float64) stage { return stage{"pipe", out} }
	stats := func(src float64, stages ...stage) pipeline.Stats {
		s := pipeline.Stats{Source: pipeline.StageStats{Name: "source", QueueMeanOccupancy: src}, Sink: pipeline.SinkStats{Delivered: 10}}
		for i, st := range stages {
			s.Stages = append(s.Stages, pipeline.StageStats{Name: fmt.Sprintf("s%d", i), Kind: st.kind, Concurrency: 4, QueueMeanOccupancy: st.out})
		}
		return s
	}
	agg := stage{"aggregate", 0}
	for _, c := range []struct {
		name string
		s    pipeline.Stats
		want string
	}{
		{"a full queue before a stage", stats(0.9, pipe(0.1), pipe(0)), "s0"},
		{"a backlog before a stage (the demo: load behind a sampler)", stats(0.41, pipe(0.33), agg, pipe(0)), "s0"},
		{"an aggregate's busy-looking input is not a backlog", stats(0.1, pipe(0.33), agg), "source"},
		{"the largest backlog wins", stats(0.3, pipe(0.45), pipe(0.05)), "s1"},
		{"every queue nearly empty: the source", stats(0.1, pipe(0.05), pipe(0)), "source"},
	} {
		if got := c.s.Bottleneck().Stage; got != c.want {
			t.Errorf("%s: bottleneck %q, want %q (%+v)", c.name, got, c.want, c.s.Bottleneck())
		}
	}
}
