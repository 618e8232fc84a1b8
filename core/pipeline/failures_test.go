package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
)

var errDisk = errors.New("disk on fire")

// failingAt is an op that fails the items whose id is in bad (the ids of
// tracked items, or int64 values).
func failingAt(l *ledger, bad ...int64) pipeline.Op {
	set := map[int64]bool{}
	for _, b := range bad {
		set[b] = true
	}
	return pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		id, _ := in.(int64)
		if it, ok := in.(*item); ok {
			id = it.id
		}
		if set[id] {
			if it, ok := in.(*item); ok {
				l.failedInOp.Add(1)
				it.rel.Store(true) // the op keeps it (drops it): not the engine's
			}
			return nil, fmt.Errorf("item %d: %w", id, errBoom)
		}
		return in, nil
	})
}

var errBoom = errors.New("boom")

func ids(t *testing.T, out []any) []int64 {
	t.Helper()
	var got []int64
	for _, v := range out {
		switch x := v.(type) {
		case *item:
			got = append(got, x.id)
		case value.List:
			got = append(got, ids(t, x)...)
		default:
			t.Fatalf("unexpected item %T", v)
		}
	}
	return got
}

// A fatal error keeps what was produced: the items before it reach Next,
// then Next returns the error (and again on every call), and every other
// item is released exactly once.
func TestFailureDeliversWhatWasProduced(t *testing.T) {
	id := pipeline.OpFunc(identity)
	for _, tc := range []struct {
		name   string
		fail   int64 // the source fails instead of yielding this id; -1: no source failure
		stages []pipeline.StageConfig
		want   []int64 // exact; nil: check wantAtLeast
		// wantAtLeast: an ordered stage may also pass results that
		// completed behind the failing item before the limit was hit.
		wantAtLeast []int64
		stage       string // the FailureLimitError's stage; "" for a SourceError
		unordered   bool   // completion order: compare sorted
	}{
		{name: "source_no_stages", fail: 3, want: []int64{0, 1, 2}},
		{name: "source_pipe", fail: 3, stages: []pipeline.StageConfig{{Op: id, Concurrency: 3, MaxFailures: -1}}, want: []int64{0, 1, 2}, unordered: true},
		{name: "source_pipe_input_order", fail: 3, stages: []pipeline.StageConfig{{Op: id, Concurrency: 3, Order: pipeline.OrderInput, MaxFailures: -1}}, want: []int64{0, 1, 2}},
		{name: "source_aggregate", fail: 3, stages: []pipeline.StageConfig{{Kind: pipeline.KindAggregate, Size: 2, MaxFailures: -1}}, want: []int64{0, 1, 2}},
		{name: "stage_limit_completion", fail: -1, stage: "decode", want: []int64{0, 1, 2, 3, 4},
			stages: []pipeline.StageConfig{{Name: "decode", Concurrency: 1, OwnLimit: true}}},
		{name: "stage_limit_input_order", fail: -1, stage: "decode", wantAtLeast: []int64{0, 1, 2, 3, 4},
			stages: []pipeline.StageConfig{{Name: "decode", Concurrency: 4, Order: pipeline.OrderInput, OwnLimit: true}}},
		{name: "stage_limit_then_downstream", fail: -1, stage: "decode", want: []int64{0, 1, 2, 3, 4},
			stages: []pipeline.StageConfig{
				{Name: "pre", Op: id, Concurrency: 3, Order: pipeline.OrderInput, MaxFailures: -1},
				{Name: "decode", Concurrency: 1, OwnLimit: true},
				{Name: "post", Op: id, Concurrency: 2, Order: pipeline.OrderInput, MaxFailures: -1},
				{Name: "batch", Kind: pipeline.KindAggregate, Size: 3, MaxFailures: -1},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &ledger{}
			stages := append([]pipeline.StageConfig(nil), tc.stages...)
			for i := range stages {
				if stages[i].Name == "decode" {
					stages[i].Op = failingAt(l, 5)
				}
			}
			src := funcSource(func(_ context.Context, i int) (any, error) {
				if int64(i) == tc.fail {
					return nil, errDisk
				}
				if i >= 40 {
					return nil, errors.New("too far") // never reached: the failure comes first
				}
				l.produced.Add(1)
				return &item{id: int64(i), l: l}, nil
			})
			p := mustNew(t, pipeline.Config{Source: src, Stages: stages, BufferSize: 2, MaxFailures: -1})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			out, err := drain(t, p)
			got := ids(t, out)
			if tc.unordered {
				got = sorted(got)
			}
			switch {
			case tc.want != nil && !equal(got, tc.want):
				t.Errorf("delivered %v, want %v", got, tc.want)
			case tc.want == nil && (len(got) < len(tc.wantAtLeast) || !equal(got[:len(tc.wantAtLeast)], tc.wantAtLeast) || !equal(got, sorted(got))):
				t.Errorf("delivered %v, want %v first, in order", got, tc.wantAtLeast)
			}
			if tc.stage == "" {
				if se, ok := errors.AsType[*pipeline.SourceError](err); !ok || !errors.Is(err, errDisk) {
					t.Fatalf("err = %v (%T), want a SourceError of errDisk", err, se)
				}
			} else if fl, ok := errors.AsType[*pipeline.FailureLimitError](err); !ok || fl.Stage != tc.stage || !errors.Is(err, errBoom) {
				t.Fatalf("err = %v, want stage %q's FailureLimitError", err, tc.stage)
			}
			if _, err2 := p.Next(context.Background(), 0); err2 != err {
				t.Errorf("Next after the end = %v, want the same error", err2)
			}
			if p.Err() != err || len(p.Errors()) < 1 || p.Errors()[0] != err {
				t.Errorf("Err() = %v, Errors() = %v; want %v first", p.Err(), p.Errors(), err)
			}
			if st := p.Stats(); st.State != "failed" || st.Error != err.Error() {
				t.Errorf("stats: state %q, error %q", st.State, st.Error)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			if _, err2 := p.Next(context.Background(), 0); err2 != err {
				t.Errorf("Next after Stop = %v, want the failure", err2)
			}
			l.check(t, int64(len(got)))
			goleak.VerifyNone(t)
		})
	}
}

// Stop while the stages downstream of a failure still drain: everything
// stops at once and nothing leaks.
func TestStopWhileDraining(t *testing.T) {
	l := &ledger{}
	release := make(chan struct{})
	slow := pipeline.OpFunc(func(ctx context.Context, in any) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return in, nil
	})
	p := mustNew(t, pipeline.Config{
		Source: &trackedSource{n: 50, l: l},
		Stages: []pipeline.StageConfig{
			{Name: "decode", Op: failingAt(l, 2), Concurrency: 1, OwnLimit: true},
			{Name: "slow", Op: slow, Concurrency: 2, MaxFailures: -1},
		},
		BufferSize: 1, MaxFailures: -1,
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for p.Err() == nil && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if p.Err() == nil {
		_ = p.Stop()
		t.Fatal("the stage never failed")
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if _, err := p.Next(context.Background(), 0); err != p.Err() {
		t.Errorf("Next after Stop = %v, want %v", err, p.Err())
	}
	l.check(t, 0)
	goleak.VerifyNone(t)
}

// Halt stops the epoch but leaves the prefetched items for Next; then Next
// says the epoch was stopped, Stop releases what is left, and Start begins
// the next epoch.
func TestHaltKeepsTheSink(t *testing.T) {
	for _, read := range []int{0, 2, 5} {
		t.Run(fmt.Sprint("read_", read), func(t *testing.T) {
			l := &ledger{}
			p := mustNew(t, pipeline.Config{
				Source:     &trackedSource{n: 100, l: l},
				Stages:     []pipeline.StageConfig{{Op: pipeline.OpFunc(identity), Concurrency: 2, MaxFailures: -1}},
				BufferSize: 5, MaxFailures: -1,
			})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			for start := time.Now(); p.Stats().Sink.Len < 5; {
				if time.Since(start) > deadline {
					t.Fatal("the sink never filled")
				}
				time.Sleep(time.Millisecond)
			}
			p.Halt()
			var got []any
			for range read {
				v, err := p.Next(context.Background(), 0)
				if err != nil {
					t.Fatalf("Next after Halt: %v", err)
				}
				got = append(got, v)
			}
			if read == 5 {
				if _, err := p.Next(context.Background(), -1); !errors.Is(err, pipeline.ErrNotStarted) {
					t.Errorf("Next after the sink = %v, want ErrNotStarted", err)
				}
			}
			if ids := ids(t, got); len(ids) != read {
				t.Errorf("got %v", ids)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			for _, v := range got {
				value.Release(v)
			}
			l.check(t, 0)
			if err := p.Start(); err != nil {
				t.Fatalf("Start after Halt: %v", err)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t)
		})
	}
}

// Which limit holds a stage (limits.go), by count and by rate.
func TestFailureLimitRules(t *testing.T) {
	every := func(k int64) pipeline.Op { // fails one item in k
		return pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
			if in.(int64)%k == k-1 {
				return nil, errBoom
			}
			return in, nil
		})
	}
	first := func(n int64) pipeline.Op { // fails items 0..n-1
		return pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
			if in.(int64) < n {
				return nil, errBoom
			}
			return in, nil
		})
	}
	id := pipeline.OpFunc(identity)
	for _, tc := range []struct {
		name     string
		items    int64
		stages   []pipeline.StageConfig
		max      int
		rate     pipeline.Rate
		wantErr  string // "" = the epoch ends normally
		wantOut  int    // when it ends normally
		minCalls int    // with a rate error: at least the probation
	}{
		{name: "own_count_replaces_pipeline", items: 20, max: 0,
			stages:  []pipeline.StageConfig{{Name: "a", Op: every(5), MaxFailures: 4, OwnLimit: true}},
			wantOut: 16},
		{name: "own_count_exceeded", items: 20, max: -1,
			stages:  []pipeline.StageConfig{{Name: "a", Op: every(5), MaxFailures: 2, OwnLimit: true}},
			wantErr: `stage "a" exceeded max_failures=2 (3 failures); last: stage "a" (pipe 0): item 14: boom`},
		{name: "own_unlimited_replaces_pipeline", items: 20, max: 0,
			stages:  []pipeline.StageConfig{{Name: "a", Op: every(5), MaxFailures: -1, OwnLimit: true}},
			wantOut: 16},
		{name: "inherits_pipeline", items: 20, max: 2,
			stages:  []pipeline.StageConfig{{Name: "a", Op: every(5), MaxFailures: -1}},
			wantErr: `pipeline exceeded max_failures=2 (3 failures); last: stage "a" (pipe 0): item 14: boom`},
		// An own-limit stage's failures count in the pipeline's total: the
		// next stage without a limit of its own is over the pipeline's at its
		// next call, success or not.
		{name: "other_stage_over_pipeline_total", items: 20, max: 0,
			stages: []pipeline.StageConfig{
				{Name: "a", Op: first(1), MaxFailures: -1, OwnLimit: true},
				{Name: "b", Op: id, MaxFailures: -1},
			},
			wantErr: `pipeline exceeded max_failures=0 (1 failures); last: stage "a" (pipe 0): item 0: boom`},
		{name: "rate_under", items: 300,
			stages:  []pipeline.StageConfig{{Name: "a", Op: every(5), MaxFailureRate: pipeline.Rate{Num: 1, Den: 4}}},
			wantOut: 240},
		{name: "rate_equal_is_not_over", items: 300,
			stages:  []pipeline.StageConfig{{Name: "a", Op: every(5), MaxFailureRate: pipeline.Rate{Num: 1, Den: 5}}},
			wantOut: 240},
		{name: "rate_over", items: 300,
			stages:   []pipeline.StageConfig{{Name: "a", Op: every(5), MaxFailureRate: pipeline.Rate{Num: 1, Den: 10}}},
			wantErr:  `stage "a" exceeded max_failures=1/10`,
			minCalls: pipeline.RateProbation},
		// 50 failures in 60 calls: over any rate, but within the probation.
		{name: "rate_probation", items: 60,
			stages:  []pipeline.StageConfig{{Name: "a", Op: first(50), MaxFailureRate: pipeline.Rate{Num: 1, Den: 100}}},
			wantOut: 10},
		// Crossed by a call that succeeds: 99 failures of 99 calls, then the
		// 100th call ends the probation.
		{name: "rate_crossed_on_success", items: 150,
			stages:   []pipeline.StageConfig{{Name: "a", Op: first(99), MaxFailureRate: pipeline.Rate{Num: 1, Den: 2}}},
			wantErr:  `stage "a" exceeded max_failures=1/2 (99 failures in 100 calls`,
			minCalls: pipeline.RateProbation},
		{name: "pipeline_rate_over", items: 300, rate: pipeline.Rate{Num: 1, Den: 10},
			stages: []pipeline.StageConfig{
				{Name: "a", Op: every(5), MaxFailures: -1},
				{Name: "b", Op: id, Concurrency: 2, Order: pipeline.OrderInput, MaxFailures: -1},
			},
			wantErr:  `pipeline exceeded max_failures=1/10`,
			minCalls: pipeline.RateProbation},
		// Every stage's calls and failures count: 60 of a's 300 calls, and
		// all of the disaggregate's (an int is not a list): 55% > 1/2.
		{name: "pipeline_rate_counts_every_stage", items: 300, rate: pipeline.Rate{Num: 1, Den: 2},
			stages: []pipeline.StageConfig{
				{Name: "a", Op: every(5), MaxFailures: -1},
				{Name: "b", Kind: pipeline.KindDisaggregate, MaxFailures: -1},
			},
			wantErr:  "pipeline exceeded max_failures=1/2",
			minCalls: pipeline.RateProbation},
		{name: "pipeline_rate_under", items: 300, rate: pipeline.Rate{Num: 1, Den: 4},
			stages:  []pipeline.StageConfig{{Name: "a", Op: every(5), MaxFailures: -1}},
			wantOut: 240},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runAll(t, pipeline.Config{
				Source: pipeline.Range(0, tc.items, 1), Stages: tc.stages,
				BufferSize: 4, MaxFailures: tc.max, MaxFailureRate: tc.rate,
			})
			if tc.wantErr == "" {
				if err != nil || len(out) != tc.wantOut {
					t.Fatalf("got %d items, err %v; want %d, nil", len(out), err, tc.wantOut)
				}
				return
			}
			fl, ok := errors.AsType[*pipeline.FailureLimitError](err)
			if !ok {
				t.Fatalf("err = %v, want a FailureLimitError", err)
			}
			if tc.minCalls == 0 && err.Error() != tc.wantErr {
				t.Errorf("err = %q\nwant  %q", err, tc.wantErr)
			}
			if tc.minCalls > 0 {
				if len(err.Error()) < len(tc.wantErr) || err.Error()[:len(tc.wantErr)] != tc.wantErr {
					t.Errorf("err = %q, want it to start with %q", err, tc.wantErr)
				}
				if !fl.Rate.IsSet() || fl.Calls < tc.minCalls {
					t.Errorf("Rate %v, Calls %d; want a rate over >= %d calls", fl.Rate, fl.Calls, tc.minCalls)
				}
			}
		})
	}
}

func TestFailureRateValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  pipeline.Config
		want string
	}{
		{"pipeline_over_one", pipeline.Config{Source: pipeline.Range(0, 1, 1), BufferSize: 1, MaxFailureRate: pipeline.Rate{Num: 3, Den: 2}},
			"pipeline: Config.MaxFailureRate must be in (0, 1], got 3/2"},
		{"stage_zero", pipeline.Config{Source: pipeline.Range(0, 1, 1), BufferSize: 1,
			Stages: []pipeline.StageConfig{{Name: "a", Op: pipeline.OpFunc(identity), MaxFailureRate: pipeline.Rate{Num: 0, Den: 5}}}},
			`pipeline: stage 0 ("a", pipe): MaxFailureRate must be in (0, 1], got 0/5`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pipeline.New(tc.cfg); err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// keptErr is an error holding a host resource (ErrorReleaser).
type keptErr struct{ released *atomic.Int64 }

func (e keptErr) Error() string { return "kept" }
func (e keptErr) ReleaseError() { e.released.Add(1) }

// The engine releases item errors it will not report, and keeps the fatal
// one until the next Start discards the epoch.
func TestErrorReleaser(t *testing.T) {
	var released atomic.Int64
	var failing atomic.Bool
	failing.Store(true)
	op := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		if failing.Load() && in.(int64)%2 == 1 {
			return nil, keptErr{&released}
		}
		return in, nil
	})
	p := mustNew(t, pipeline.Config{
		Source:     pipeline.Range(0, 20, 1),
		Stages:     []pipeline.StageConfig{{Name: "a", Op: op, MaxFailures: 3, OwnLimit: true}},
		BufferSize: 2, MaxFailures: -1,
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	_, err := drain(t, p)
	if _, ok := errors.AsType[keptErr](err); !ok {
		t.Fatalf("err = %v, want the kept error inside", err)
	}
	if n := released.Load(); n != 3 {
		t.Errorf("released %d before the next Start, want 3 (the non-fatal ones)", n)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	failing.Store(false)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if n := released.Load(); n != 4 {
		t.Errorf("released %d after the next Start, want 4", n)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	// Close releases what the last epoch keeps: its fatal error.
	failing.Store(true)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(t, p); err == nil {
		t.Fatal("the third epoch did not fail")
	}
	p.Close()
	if n := released.Load(); n != 8 {
		t.Errorf("released %d after Close, want 8", n)
	}
	goleak.VerifyNone(t)
}
