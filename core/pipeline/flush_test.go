package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
)

// groupOp keeps items until it holds n, then passes them on as one list;
// Flush passes on what is left (how depends on flush).
type groupOp struct {
	n       int
	held    value.List
	flush   string // "list", "skip", "stream", "error", "panic"
	flushes atomic.Int32
}

func (o *groupOp) Process(_ context.Context, in any) (any, error) {
	o.held = append(o.held, in)
	if len(o.held) < o.n {
		return pipeline.Skip, nil
	}
	out := o.held
	o.held = nil
	return out, nil
}

func (o *groupOp) Flush(context.Context) (any, error) {
	o.flushes.Add(1)
	held := o.held
	o.held = nil
	switch o.flush {
	case "skip":
		return pipeline.Skip, nil
	case "stream":
		vs := make([]any, len(held))
		copy(vs, held)
		return pipeline.Items(vs...), nil
	case "error":
		return nil, errors.New("flush broke")
	case "panic":
		panic("flush panicked")
	}
	if len(held) == 0 {
		return pipeline.Skip, nil
	}
	return held, nil
}

// shape renders an epoch's output: lists as [a b], other items as themselves.
func shape(out []any) string {
	parts := make([]string, len(out))
	for i, v := range out {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, " ")
}

func TestFlusher(t *testing.T) {
	for _, tc := range []struct {
		name     string
		items    int
		flush    string
		order    pipeline.Order
		limit    int
		want     string
		wantErr  string
		failures int64
	}{
		{name: "partial", items: 8, flush: "list", want: "[0 1 2] [3 4 5] [6 7]"},
		{name: "partial/input order", items: 8, flush: "list", order: pipeline.OrderInput, want: "[0 1 2] [3 4 5] [6 7]"},
		{name: "nothing held", items: 6, flush: "list", want: "[0 1 2] [3 4 5]"},
		{name: "empty input", items: 0, flush: "list", want: ""},
		{name: "skip", items: 8, flush: "skip", want: "[0 1 2] [3 4 5]"},
		{name: "stream", items: 8, flush: "stream", want: "[0 1 2] [3 4 5] 6 7"},
		{name: "error counted", items: 8, flush: "error", limit: -1, want: "[0 1 2] [3 4 5]", failures: 1},
		{name: "error fatal", items: 8, flush: "error", limit: 0, want: "[0 1 2] [3 4 5]", wantErr: "flush broke", failures: 1},
		{name: "panic fatal", items: 8, flush: "panic", limit: 0, want: "[0 1 2] [3 4 5]", wantErr: "flush panicked", failures: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := &groupOp{n: 3, flush: tc.flush}
			out, st, err := runAll(t, pipeline.Config{
				Source:      pipeline.Range(0, int64(tc.items), 1),
				Stages:      []pipeline.StageConfig{{Name: "agg", Kind: pipeline.KindPipe, Op: op, Order: tc.order, MaxFailures: tc.limit}},
				BufferSize:  2,
				MaxFailures: -1,
			})
			if got := shape(out); got != tc.want {
				t.Errorf("out %q, want %q", got, tc.want)
			}
			if tc.wantErr == "" && err != nil {
				t.Errorf("err %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "agg")) {
				t.Errorf("err %v, want one naming the stage and %q", err, tc.wantErr)
			}
			if n := op.flushes.Load(); n != 1 {
				t.Errorf("Flush called %d times, want 1", n)
			}
			if got := st.Stages[0].Failures; got != tc.failures {
				t.Errorf("failures %d, want %d", got, tc.failures)
			}
		})
	}
}

// Each epoch's end flushes once; a stopped epoch does not flush.
func TestFlusherEpochs(t *testing.T) {
	op := &groupOp{n: 4, flush: "list"}
	p := mustNew(t, pipeline.Config{
		Source:     pipeline.Range(0, 6, 1),
		Stages:     []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op}},
		BufferSize: 1, MaxFailures: -1,
	})
	for epoch := 1; epoch <= 2; epoch++ {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		out, err := drain(t, p)
		if got := shape(out); err != nil || got != "[0 1 2 3] [4 5]" {
			t.Fatalf("epoch %d: %q, %v", epoch, got, err)
		}
		if n := op.flushes.Load(); n != int32(epoch) {
			t.Fatalf("epoch %d: %d flushes", epoch, n)
		}
	}
	// A stage that never sees its input end (the epoch is stopped while the
	// source still has items) is not flushed.
	block := make(chan struct{})
	op2 := &groupOp{n: 4, flush: "list"}
	p2 := mustNew(t, pipeline.Config{
		Source: funcSource(func(ctx context.Context, i int) (any, error) {
			if i < 2 {
				return int64(i), nil
			}
			select {
			case <-block:
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		}),
		Stages:     []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op2}},
		BufferSize: 1, MaxFailures: -1,
	})
	if err := p2.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p2.Stop(); err != nil {
		t.Fatal(err)
	}
	close(block)
	if n := op2.flushes.Load(); n != 0 {
		t.Fatalf("a stopped epoch flushed %d times", n)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestFlusherNeedsOneWorker(t *testing.T) {
	for _, sc := range []pipeline.StageConfig{
		{Kind: pipeline.KindPipe, Op: &groupOp{n: 2}, Concurrency: 2},
		{Kind: pipeline.KindPipe, Op: &groupOp{n: 2}, AutoConcurrency: true, MaxConcurrency: 2},
		{Kind: pipeline.KindPipe, Op: &groupOp{n: 2}, Timeout: 1e9},
	} {
		_, err := pipeline.New(pipeline.Config{Source: pipeline.Range(0, 1, 1), Stages: []pipeline.StageConfig{sc}, BufferSize: 1})
		if err == nil || !strings.Contains(err.Error(), "needs one worker") {
			t.Errorf("%+v: err %v", sc, err)
		}
	}
}
