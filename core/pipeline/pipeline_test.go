package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
)

func TestOutputOrder(t *testing.T) {
	const n = 200
	for _, tc := range []struct {
		name        string
		order       pipeline.Order
		concurrency int
		failEvery   int64 // items i with i%failEvery == 3 fail; 0: none
	}{
		{"completion_c1", pipeline.OrderCompletion, 1, 0},
		{"completion_c4", pipeline.OrderCompletion, 4, 0},
		{"input_c1", pipeline.OrderInput, 1, 0},
		{"input_c4", pipeline.OrderInput, 4, 0},
		{"input_c16", pipeline.OrderInput, 16, 0},
		{"completion_c4_failures", pipeline.OrderCompletion, 4, 7},
		{"input_c4_failures", pipeline.OrderInput, 4, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jitter := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
				// Random delays make later items overtake earlier ones.
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				if tc.failEvery > 0 && in.(int64)%tc.failEvery == 3 {
					return nil, errors.New("unlucky")
				}
				return in, nil
			})
			out, _, err := runAll(t, pipeline.Config{
				Source:      pipeline.Range(0, n, 1),
				Stages:      []pipeline.StageConfig{{Name: "jitter", Op: jitter, Concurrency: tc.concurrency, Order: tc.order, MaxFailures: -1}},
				BufferSize:  4,
				MaxFailures: -1,
			})
			if err != nil {
				t.Fatal(err)
			}
			var want []int64
			for i := range int64(n) {
				if tc.failEvery == 0 || i%tc.failEvery != 3 {
					want = append(want, i)
				}
			}
			got := int64s(out)
			if tc.order == pipeline.OrderInput && !equal(got, want) {
				t.Errorf("ordered output is not the input order: %v", got)
			}
			if !equal(sorted(got), want) {
				t.Errorf("output is not a permutation of the input: %v", got)
			}
		})
	}
}

func TestConcurrencyLimit(t *testing.T) {
	for _, tc := range []struct {
		concurrency int
		order       pipeline.Order
	}{
		{1, pipeline.OrderCompletion}, {2, pipeline.OrderCompletion}, {4, pipeline.OrderCompletion}, {8, pipeline.OrderCompletion},
		{1, pipeline.OrderInput}, {4, pipeline.OrderInput}, {8, pipeline.OrderInput},
	} {
		t.Run(fmt.Sprintf("%s_c%d", tc.order, tc.concurrency), func(t *testing.T) {
			g := newGauge(tc.concurrency)
			out, _, err := runAll(t, pipeline.Config{
				Source:     pipeline.Range(0, int64(8*tc.concurrency), 1),
				Stages:     []pipeline.StageConfig{{Op: pipeline.OpFunc(g.op), Concurrency: tc.concurrency, Order: tc.order}},
				BufferSize: 2,
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 8*tc.concurrency {
				t.Errorf("got %d items, want %d", len(out), 8*tc.concurrency)
			}
			if m := g.max.Load(); m != int64(tc.concurrency) {
				t.Errorf("max concurrent ops = %d, want %d", m, tc.concurrency)
			}
		})
	}
}

func TestNumThreadsCap(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("threads_%d", threads), func(t *testing.T) {
			g := newGauge(threads) // shared by both stages
			op := pipeline.OpFunc(g.op)
			out, _, err := runAll(t, pipeline.Config{
				Source: pipeline.Range(0, 40, 1),
				Stages: []pipeline.StageConfig{
					{Name: "a", Op: op, Concurrency: 4},
					{Name: "b", Op: op, Concurrency: 4, Order: pipeline.OrderInput},
				},
				BufferSize: 2,
				NumThreads: threads,
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 40 {
				t.Errorf("got %d items, want 40", len(out))
			}
			if m := g.max.Load(); m != int64(threads) {
				t.Errorf("max concurrent ops across stages = %d, want %d", m, threads)
			}
		})
	}
}

func TestAggregate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n, size  int
		dropLast bool
		want     [][]int64
	}{
		{"partial_kept", 7, 3, false, [][]int64{{0, 1, 2}, {3, 4, 5}, {6}}},
		{"partial_dropped", 7, 3, true, [][]int64{{0, 1, 2}, {3, 4, 5}}},
		{"exact", 6, 3, false, [][]int64{{0, 1, 2}, {3, 4, 5}}},
		{"exact_drop_last", 6, 3, true, [][]int64{{0, 1, 2}, {3, 4, 5}}},
		{"size_1", 2, 1, false, [][]int64{{0}, {1}}},
		{"empty", 0, 3, false, nil},
		{"fewer_than_size_dropped", 2, 3, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, st, err := runAll(t, pipeline.Config{
				Source:     pipeline.Range(0, int64(tc.n), 1),
				Stages:     []pipeline.StageConfig{{Kind: pipeline.KindAggregate, Size: tc.size, DropLast: tc.dropLast}},
				BufferSize: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(tc.want) {
				t.Fatalf("got %d batches %v, want %v", len(out), out, tc.want)
			}
			for i, b := range out {
				l, ok := b.(value.List)
				if !ok {
					t.Fatalf("batch %d is %T, want value.List", i, b)
				}
				if got := int64s(l); !equal(got, tc.want[i]) {
					t.Errorf("batch %d = %v, want %v", i, got, tc.want[i])
				}
			}
			if s := st.Stages[0]; s.ItemsIn != int64(tc.n) || s.ItemsOut != int64(len(tc.want)) {
				t.Errorf("stats in/out = %d/%d, want %d/%d", s.ItemsIn, s.ItemsOut, tc.n, len(tc.want))
			}
		})
	}
}

func TestAggregateReleasesDroppedPartial(t *testing.T) {
	l := &ledger{}
	out, _, err := runAll(t, pipeline.Config{
		Source:     &trackedSource{n: 7, l: l},
		Stages:     []pipeline.StageConfig{{Kind: pipeline.KindAggregate, Size: 3, DropLast: true}},
		BufferSize: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	var delivered int64
	for _, v := range out {
		delivered += countItems(v)
	}
	if delivered != 6 || l.released.Load() != 1 {
		t.Errorf("delivered %d, released %d; want 6 and 1", delivered, l.released.Load())
	}
	l.check(t, delivered)
}

func TestDisaggregate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       []any
		want     []int64
		failures int64
	}{
		{"lists", []any{value.List{int64(0), int64(1)}, value.List{}, value.List{int64(2)}}, []int64{0, 1, 2}, 0},
		{"tuple_and_slice", []any{value.Tuple{int64(0)}, []any{int64(1), int64(2)}}, []int64{0, 1, 2}, 0},
		{"non_list_fails", []any{value.List{int64(0)}, "not a list", int64(7), value.List{int64(1)}}, []int64{0, 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, st, err := runAll(t, pipeline.Config{
				Source:      pipeline.Slice(tc.in),
				Stages:      []pipeline.StageConfig{{Name: "flat", Kind: pipeline.KindDisaggregate, MaxFailures: -1}},
				BufferSize:  2,
				MaxFailures: -1,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := int64s(out); !equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if st.Failures != tc.failures || st.Stages[0].Failures != tc.failures {
				t.Errorf("failures = %d (stage %d), want %d", st.Failures, st.Stages[0].Failures, tc.failures)
			}
			if tc.failures > 0 {
				msg := strings.Join(st.RecentErrors, "\n")
				if !strings.Contains(msg, `stage "flat" (disaggregate 0): item "not a list": disaggregate needs a list or tuple, got string`) {
					t.Errorf("recent errors do not name the item:\n%s", msg)
				}
			}
		})
	}
}

func TestBackPressure(t *testing.T) {
	slow := pipeline.OpFunc(identity)
	for _, tc := range []struct {
		name  string
		cfg   pipeline.Config
		bound int64 // items the pipeline may hold with nobody reading
	}{
		// source holds 1 + queue; each worker holds 1; sink holds buffer.
		{"no_stages", pipeline.Config{BufferSize: 3}, 1 + 3},
		{"pipe_c4", pipeline.Config{BufferSize: 3, QueueSize: 2, Stages: []pipeline.StageConfig{{Op: slow, Concurrency: 4}}}, 1 + 2 + 4 + 3},
		// Ordered: the reorder window holds 2*Concurrency.
		{"ordered_c4", pipeline.Config{BufferSize: 3, QueueSize: 2, Stages: []pipeline.StageConfig{{Op: slow, Concurrency: 4, Order: pipeline.OrderInput}}}, 1 + 2 + 2*4 + 3},
		{"two_stages_aggregate", pipeline.Config{BufferSize: 2, QueueSize: 1, Stages: []pipeline.StageConfig{
			{Op: slow, Concurrency: 2},
			{Kind: pipeline.KindAggregate, Size: 4},
		}}, 1 + 1 + 2 + 1 + 4*(1+2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &ledger{}
			cfg := tc.cfg
			cfg.Source = &trackedSource{n: 1 << 20, l: l}
			p := mustNew(t, cfg)
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait until the source stops producing. Proving that something
			// does not happen needs a quiet period; no channel says so.
			last, stable := int64(-1), 0
			for start := time.Now(); stable < 5 && time.Since(start) < deadline; {
				time.Sleep(10 * time.Millisecond)
				if n := l.produced.Load(); n == last {
					stable++
				} else {
					last, stable = n, 0
				}
			}
			t.Logf("produced %d, bound %d", last, tc.bound)
			if last > tc.bound {
				t.Errorf("produced %d items with nobody reading; bound %d", last, tc.bound)
			}
			if last <= 0 {
				t.Errorf("produced nothing")
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
			l.check(t, 0)
		})
	}
}

func TestStopMidStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stages func(op pipeline.Op) []pipeline.StageConfig
	}{
		{"completion", func(op pipeline.Op) []pipeline.StageConfig {
			return []pipeline.StageConfig{{Op: op, Concurrency: 4, MaxFailures: -1}}
		}},
		{"input_order", func(op pipeline.Op) []pipeline.StageConfig {
			return []pipeline.StageConfig{{Op: op, Concurrency: 4, Order: pipeline.OrderInput, MaxFailures: -1}}
		}},
		{"aggregate_disaggregate", func(op pipeline.Op) []pipeline.StageConfig {
			return []pipeline.StageConfig{
				{Op: op, Concurrency: 3, MaxFailures: -1},
				{Kind: pipeline.KindAggregate, Size: 3},
				{Kind: pipeline.KindDisaggregate},
				{Kind: pipeline.KindAggregate, Size: 2},
			}
		}},
		{"num_threads", func(op pipeline.Op) []pipeline.StageConfig {
			return []pipeline.StageConfig{
				{Op: op, Concurrency: 4, MaxFailures: -1},
				{Op: op, Concurrency: 4, Order: pipeline.OrderInput, MaxFailures: -1},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &ledger{}
			unblock := make(chan struct{})
			var inOp sync.WaitGroup
			inOp.Add(1)
			var once sync.Once
			// The op lets the first items through, then blocks until Stop
			// cancels it; a cancelled op fails and (as the op contract
			// allows) keeps its input: it is counted as failed in the op.
			// Every stage has more workers than items that pass, so some
			// op is sure to block.
			op := pipeline.OpFunc(func(ctx context.Context, in any) (any, error) {
				if in.(*item).id < 3 {
					return in, nil
				}
				once.Do(inOp.Done)
				select {
				case <-unblock:
					return in, nil
				case <-ctx.Done():
					l.failedInOp.Add(1)
					return nil, ctx.Err()
				}
			})
			p := mustNew(t, pipeline.Config{
				Source:     &trackedSource{n: 1000, l: l},
				Stages:     tc.stages(op),
				BufferSize: 2,
				NumThreads: map[bool]int{true: 3}[tc.name == "num_threads"],
			})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			inOp.Wait() // an op is blocked: items are in flight everywhere
			var delivered int64
			if v, err := p.Next(context.Background(), 0); err == nil {
				delivered += countItems(v)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
			close(unblock)
			if _, err := p.Next(context.Background(), 0); !errors.Is(err, pipeline.ErrNotStarted) {
				t.Errorf("Next after Stop = %v, want ErrNotStarted", err)
			}
			if st := p.Stats(); st.State != "stopped" || st.Failures != 0 {
				t.Errorf("state %q, failures %d; want stopped, 0 (cancelled ops are not failures)", st.State, st.Failures)
			}
			l.check(t, delivered)
		})
	}
}

func TestFailureLimits(t *testing.T) {
	boom := errors.New("boom")
	// failOn fails items whose value is in the set.
	failOn := func(bad ...int64) pipeline.Op {
		return pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
			for _, b := range bad {
				if in.(int64) == b {
					return nil, boom
				}
			}
			return in, nil
		})
	}
	for _, tc := range []struct {
		name         string
		stages       []pipeline.StageConfig
		maxFailures  int
		wantOut      int   // items delivered when the run is not fatal
		wantFailures int64 // when not fatal
		wantFatal    string
		limitStage   string
	}{
		{"stage_under_limit", []pipeline.StageConfig{{Name: "decode", Op: failOn(1, 2, 3), MaxFailures: 3}}, -1, 17, 3, "", ""},
		{"stage_over_limit", []pipeline.StageConfig{{Name: "decode", Op: failOn(1, 2, 3, 4), MaxFailures: 3}}, -1, 0, 0,
			`stage "decode" exceeded max_failures=3 (4 failures); last: stage "decode" (pipe 0): item 4: boom`, "decode"},
		{"stage_zero_tolerance", []pipeline.StageConfig{{Name: "decode", Op: failOn(5), MaxFailures: 0}}, -1, 0, 0,
			`stage "decode" exceeded max_failures=0 (1 failures); last: stage "decode" (pipe 0): item 5: boom`, "decode"},
		{"stage_unlimited", []pipeline.StageConfig{{Op: failOn(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), Concurrency: 3, MaxFailures: -1}}, -1, 10, 10, "", ""},
		{"pipeline_under_limit", []pipeline.StageConfig{
			{Name: "a", Op: failOn(1), MaxFailures: -1},
			{Name: "b", Op: failOn(2), MaxFailures: -1, Order: pipeline.OrderInput},
		}, 2, 18, 2, "", ""},
		{"pipeline_over_limit", []pipeline.StageConfig{
			{Name: "a", Op: failOn(1), MaxFailures: -1},
			{Name: "b", Op: failOn(2, 3), MaxFailures: -1, Order: pipeline.OrderInput},
		}, 2, 0, 0, `pipeline exceeded max_failures=2 (3 failures); last: stage "b" (pipe 1): item 3: boom`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, pipeline.Config{
				Source:      pipeline.Range(0, 20, 1),
				Stages:      tc.stages,
				BufferSize:  1,
				MaxFailures: tc.maxFailures,
			})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			out, err := drain(t, p)
			st := p.Stats()
			if tc.wantFatal == "" {
				if err != nil {
					t.Fatalf("unexpected fatal error: %v", err)
				}
				if len(out) != tc.wantOut || st.Failures != tc.wantFailures {
					t.Errorf("delivered %d, failures %d; want %d, %d", len(out), st.Failures, tc.wantOut, tc.wantFailures)
				}
				if len(st.RecentErrors) != int(tc.wantFailures) {
					t.Errorf("recent errors = %q, want %d", st.RecentErrors, tc.wantFailures)
				}
			} else {
				var fl *pipeline.FailureLimitError
				if !errors.As(err, &fl) {
					t.Fatalf("err = %v, want a FailureLimitError", err)
				}
				if err.Error() != tc.wantFatal {
					t.Errorf("err = %q\nwant  %q", err, tc.wantFatal)
				}
				if fl.Stage != tc.limitStage || !errors.Is(err, boom) {
					t.Errorf("Stage = %q (want %q), errors.Is(boom) = %v", fl.Stage, tc.limitStage, errors.Is(err, boom))
				}
				// The fatal error sticks until the next Start.
				if _, err2 := p.Next(context.Background(), 0); err2 != err {
					t.Errorf("second Next = %v, want the same error", err2)
				}
				if st.State != "failed" || st.Error != tc.wantFatal {
					t.Errorf("stats state %q error %q", st.State, st.Error)
				}
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
		})
	}
}

func TestFailuresReleaseItems(t *testing.T) {
	// Ops fail some items (keeping them, as the contract allows) and a
	// failure limit ends the run: every item is still accounted for.
	for _, order := range []pipeline.Order{pipeline.OrderCompletion, pipeline.OrderInput} {
		t.Run(order.String(), func(t *testing.T) {
			l := &ledger{}
			op := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
				if in.(*item).id%7 == 3 {
					l.failedInOp.Add(1)
					return nil, errors.New("bad item")
				}
				return in, nil
			})
			p := mustNew(t, pipeline.Config{
				Source:      &trackedSource{n: 500, l: l},
				Stages:      []pipeline.StageConfig{{Op: op, Concurrency: 3, Order: order, MaxFailures: 20}},
				BufferSize:  4,
				MaxFailures: -1,
			})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			out, err := drain(t, p)
			if _, ok := errors.AsType[*pipeline.FailureLimitError](err); !ok {
				t.Errorf("err = %v, want a FailureLimitError", err)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
			l.check(t, int64(len(out)))
		})
	}
}

func TestPanickingOp(t *testing.T) {
	for _, order := range []pipeline.Order{pipeline.OrderCompletion, pipeline.OrderInput} {
		t.Run(order.String(), func(t *testing.T) {
			op := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
				if in.(int64) == 3 {
					panic("kaboom")
				}
				return in, nil
			})
			out, st, err := runAll(t, pipeline.Config{
				Source:      pipeline.Range(0, 10, 1),
				Stages:      []pipeline.StageConfig{{Name: "fragile", Op: op, Concurrency: 2, Order: order, MaxFailures: -1}},
				BufferSize:  2,
				MaxFailures: -1,
			})
			if err != nil {
				t.Fatal(err)
			}
			want := []int64{0, 1, 2, 4, 5, 6, 7, 8, 9}
			if got := sorted(int64s(out)); !equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
			if len(st.RecentErrors) != 1 || !strings.Contains(st.RecentErrors[0], `stage "fragile" (pipe 0): item 3: panic: kaboom`) {
				t.Errorf("recent errors = %q", st.RecentErrors)
			}
		})
	}
}

func TestPanicErrorDetails(t *testing.T) {
	op := pipeline.OpFunc(func(context.Context, any) (any, error) { panic(io.ErrUnexpectedEOF) })
	_, _, err := runAll(t, pipeline.Config{
		Source:     pipeline.Slice([]any{"b.jpg"}),
		Stages:     []pipeline.StageConfig{{Name: "decode", Op: op, MaxFailures: 0}},
		BufferSize: 1,
	})
	ie, ok := errors.AsType[*pipeline.ItemError](err)
	if !ok {
		t.Fatalf("err = %v, want an ItemError inside", err)
	}
	pe, ok := errors.AsType[*pipeline.PanicError](err)
	if !ok {
		t.Fatalf("err = %v, want a PanicError inside", err)
	}
	if ie.Stage != "decode" || ie.Item != `"b.jpg"` {
		t.Errorf("ItemError names stage %q item %q", ie.Stage, ie.Item)
	}
	if !strings.Contains(pe.Stack, "TestPanicErrorDetails") {
		t.Errorf("stack does not show the op:\n%s", pe.Stack)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("errors.Is does not reach the panic value")
	}
}

func TestSourceErrors(t *testing.T) {
	boom := errors.New("disk on fire")
	for _, tc := range []struct {
		name     string
		src      pipeline.Source
		startErr string // Start fails
		nextErr  string // Next fails after some items
	}{
		{"next_error", funcSource(func(_ context.Context, i int) (any, error) {
			if i == 5 {
				return nil, boom
			}
			return int64(i), nil
		}), "", "source: disk on fire"},
		{"next_panic", funcSource(func(_ context.Context, i int) (any, error) {
			if i == 5 {
				panic("oops")
			}
			return int64(i), nil
		}), "", "source: panic: oops"},
		{"open_error", pipeline.Range(0, 1, 0), "source: range step must not be 0", ""},
		{"close_error", closeFails{boom}, "", "source: close: disk on fire"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, pipeline.Config{
				Source:     tc.src,
				Stages:     []pipeline.StageConfig{{Op: pipeline.OpFunc(identity), Concurrency: 2}},
				BufferSize: 2,
			})
			err := p.Start()
			if tc.startErr != "" {
				if err == nil || err.Error() != tc.startErr {
					t.Errorf("Start = %v, want %q", err, tc.startErr)
				}
				if _, err2 := p.Next(context.Background(), 0); err2 != err {
					t.Errorf("Next after failed Start = %v, want the same error", err2)
				}
				if st := p.Stats(); st.State != "failed" || st.Error != tc.startErr {
					t.Errorf("stats state %q error %q", st.State, st.Error)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				_, err := drain(t, p)
				if _, ok := errors.AsType[*pipeline.SourceError](err); !ok || err.Error() != tc.nextErr {
					t.Errorf("Next = %v, want SourceError %q", err, tc.nextErr)
				}
				if st := p.Stats(); st.State != "failed" || st.Error != tc.nextErr {
					t.Errorf("stats state %q error %q", st.State, st.Error)
				}
			}
			// A failed epoch has ended: the next one can start.
			if err := p.Start(); (err == nil) != (tc.startErr == "") {
				t.Errorf("Start after failure = %v", err)
			}
			if st := p.Stats(); st.Epoch != 2 {
				t.Errorf("epoch = %d, want 2", st.Epoch)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
		})
	}
}

type closeFails struct{ err error }

func (c closeFails) Open(context.Context) (pipeline.Iterator, error) { return c, nil }
func (c closeFails) Next(context.Context) (any, error)               { return nil, io.EOF }
func (c closeFails) Close() error                                    { return c.err }

func TestMultiEpoch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stages []pipeline.StageConfig
	}{
		{"pipe", []pipeline.StageConfig{{Op: pipeline.OpFunc(identity), Concurrency: 3, Order: pipeline.OrderInput}}},
		{"aggregate_disaggregate", []pipeline.StageConfig{{Kind: pipeline.KindAggregate, Size: 4}, {Kind: pipeline.KindDisaggregate}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, pipeline.Config{Source: pipeline.Range(0, 50, 1), Stages: tc.stages, BufferSize: 3})
			for epoch := 1; epoch <= 3; epoch++ {
				if err := p.Start(); err != nil {
					t.Fatalf("epoch %d: Start: %v", epoch, err)
				}
				if err := p.Start(); err == nil || !strings.Contains(err.Error(), "still running") {
					t.Errorf("epoch %d: second Start = %v, want an error", epoch, err)
				}
				out, err := drain(t, p)
				if err != nil {
					t.Fatalf("epoch %d: %v", epoch, err)
				}
				if got := int64s(out); !equal(got, seq(50)) {
					t.Errorf("epoch %d: got %v", epoch, got)
				}
				if st := p.Stats(); st.Epoch != epoch || st.State != "done" || st.Sink.Delivered != 50 {
					t.Errorf("epoch %d: stats epoch %d state %q delivered %d", epoch, st.Epoch, st.State, st.Sink.Delivered)
				}
			}
			// A stopped epoch can be followed by a new one too.
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := p.Start(); err != nil {
				t.Fatalf("Start after Stop: %v", err)
			}
			if out, err := drain(t, p); err != nil || len(out) != 50 {
				t.Errorf("after Stop: %d items, %v", len(out), err)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
		})
	}
}

func TestStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, p *pipeline.Pipeline)
	}{
		{"before_start", func(t *testing.T, p *pipeline.Pipeline) {
			if err := p.Stop(); err != nil {
				t.Error(err)
			}
			if st := p.Stats(); st.State != "built" {
				t.Errorf("state %q, want built", st.State)
			}
		}},
		{"twice", func(t *testing.T, p *pipeline.Pipeline) {
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := p.Stop(); err != nil {
					t.Error(err)
				}
			}
		}},
		{"concurrently_with_next", func(t *testing.T, p *pipeline.Pipeline) {
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					if err := p.Stop(); err != nil {
						t.Error(err)
					}
				})
				wg.Go(func() {
					for {
						v, err := p.Next(context.Background(), -1)
						if err != nil {
							if !errors.Is(err, pipeline.ErrNotStarted) && !errors.Is(err, pipeline.ErrEndOfData) {
								t.Errorf("Next: %v", err)
							}
							return
						}
						value.Release(v)
					}
				})
				wg.Go(func() { _ = p.Stats() })
			}
			wg.Wait()
		}},
		{"after_end", func(t *testing.T, p *pipeline.Pipeline) {
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := drain(t, p); err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(); err != nil {
				t.Error(err)
			}
			if st := p.Stats(); st.State != "done" {
				t.Errorf("state %q, want done", st.State)
			}
			if _, err := p.Next(context.Background(), 0); !errors.Is(err, pipeline.ErrEndOfData) {
				t.Errorf("Next = %v, want ErrEndOfData", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, pipeline.Config{
				Source:     pipeline.Range(0, 100, 1),
				Stages:     []pipeline.StageConfig{{Op: pipeline.OpFunc(identity), Concurrency: 2}},
				BufferSize: 2,
			})
			tc.run(t, p)
			if err := p.Stop(); err != nil {
				t.Error(err)
			}
			goleak.VerifyNone(t)
		})
	}
}

func TestNext(t *testing.T) {
	gate := make(chan struct{})
	gated := funcSource(func(ctx context.Context, i int) (any, error) {
		if i == 2 {
			return nil, io.EOF
		}
		select {
		case <-gate:
			return int64(i), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	p := mustNew(t, pipeline.Config{Source: gated, BufferSize: 1})
	bg := context.Background()
	steps := []struct {
		name    string
		do      func() (any, error)
		want    any
		wantErr error
	}{
		{"before_start", func() (any, error) { return p.Next(bg, -1) }, nil, pipeline.ErrNotStarted},
		{"start", func() (any, error) { return nil, p.Start() }, nil, nil},
		{"timeout", func() (any, error) { return p.Next(bg, 5*time.Millisecond) }, nil, pipeline.ErrTimeout},
		{"zero_timeout_polls", func() (any, error) { return p.Next(bg, 0) }, nil, pipeline.ErrTimeout},
		{"ctx_cancelled", func() (any, error) {
			ctx, cancel := context.WithCancel(bg)
			cancel()
			return p.Next(ctx, -1)
		}, nil, context.Canceled},
		{"item_after_timeout", func() (any, error) { gate <- struct{}{}; return p.Next(bg, -1) }, int64(0), nil},
		{"second_item", func() (any, error) { gate <- struct{}{}; return p.Next(bg, deadline) }, int64(1), nil},
		{"end", func() (any, error) { return p.Next(bg, deadline) }, nil, pipeline.ErrEndOfData},
		{"end_again", func() (any, error) { return p.Next(bg, 0) }, nil, pipeline.ErrEndOfData},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			got, err := s.do()
			if !errors.Is(err, s.wantErr) || got != s.want {
				t.Errorf("got %v, %v; want %v, %v", got, err, s.want, s.wantErr)
			}
		})
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t)
}

func TestStats(t *testing.T) {
	fail := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		if in.(int64)%10 == 0 {
			return nil, errors.New("multiple of ten")
		}
		return in, nil
	})
	p := mustNew(t, pipeline.Config{
		Source: pipeline.Range(0, 100, 1),
		Stages: []pipeline.StageConfig{
			{Name: "filter", Op: fail, Concurrency: 3, MaxFailures: -1},
			{Name: "batch", Kind: pipeline.KindAggregate, Size: 8},
			{Kind: pipeline.KindDisaggregate},
		},
		BufferSize:  5,
		QueueSize:   3,
		MaxFailures: -1,
	})
	if st := p.Stats(); st.State != "built" || len(st.Stages) != 3 || st.Stages[2].Name != "disaggregate_2" || st.Sink.Cap != 5 {
		t.Errorf("stats before start: %+v", st)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.State != "running" || st.Epoch != 1 {
		t.Errorf("state %q epoch %d, want running 1", st.State, st.Epoch)
	}
	out, err := drain(t, p)
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t)

	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"source out", st.Source.ItemsOut, 100},
		{"filter in", st.Stages[0].ItemsIn, 100},
		{"filter out", st.Stages[0].ItemsOut, 90},
		{"filter failures", st.Stages[0].Failures, 10},
		{"batch in", st.Stages[1].ItemsIn, 90},
		{"batch out", st.Stages[1].ItemsOut, 12}, // 11 full + 1 partial
		{"flat in", st.Stages[2].ItemsIn, 12},
		{"flat out", st.Stages[2].ItemsOut, 90},
		{"delivered", st.Sink.Delivered, int64(len(out))},
		{"failures", st.Failures, 10},
		{"active", st.Stages[0].Active, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if st.State != "done" || st.ElapsedNs <= 0 || st.Stages[0].BusyNs <= 0 || len(st.RecentErrors) != 10 {
		t.Errorf("state %q elapsed %d busy %d recent %d", st.State, st.ElapsedNs, st.Stages[0].BusyNs, len(st.RecentErrors))
	}
	if q := st.Stages[0]; q.QueueCap != 3 || q.QueueMeanOccupancy < 0 || q.QueueMeanOccupancy > 1 {
		t.Errorf("queue cap %d occupancy %v", q.QueueCap, q.QueueMeanOccupancy)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"state":"done"`, `"elapsed_ns":`, `"items_in":`, `"queue_mean_occupancy":`, `"recent_errors":[`, `"delivered":90`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
}

func TestRecentErrorsKeepsLast16(t *testing.T) {
	fail := pipeline.OpFunc(func(_ context.Context, in any) (any, error) { return nil, fmt.Errorf("e%d", in) })
	_, st, err := runAll(t, pipeline.Config{
		Source:      pipeline.Range(0, 40, 1),
		Stages:      []pipeline.StageConfig{{Op: fail, MaxFailures: -1}},
		BufferSize:  1,
		MaxFailures: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.RecentErrors) != 16 || !strings.HasSuffix(st.RecentErrors[15], ": e39") || !strings.HasSuffix(st.RecentErrors[0], ": e24") {
		t.Errorf("recent errors = %q", st.RecentErrors)
	}
}

func TestConfigValidation(t *testing.T) {
	op := pipeline.OpFunc(identity)
	src := pipeline.Range(0, 1, 1)
	for _, tc := range []struct {
		name string
		cfg  pipeline.Config
		want string
	}{
		{"no_source", pipeline.Config{BufferSize: 1}, "Config.Source is nil"},
		{"buffer_size", pipeline.Config{Source: src}, "Config.BufferSize must be >= 1, got 0"},
		{"queue_size", pipeline.Config{Source: src, BufferSize: 1, QueueSize: -1}, "Config.QueueSize must be >= 0"},
		{"max_failures", pipeline.Config{Source: src, BufferSize: 1, MaxFailures: -2}, "Config.MaxFailures must be >= -1"},
		{"num_threads", pipeline.Config{Source: src, BufferSize: 1, NumThreads: -1}, "Config.NumThreads must be >= 0"},
		{"nil_op", pipeline.Config{Source: src, BufferSize: 1, Stages: []pipeline.StageConfig{{Op: op}, {Name: "decode"}}}, `stage 1 ("decode", pipe): Op is nil`},
		{"concurrency", pipeline.Config{Source: src, BufferSize: 1, Stages: []pipeline.StageConfig{{Op: op, Concurrency: -1}}}, `stage 0 ("", pipe): Concurrency must be >= 1`},
		{"order", pipeline.Config{Source: src, BufferSize: 1, Stages: []pipeline.StageConfig{{Op: op, Order: 7}}}, "Order must be"},
		{"aggregate_size", pipeline.Config{Source: src, BufferSize: 1, Stages: []pipeline.StageConfig{{Name: "batch", Kind: pipeline.KindAggregate}}}, `stage 0 ("batch", aggregate): Size must be >= 1, got 0`},
		{"kind", pipeline.Config{Source: src, BufferSize: 1, Stages: []pipeline.StageConfig{{Kind: 9}}}, "Kind must be"},
		{"stage_max_failures", pipeline.Config{Source: src, BufferSize: 1, Stages: []pipeline.StageConfig{{Op: op, MaxFailures: -5}}}, "MaxFailures must be >= -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pipeline.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, %v; want an error containing %q", p, err, tc.want)
			}
		})
	}
}

func TestStageNames(t *testing.T) {
	op := pipeline.OpFunc(identity)
	p := mustNew(t, pipeline.Config{
		Source: pipeline.Range(0, 1, 1),
		Stages: []pipeline.StageConfig{
			{Name: "decode", Op: op},
			{Op: op},
			{Name: "decode", Op: op},
			{Kind: pipeline.KindAggregate, Size: 2},
			{Name: "pipe_1", Op: op},
		},
		BufferSize: 1,
	})
	var got []string
	for _, s := range p.Stats().Stages {
		got = append(got, s.Name)
	}
	want := "decode pipe_1 decode_2 aggregate_3 pipe_1_4"
	if strings.Join(got, " ") != want {
		t.Errorf("names = %q, want %q", got, want)
	}
}

func TestErrorMessages(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"item", &pipeline.ItemError{Stage: "decode", Item: `"b.jpg"`, Err: boom}, `stage "decode": item "b.jpg": boom`},
		{"limit_stage", &pipeline.FailureLimitError{Stage: "decode", Failures: 4, Limit: 3}, `stage "decode" exceeded max_failures=3 (4 failures)`},
		{"limit_pipeline", &pipeline.FailureLimitError{Failures: 4, Limit: 3, Last: &pipeline.ItemError{Stage: "x", Item: "1", Err: boom}}, `pipeline exceeded max_failures=3 (4 failures); last: stage "x": item 1: boom`},
		{"source", &pipeline.SourceError{Err: boom}, "source: boom"},
		{"panic", &pipeline.PanicError{Value: "oops"}, "panic: oops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if errors.Unwrap(&pipeline.FailureLimitError{}) != nil {
		t.Error("FailureLimitError without Last unwraps to a non-nil error")
	}
}

func TestRangeAndSlice(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  pipeline.Source
		want []int64
	}{
		{"range", pipeline.Range(2, 7, 2), []int64{2, 4, 6}},
		{"range_down", pipeline.Range(3, 0, -1), []int64{3, 2, 1}},
		{"range_empty", pipeline.Range(3, 3, 1), nil},
		{"slice", pipeline.Slice([]any{int64(5), int64(6)}), []int64{5, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runAll(t, pipeline.Config{Source: tc.src, BufferSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			if got := int64s(out); !equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A source's ItemFailure fails that item only, counted against MaxFailures;
// any other error from the source stays fatal.
func TestSourceItemFailures(t *testing.T) {
	src := funcSource(func(_ context.Context, i int) (any, error) {
		switch {
		case i >= 10:
			return nil, io.EOF
		case i%4 == 1:
			return nil, &pipeline.ItemFailure{Item: fmt.Sprintf("file-%d.jpg", i), Err: errors.New("no such file")}
		}
		return int64(i), nil
	})
	cases := []struct {
		name     string
		max      int
		wantErr  string
		wantOuts []int64
	}{
		{"unlimited", -1, "", []int64{0, 2, 3, 4, 6, 7, 8}},
		{"limit 3", 3, "", []int64{0, 2, 3, 4, 6, 7, 8}},
		{"limit 2", 2, `stage "source": item file-9.jpg: no such file`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, st, err := runAll(t, pipeline.Config{
				Source:      src,
				Stages:      []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: pipeline.OpFunc(identity)}},
				BufferSize:  2,
				MaxFailures: c.max,
			})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := int64s(out); !slices.Equal(got, c.wantOuts) {
				t.Errorf("items %v, want %v", got, c.wantOuts)
			}
			if st.Source.Failures != 3 || st.Failures != 3 {
				t.Errorf("failures: source %d, total %d; want 3, 3", st.Source.Failures, st.Failures)
			}
			if len(st.RecentErrors) != 3 || st.RecentErrors[0] != `stage "source": item file-1.jpg: no such file` {
				t.Errorf("recent errors %q", st.RecentErrors)
			}
		})
	}
}

// ioOp counts how many of its calls run at once.
type ioOp struct {
	io       bool
	cur, max atomic.Int64
}

func (o *ioOp) Process(ctx context.Context, in any) (any, error) {
	n := o.cur.Add(1)
	for m := o.max.Load(); n > m && !o.max.CompareAndSwap(m, n); m = o.max.Load() {
	}
	time.Sleep(10 * time.Millisecond)
	o.cur.Add(-1)
	return in, nil
}

func (o *ioOp) WaitsOnIO() bool { return o.io }

// The NumThreads cap bounds CPU ops, not ops that wait on I/O.
func TestIOBoundOpsSkipTheThreadCap(t *testing.T) {
	for _, io := range []bool{false, true} {
		op := &ioOp{io: io}
		out, _, err := runAll(t, pipeline.Config{
			Source:     pipeline.Range(0, 64, 1),
			Stages:     []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op, Concurrency: 16}},
			BufferSize: 64, NumThreads: 2,
		})
		if err != nil || len(out) != 64 {
			t.Fatalf("io=%v: %d items, %v", io, len(out), err)
		}
		if m := op.max.Load(); io && m <= 2 || !io && m > 2 {
			t.Errorf("io=%v: %d calls at once under NumThreads 2", io, m)
		}
	}
}
