package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadline bounds every wait in the tests, so that a bug fails a test
// instead of hanging the run.
const deadline = 10 * time.Second

// ledger counts what happens to tracked items, to prove that every item
// produced is delivered, released by the engine, or failed in an op, once.
type ledger struct {
	produced, released, double, failedInOp atomic.Int64
}

// item is a tracked value that owns "C memory": it must be released once.
type item struct {
	id  int64
	l   *ledger
	rel atomic.Bool
}

func (it *item) Release() {
	if it.rel.Swap(true) {
		it.l.double.Add(1)
		return
	}
	it.l.released.Add(1)
}

func (it *item) String() string { return fmt.Sprintf("item#%d", it.id) }

// check asserts produced == delivered + released + failed-in-op, with no
// item released twice.
func (l *ledger) check(t *testing.T, delivered int64) {
	t.Helper()
	p, r, f := l.produced.Load(), l.released.Load(), l.failedInOp.Load()
	if d := l.double.Load(); d != 0 {
		t.Errorf("%d items released twice", d)
	}
	if p != delivered+r+f {
		t.Errorf("produced %d != delivered %d + released %d + failed in op %d", p, delivered, r, f)
	}
}

// trackedSource yields n tracked items (ids 0..n-1) per epoch.
type trackedSource struct {
	n int64
	l *ledger
}

func (s *trackedSource) Open(context.Context) (pipeline.Iterator, error) {
	return &trackedIter{s: s}, nil
}

type trackedIter struct {
	s *trackedSource
	i int64
}

func (it *trackedIter) Next(context.Context) (any, error) {
	if it.i >= it.s.n {
		return nil, io.EOF
	}
	it.s.l.produced.Add(1)
	v := &item{id: it.i, l: it.s.l}
	it.i++
	return v, nil
}

func (it *trackedIter) Close() error { return nil }

// countItems counts the tracked items in a delivered value.
func countItems(v any) int64 {
	switch x := v.(type) {
	case value.List:
		var n int64
		for _, e := range x {
			n += countItems(e)
		}
		return n
	case *item:
		return 1
	}
	return 0
}

// funcSource is a Source built from a function called for each Next.
type funcSource func(ctx context.Context, i int) (any, error)

func (f funcSource) Open(context.Context) (pipeline.Iterator, error) {
	return &funcIter{f: f}, nil
}

type funcIter struct {
	f funcSource
	i int
}

func (it *funcIter) Next(ctx context.Context) (any, error) {
	v, err := it.f(ctx, it.i)
	it.i++
	return v, err
}

func (it *funcIter) Close() error { return nil }

func identity(_ context.Context, in any) (any, error) { return in, nil }

func mustNew(t *testing.T, cfg pipeline.Config) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// drain reads the epoch to its end. It returns the items and the error
// that ended it (nil for ErrEndOfData).
func drain(t *testing.T, p *pipeline.Pipeline) ([]any, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var out []any
	for {
		v, err := p.Next(ctx, -1)
		if errors.Is(err, pipeline.ErrEndOfData) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
}

// runAll builds, starts and drains a pipeline, then stops it and checks
// for leaked goroutines.
func runAll(t *testing.T, cfg pipeline.Config) ([]any, pipeline.Stats, error) {
	t.Helper()
	p := mustNew(t, cfg)
	if err := p.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	out, err := drain(t, p)
	st := p.Stats()
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	goleak.VerifyNone(t)
	return out, st, err
}

func int64s(xs []any) []int64 {
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i] = x.(int64)
	}
	return out
}

func seq(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

func sorted(xs []int64) []int64 {
	ys := append([]int64(nil), xs...)
	sort.Slice(ys, func(i, j int) bool { return ys[i] < ys[j] })
	return ys
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// gauge tracks how many ops run at once and the most it has seen. Its
// barrier makes the first `at` ops wait for each other, so that a limit of
// `at` is reached for sure and any excess would be seen.
type gauge struct {
	cur, max atomic.Int64
	at       int64
	full     chan struct{}
	once     sync.Once
}

func newGauge(at int) *gauge { return &gauge{at: int64(at), full: make(chan struct{})} }

func (g *gauge) op(ctx context.Context, in any) (any, error) {
	n := g.cur.Add(1)
	defer g.cur.Add(-1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			break
		}
	}
	if n >= g.at {
		g.once.Do(func() { close(g.full) })
	}
	select {
	case <-g.full:
	case <-time.After(deadline):
		return nil, errors.New("gauge: the limit was never reached")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Widen the window in which an op past the limit would be counted.
	time.Sleep(50 * time.Microsecond)
	return in, nil
}
