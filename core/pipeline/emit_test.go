package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

// countStream yields in*10, in*10+1, … (n items), sleeping a little
// before each, and fails instead of yielding item failAt (-1: never).
type countStream struct {
	in, i, n, failAt int64
	released         *atomic.Int64
}

func (s *countStream) Next(context.Context) (any, bool, error) {
	if s.i >= s.n {
		return nil, false, nil
	}
	time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
	if s.i == s.failAt {
		return nil, false, errors.New("stream broke")
	}
	v := s.in*10 + s.i
	s.i++
	return v, true, nil
}

func (s *countStream) Release() { s.released.Add(1) }

func TestSkipAndEmit(t *testing.T) {
	const n = 60
	var released atomic.Int64
	// Each op maps input i to its outputs; want(i) lists them in order.
	// Inputs with i%5 == 4 fail their stream after one item where a case
	// says so.
	cases := []struct {
		name     string
		op       func(i int64) any
		want     func(i int64) []int64
		failures int64
	}{
		{"skip_odd", func(i int64) any {
			if i%2 == 1 {
				return pipeline.Skip
			}
			return i
		}, func(i int64) []int64 {
			if i%2 == 1 {
				return nil
			}
			return []int64{i}
		}, 0},
		{"items_0_to_2", func(i int64) any {
			vs := make([]any, i%3)
			for k := range vs {
				vs[k] = i*10 + int64(k)
			}
			return pipeline.Items(vs...)
		}, func(i int64) []int64 {
			var out []int64
			for k := range i % 3 {
				out = append(out, i*10+k)
			}
			return out
		}, 0},
		{"stream_0_to_3", func(i int64) any {
			return &countStream{in: i, n: i % 4, failAt: -1, released: &released}
		}, func(i int64) []int64 {
			var out []int64
			for k := range i % 4 {
				out = append(out, i*10+k)
			}
			return out
		}, 0},
		{"stream_fails_midway", func(i int64) any {
			fail := int64(-1)
			if i%5 == 4 {
				fail = 1
			}
			return &countStream{in: i, n: 3, failAt: fail, released: &released}
		}, func(i int64) []int64 {
			if i%5 == 4 {
				return []int64{i * 10}
			}
			return []int64{i * 10, i*10 + 1, i*10 + 2}
		}, n / 5},
	}
	for _, tc := range cases {
		for _, order := range []pipeline.Order{pipeline.OrderCompletion, pipeline.OrderInput} {
			for _, conc := range []int{1, 4} {
				for _, threads := range []int{0, 1} {
					name := tc.name + map[pipeline.Order]string{pipeline.OrderCompletion: "/completion", pipeline.OrderInput: "/input"}[order] +
						map[int]string{1: "_c1", 4: "_c4"}[conc] + map[int]string{0: "", 1: "_threads1"}[threads]
					t.Run(name, func(t *testing.T) {
						released.Store(0)
						op := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
							time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
							return tc.op(in.(int64)), nil
						})
						// Two stages under one thread token: a stage blocked
						// sending its stream's items must not hold the token
						// the next stage needs.
						out, st, err := runAll(t, pipeline.Config{
							Source: pipeline.Range(0, n, 1),
							Stages: []pipeline.StageConfig{
								{Name: "emit", Op: op, Concurrency: conc, Order: order, MaxFailures: -1},
								{Name: "id", Op: pipeline.OpFunc(identity), Concurrency: 2, Order: order, MaxFailures: -1},
							},
							BufferSize: 1, QueueSize: 1, MaxFailures: -1, NumThreads: threads,
						})
						if err != nil {
							t.Fatal(err)
						}
						var want []int64
						for i := range int64(n) {
							want = append(want, tc.want(i)...)
						}
						got := int64s(out)
						if order == pipeline.OrderInput && !equal(got, want) {
							t.Errorf("got %v\nwant %v", got, want)
						}
						if !equal(sorted(got), sorted(want)) {
							t.Errorf("got %v, not a permutation of %v", got, want)
						}
						if s := st.Stages[0]; s.ItemsOut != int64(len(want)) || s.ItemsIn != n || s.Failures != tc.failures {
							t.Errorf("emit stage in %d out %d failures %d; want %d, %d, %d", s.ItemsIn, s.ItemsOut, s.Failures, n, len(want), tc.failures)
						}
						if tc.name[:6] == "stream" && released.Load() != n {
							t.Errorf("%d of %d streams released", released.Load(), n)
						}
					})
				}
			}
		}
	}
}

// A stream's items go downstream as they are pulled, not when it ends.
func TestStreamItemsFlowBeforeTheStreamEnds(t *testing.T) {
	for _, order := range []pipeline.Order{pipeline.OrderCompletion, pipeline.OrderInput} {
		gate := make(chan struct{})
		var released atomic.Int64
		op := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
			return &gatedStream{gate: gate, released: &released}, nil
		})
		p := mustNew(t, pipeline.Config{
			Source:     pipeline.Range(0, 1, 1),
			Stages:     []pipeline.StageConfig{{Op: op, Order: order}},
			BufferSize: 4,
		})
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		if v, err := p.Next(ctx, -1); err != nil || v != int64(1) {
			t.Fatalf("order %v: first item %v, %v", order, v, err)
		}
		close(gate)
		if v, err := p.Next(ctx, -1); err != nil || v != int64(2) {
			t.Fatalf("order %v: second item %v, %v", order, v, err)
		}
		if _, err := p.Next(ctx, -1); !errors.Is(err, pipeline.ErrEndOfData) {
			t.Fatalf("order %v: end %v", order, err)
		}
		cancel()
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t)
		if released.Load() != 1 {
			t.Errorf("stream released %d times", released.Load())
		}
	}
}

// gatedStream yields 1, then 2 once gate is closed.
type gatedStream struct {
	gate     chan struct{}
	i        int64
	released *atomic.Int64
}

func (s *gatedStream) Next(ctx context.Context) (any, bool, error) {
	s.i++
	switch s.i {
	case 1:
		return int64(1), true, nil
	case 2:
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		return int64(2), true, nil
	}
	return nil, false, nil
}

func (s *gatedStream) Release() { s.released.Add(1) }

// Stopping mid-stream releases every item: those pulled and not yet
// delivered, those the stream still holds, and the stream itself.
func TestStopMidStreamReleasesStreams(t *testing.T) {
	for _, order := range []pipeline.Order{pipeline.OrderCompletion, pipeline.OrderInput} {
		l := &ledger{}
		op := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
			it := in.(*item)
			vs := []any{it}
			for k := range 3 {
				l.produced.Add(1)
				vs = append(vs, &item{id: it.id*10 + int64(k), l: l})
			}
			return pipeline.Items(vs...), nil
		})
		p := mustNew(t, pipeline.Config{
			Source:     &trackedSource{n: 1000, l: l},
			Stages:     []pipeline.StageConfig{{Op: op, Concurrency: 4, Order: order}},
			BufferSize: 2, QueueSize: 1,
		})
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		var delivered int64
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		for range 5 {
			v, err := p.Next(ctx, -1)
			if err != nil {
				t.Fatal(err)
			}
			delivered += countItems(v)
		}
		cancel()
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t)
		l.check(t, delivered)
	}
}

// A panic in a stream's Next fails that input like a panic in the op.
func TestPanickingStream(t *testing.T) {
	op := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		return &panicStream{}, nil
	})
	_, st, err := runAll(t, pipeline.Config{
		Source:      pipeline.Range(0, 3, 1),
		Stages:      []pipeline.StageConfig{{Name: "p", Op: op, MaxFailures: -1}},
		BufferSize:  1,
		MaxFailures: -1,
	})
	if err != nil || st.Stages[0].Failures != 3 {
		t.Fatalf("err %v, failures %d; want nil, 3", err, st.Stages[0].Failures)
	}
	if len(st.RecentErrors) == 0 || !strings.Contains(st.RecentErrors[0], "boom") {
		t.Errorf("recent errors %q", st.RecentErrors)
	}
	_, _, err = runAll(t, pipeline.Config{
		Source:     pipeline.Range(0, 3, 1),
		Stages:     []pipeline.StageConfig{{Name: "p", Op: op, Order: pipeline.OrderInput, MaxFailures: 0}},
		BufferSize: 1,
	})
	var fl *pipeline.FailureLimitError
	if !errors.As(err, &fl) {
		t.Fatalf("ordered, no failures allowed: err %v", err)
	}
}

type panicStream struct{}

func (panicStream) Next(context.Context) (any, bool, error) { panic("boom") }
func (panicStream) Release()                                {}
