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
)

// hangOp passes items through, except those whose id is a multiple of
// every: those wait for ctx (cooperative) or for unblock, ignoring ctx
// (stuck). It owns its input: what it does not return, it releases.
type hangOp struct {
	every   int64
	stuck   bool
	unblock chan struct{}
	hanging atomic.Int64 // calls inside a hang (not a WaitGroup: abandoned calls are unsynchronised by design)
	once    sync.Once
	// hangs > 0 makes only the first hangs calls that would hang do so.
	hangs  int64
	hangsN atomic.Int64
}

// newHangOp makes a hangOp whose stuck calls are let go when the test ends
// at the latest.
func newHangOp(t *testing.T, every int64, stuck bool) *hangOp {
	o := &hangOp{every: every, stuck: stuck, unblock: make(chan struct{})}
	t.Cleanup(o.release)
	return o
}

// release lets stuck calls return and waits until they have.
func (o *hangOp) release() {
	o.once.Do(func() { close(o.unblock) })
	for t0 := time.Now(); o.hanging.Load() > 0 && time.Since(t0) < deadline; {
		time.Sleep(time.Millisecond)
	}
}

func (o *hangOp) Process(ctx context.Context, in any) (any, error) {
	it := in.(*item)
	if it.id%o.every != 0 {
		return in, nil
	}
	if o.hangs > 0 && o.hangsN.Add(1) > o.hangs {
		return in, nil
	}
	if !o.stuck {
		<-ctx.Done()
		it.Release()
		return nil, ctx.Err()
	}
	o.hanging.Add(1)
	defer o.hanging.Add(-1)
	<-o.unblock
	return in, nil // late: the engine must release it
}

func TestTimeout(t *testing.T) {
	const n, every = 60, 5
	hung := int64(n / every)
	tests := []struct {
		name  string
		stuck bool
		order pipeline.Order
		auto  bool
	}{
		{"cooperative op fails its item", false, pipeline.OrderCompletion, false},
		{"cooperative op, ordered", false, pipeline.OrderInput, false},
		{"stuck op is abandoned", true, pipeline.OrderCompletion, false},
		{"stuck op is abandoned, ordered", true, pipeline.OrderInput, false},
		{"stuck op is abandoned, auto concurrency", true, pipeline.OrderInput, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &ledger{}
			op := newHangOp(t, every, tc.stuck)
			st := pipeline.StageConfig{
				Name: "hang", Kind: pipeline.KindPipe, Op: op, Concurrency: 2, Order: tc.order,
				Timeout: 30 * time.Millisecond, MaxFailures: -1,
			}
			if tc.auto {
				st.AutoConcurrency, st.MaxConcurrency, st.Concurrency = true, 4, 0
			}
			p := mustNew(t, pipeline.Config{
				Source: &trackedSource{n: n, l: l}, Stages: []pipeline.StageConfig{st},
				BufferSize: 2, NumThreads: 3, TuneInterval: 5 * time.Millisecond, MaxFailures: -1,
			})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			out, err := drain(t, p)
			if err != nil {
				t.Fatalf("drain: %v", err)
			}
			stats := p.Stats()
			p.Stop()
			op.release()
			goleak.VerifyNone(t)
			l.check(t, int64(len(out)))

			var ids []int64
			for _, v := range out {
				ids = append(ids, v.(*item).id)
			}
			var want []int64
			for i := range int64(n) {
				if i%every != 0 {
					want = append(want, i)
				}
			}
			if tc.order == pipeline.OrderCompletion {
				ids = sorted(ids)
			}
			if !equal(ids, want) {
				t.Fatalf("delivered %v, want %v", ids, want)
			}
			s := stats.Stages[0]
			if s.Failures != hung {
				t.Errorf("failures %d, want %d", s.Failures, hung)
			}
			wantAbandoned := int64(0)
			if tc.stuck {
				wantAbandoned = hung
			}
			if s.Abandoned != wantAbandoned {
				t.Errorf("abandoned %d, want %d", s.Abandoned, wantAbandoned)
			}
			if s.Active != 0 {
				t.Errorf("active %d after the epoch, want 0", s.Active)
			}
			wantMsg := "timed out after 30ms"
			if tc.stuck {
				wantMsg = "did not return when cancelled; the call was abandoned"
			}
			if len(stats.RecentErrors) == 0 || !strings.Contains(stats.RecentErrors[0], wantMsg) ||
				!strings.Contains(stats.RecentErrors[0], `stage "hang"`) || !strings.Contains(stats.RecentErrors[0], "item") {
				t.Errorf("recent errors %q, want them to name the stage, the item and %q", stats.RecentErrors, wantMsg)
			}
		})
	}
}

// Stop does not wait out a long timeout for a stuck call, and a failure
// limit counts timeouts like any other failure.
func TestTimeoutStopAndFailureLimit(t *testing.T) {
	t.Run("stop", func(t *testing.T) {
		op := newHangOp(t, 1, true)
		p := mustNew(t, pipeline.Config{
			Source:     &trackedSource{n: 10, l: &ledger{}},
			Stages:     []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op, Timeout: time.Minute, MaxFailures: -1}},
			BufferSize: 1, MaxFailures: -1,
		})
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Next(context.Background(), 50*time.Millisecond); !errors.Is(err, pipeline.ErrTimeout) {
			t.Fatalf("Next: %v, want ErrTimeout", err)
		}
		t0 := time.Now()
		p.Stop()
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("Stop took %v with a call stuck under a 1-minute timeout", d)
		}
		op.release()
		goleak.VerifyNone(t)
	})
	t.Run("failure limit", func(t *testing.T) {
		op := newHangOp(t, 1, true)
		_, _, err := runAllAfter(t, pipeline.Config{
			Source:     &trackedSource{n: 10, l: &ledger{}},
			Stages:     []pipeline.StageConfig{{Name: "hang", Kind: pipeline.KindPipe, Op: op, Timeout: 10 * time.Millisecond, MaxFailures: 1}},
			BufferSize: 1,
		}, op.release)
		fl, ok := errors.AsType[*pipeline.FailureLimitError](err)
		if !ok {
			t.Fatalf("err = %v, want a FailureLimitError", err)
		}
		if te, ok := errors.AsType[*pipeline.TimeoutError](fl.Last); !ok || !te.Abandoned {
			t.Errorf("last error %v, want an abandoned TimeoutError", fl.Last)
		}
	})
}

// runAllAfter is runAll with cleanup run after Stop and before the leak check.
func runAllAfter(t *testing.T, cfg pipeline.Config, cleanup func()) ([]any, pipeline.Stats, error) {
	t.Helper()
	p := mustNew(t, cfg)
	if err := p.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	out, err := drain(t, p)
	st := p.Stats()
	p.Stop()
	cleanup()
	goleak.VerifyNone(t)
	return out, st, err
}

func TestTimeoutConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		st    pipeline.StageConfig
		wants string
	}{
		{"negative", pipeline.StageConfig{Kind: pipeline.KindPipe, Op: pipeline.OpFunc(identity), Timeout: -time.Second}, "Timeout must be >= 0"},
		{"aggregate", pipeline.StageConfig{Kind: pipeline.KindAggregate, Size: 2, Timeout: time.Second}, "Timeout are for pipe stages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.New(pipeline.Config{Source: pipeline.Range(0, 1, 1), BufferSize: 1, Stages: []pipeline.StageConfig{tc.st}})
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.wants)
			}
		})
	}
}

// StopWithin gives up on an op that ignores ctx (no Timeout set) and
// reports it; the goroutines finish once the op returns.
func TestStopWithin(t *testing.T) {
	op := newHangOp(t, 1, true)
	p := mustNew(t, pipeline.Config{
		Source:     &trackedSource{n: 10, l: &ledger{}},
		Stages:     []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op, MaxFailures: -1}},
		BufferSize: 1, MaxFailures: -1,
	})
	if !p.StopWithin(0) {
		t.Fatal("StopWithin before Start: false")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	for op.hanging.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	if p.StopWithin(50 * time.Millisecond) {
		t.Fatal("StopWithin returned true with an op stuck")
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("StopWithin(50ms) took %v", d)
	}
	op.release()
	if !p.StopWithin(deadline) {
		t.Fatal("StopWithin after the op returned: false")
	}
	goleak.VerifyNone(t)
}
