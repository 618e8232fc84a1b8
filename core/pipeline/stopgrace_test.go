package pipeline_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

// stuckSource yields items 0, 1, ... and blocks, ignoring ctx, at item
// stuckAt of its first epoch until unblock is closed (a Python generator
// stuck in time.sleep).
type stuckSource struct {
	stuckAt int
	unblock chan struct{}
	opened  atomic.Int32
	hanging atomic.Int32
}

func (s *stuckSource) Open(context.Context) (pipeline.Iterator, error) {
	first := s.opened.Add(1) == 1
	return &stuckIter{s: s, first: first}, nil
}

type stuckIter struct {
	s     *stuckSource
	first bool
	i     int
}

func (it *stuckIter) Next(context.Context) (any, error) {
	if it.first && it.i == it.s.stuckAt {
		it.s.hanging.Add(1)
		defer it.s.hanging.Add(-1)
		<-it.s.unblock
	}
	if it.i >= 20 {
		return nil, io.EOF
	}
	it.i++
	return &item{id: int64(it.i - 1), l: &ledger{}}, nil
}

func (it *stuckIter) Close() error { return nil }

// TestStopGrace checks that Stop, Halt and Close give up on calls stuck
// in foreign code after Config.StopGrace, naming them; that a read then
// ends instead of hanging; that the next epoch starts and runs; and that
// the abandoned goroutines end once the calls return.
func TestStopGrace(t *testing.T) {
	const grace = 100 * time.Millisecond
	tests := []struct {
		name   string
		inOp   bool // stuck in a stage's op (else in the source's Next)
		stop   func(p *pipeline.Pipeline) error
		naming string
	}{
		{"Stop, op stuck", true, (*pipeline.Pipeline).Stop, `2 calls of stage "slow"`},
		{"Halt, op stuck", true, (*pipeline.Pipeline).Halt, `2 calls of stage "slow"`},
		{"Close, op stuck", true, (*pipeline.Pipeline).Close, `2 calls of stage "slow"`},
		{"Stop, source stuck", false, (*pipeline.Pipeline).Stop, "the source's next item"},
		{"Halt, source stuck", false, (*pipeline.Pipeline).Halt, "the source's next item"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := &stuckSource{stuckAt: -1, unblock: make(chan struct{})}
			var op *hangOp
			stage := pipeline.StageConfig{Name: "slow", Kind: pipeline.KindPipe, Op: pipeline.OpFunc(identity), Concurrency: 2}
			if tc.inOp {
				op = newHangOp(t, 1, true)
				op.hangs = 2
				stage.Op = op
			} else {
				src.stuckAt = 3
			}
			var once sync.Once
			unblock := func() {
				once.Do(func() { close(src.unblock) })
				if op != nil {
					op.release()
				}
			}
			t.Cleanup(unblock)
			p := mustNew(t, pipeline.Config{
				Source: src, Stages: []pipeline.StageConfig{stage},
				BufferSize: 1, MaxFailures: -1, StopGrace: grace,
			})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			for (op != nil && op.hanging.Load() < 2) || (op == nil && src.hanging.Load() == 0) {
				time.Sleep(time.Millisecond)
			}
			t0 := time.Now()
			err := tc.stop(p)
			if d := time.Since(t0); d < grace || d > grace+2*time.Second {
				t.Errorf("stop took %v with grace %v", d, grace)
			}
			var ae *pipeline.StopAbandonedError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.naming) {
				t.Fatalf("stop: %v; want a *StopAbandonedError naming %s", err, tc.naming)
			}
			// A read ends; it does not wait for the stuck calls.
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			for {
				v, err := p.Next(ctx, -1)
				if err == nil {
					countItems(v)
					v.(*item).Release()
					continue
				}
				if !errors.Is(err, pipeline.ErrNotStarted) {
					t.Fatalf("Next after the stop: %v; want ErrNotStarted", err)
				}
				break
			}
			// A second stop does not wait again: the grace was spent.
			t0 = time.Now()
			if err := p.Halt(); !errors.As(err, &ae) {
				t.Errorf("second Halt: %v", err)
			}
			if d := time.Since(t0); d > grace/2 {
				t.Errorf("second Halt waited %v", d)
			}
			if tc.name != "Close, op stuck" {
				// The next epoch runs while the old calls are still stuck.
				if err := p.Start(); err != nil {
					t.Fatal(err)
				}
				out, err := drain(t, p)
				if err != nil || len(out) != 20 {
					t.Fatalf("next epoch: %d items, %v; want 20", len(out), err)
				}
				for _, v := range out {
					v.(*item).Release()
				}
			}
			unblock()
			if err := p.Close(); err != nil {
				t.Errorf("Close after the calls returned: %v", err)
			}
			goleak.VerifyNone(t)
		})
	}
}

// TestStopFromAnotherGoroutine checks that a consumer blocked in Next
// while another goroutine stops the epoch gets the end, and never an item
// after it.
func TestStopFromAnotherGoroutine(t *testing.T) {
	for range 30 {
		p := mustNew(t, pipeline.Config{
			Source: &trackedSource{n: 100000, l: &ledger{}},
			Stages: []pipeline.StageConfig{{Kind: pipeline.KindPipe, Concurrency: 4,
				Op: pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
					time.Sleep(100 * time.Microsecond)
					return in, nil
				})}},
			BufferSize: 2, MaxFailures: -1, StopGrace: time.Second,
		})
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			time.Sleep(5 * time.Millisecond)
			_ = p.Halt()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		ended := false
		for {
			v, err := p.Next(ctx, 10*time.Millisecond)
			if errors.Is(err, pipeline.ErrTimeout) {
				continue
			}
			if err == nil {
				if ended {
					t.Fatal("Next returned an item after it had reported the end")
				}
				v.(*item).Release()
				continue
			}
			if !errors.Is(err, pipeline.ErrNotStarted) {
				t.Fatalf("Next: %v; want the end (ErrNotStarted)", err)
			}
			if ended {
				break
			}
			ended = true
			<-stopped // the stop has returned: nothing may come now either
		}
		cancel()
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	goleak.VerifyNone(t)
}
