package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
)

// sealed is what sinkHook makes of an item: it owns the item.
type sealed struct{ v any }

func (s *sealed) Release() { value.Release(s.v) }

// sinkHook is a Config.SinkEncode that seals items and fails those whose
// first tracked item's id is in fail (releasing them, as the hook must).
type sinkHook struct {
	fail          func(id int64) bool // nil: fail none
	calls, failed atomic.Int64
}

func (h *sinkHook) encode(v any) (any, error) {
	h.calls.Add(1)
	if h.fail != nil && h.fail(firstID(v)) {
		h.failed.Add(1)
		value.Release(v)
		return nil, errors.New("cannot encode")
	}
	return &sealed{v: v}, nil
}

func firstID(v any) int64 {
	switch x := v.(type) {
	case *item:
		return x.id
	case value.List:
		return firstID(x[0])
	}
	return -1
}

// unseal checks that every delivered value was sealed and returns the ids
// of the tracked items inside, in delivery order; it releases what it got.
func unseal(t *testing.T, out []any) []int64 {
	t.Helper()
	var ids []int64
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case value.List:
			for _, e := range x {
				walk(e)
			}
		case *item:
			ids = append(ids, x.id)
		default:
			t.Errorf("delivered %T inside a sealed value", v)
		}
	}
	for _, v := range out {
		s, ok := v.(*sealed)
		if !ok {
			t.Errorf("delivered %T, want *sealed: SinkEncode was skipped", v)
			value.Release(v)
			continue
		}
		walk(s.v)
		s.Release()
	}
	return ids
}

// shuffle sleeps longer for lower ids, so that a parallel stage finishes
// items out of order.
func shuffle(_ context.Context, in any) (any, error) {
	time.Sleep(time.Duration(3-in.(*item).id%4) * 200 * time.Microsecond)
	return in, nil
}

// sinkCases are the ways an item can reach the sink: which goroutine runs
// Config.SinkEncode. ordered says that items come out in source order.
var sinkCases = []struct {
	name    string
	stages  []pipeline.StageConfig
	ordered bool
}{
	{"no stages", nil, true},
	{"pipe", []pipeline.StageConfig{{Op: pipeline.OpFunc(identity)}}, true},
	{"pipe c4", []pipeline.StageConfig{{Op: pipeline.OpFunc(shuffle), Concurrency: 4}}, false},
	{"ordered c4", []pipeline.StageConfig{{Op: pipeline.OpFunc(shuffle), Concurrency: 4, Order: pipeline.OrderInput}}, true},
	{"timeout c2", []pipeline.StageConfig{{Op: pipeline.OpFunc(identity), Concurrency: 2, Timeout: deadline}}, false},
	{"ordered timeout c3", []pipeline.StageConfig{{Op: pipeline.OpFunc(shuffle), Concurrency: 3, Order: pipeline.OrderInput, Timeout: deadline}}, true},
	{"aggregate last", []pipeline.StageConfig{{Op: pipeline.OpFunc(identity)}, {Kind: pipeline.KindAggregate, Size: 3}}, true},
	{"disaggregate last", []pipeline.StageConfig{{Kind: pipeline.KindAggregate, Size: 3}, {Kind: pipeline.KindDisaggregate}}, true},
}

func TestSinkEncode(t *testing.T) {
	const n = 40
	for _, tc := range sinkCases {
		t.Run(tc.name, func(t *testing.T) {
			l, h := &ledger{}, &sinkHook{}
			out, st, err := runAll(t, pipeline.Config{
				Source:     &trackedSource{n: n, l: l},
				Stages:     tc.stages,
				BufferSize: 4,
				SinkEncode: h.encode,
			})
			if err != nil {
				t.Fatal(err)
			}
			ids := unseal(t, out)
			if tc.ordered && !equal(ids, seq(n)) {
				t.Errorf("ids %v, want 0..%d in order", ids, n-1)
			}
			if !equal(sorted(ids), seq(n)) {
				t.Errorf("ids %v, want each of 0..%d once", sorted(ids), n-1)
			}
			if c := h.calls.Load(); c != int64(len(out)) {
				t.Errorf("SinkEncode ran %d times for %d delivered values", c, len(out))
			}
			// Not a stage: Stats shows the configured stages only.
			if len(st.Stages) != len(tc.stages) {
				t.Errorf("Stats has %d stages, want %d", len(st.Stages), len(tc.stages))
			}
			if st.Failures != 0 || st.Sink.Failures != 0 || st.Sink.Delivered != int64(len(out)) {
				t.Errorf("failures %d, sink failures %d, delivered %d; want 0, 0, %d", st.Failures, st.Sink.Failures, st.Sink.Delivered, len(out))
			}
			l.check(t, 0) // unseal released what was delivered
		})
	}
}

func TestSinkEncodeFailures(t *testing.T) {
	const n = 40
	for _, tc := range sinkCases {
		t.Run(tc.name, func(t *testing.T) {
			l := &ledger{}
			h := &sinkHook{fail: func(id int64) bool { return id%5 == 2 }}
			stages := append([]pipeline.StageConfig(nil), tc.stages...)
			for i := range stages {
				stages[i].MaxFailures = 0 // the sink's failures are not the stage's
			}
			out, st, err := runAll(t, pipeline.Config{
				Source:      &trackedSource{n: n, l: l},
				Stages:      stages,
				BufferSize:  4,
				MaxFailures: -1,
				SinkEncode:  h.encode,
			})
			if err != nil {
				t.Fatal(err)
			}
			ids := unseal(t, out)
			failed := h.failed.Load()
			if failed == 0 {
				t.Fatal("no item failed")
			}
			if st.Sink.Failures != failed || st.Failures != failed {
				t.Errorf("sink failures %d, failures %d; want %d", st.Sink.Failures, st.Failures, failed)
			}
			for _, s := range st.Stages {
				if s.Failures != 0 {
					t.Errorf("stage %q counts %d failures, want 0", s.Name, s.Failures)
				}
			}
			if len(st.RecentErrors) == 0 || !strings.Contains(st.RecentErrors[0], `stage "sink": item `) {
				t.Errorf("recent errors %q, want the sink's", st.RecentErrors)
			}
			for _, id := range ids {
				if tc.stages == nil || tc.stages[len(tc.stages)-1].Kind != pipeline.KindAggregate {
					if id%5 == 2 {
						t.Errorf("item %d was delivered; SinkEncode failed it", id)
					}
				}
			}
			l.check(t, 0)
		})
	}
}

func TestSinkEncodeFailureLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		encode func(any) (any, error)
		want   func(error) bool
	}{
		{"error", (&sinkHook{fail: func(id int64) bool { return id >= 3 }}).encode, func(err error) bool {
			return err.Error() == "cannot encode"
		}},
		{"panic", func(v any) (any, error) {
			if v.(int64) >= 3 {
				panic("encoder bug")
			}
			return v, nil
		}, func(err error) bool {
			pe, ok := errors.AsType[*pipeline.PanicError](err)
			return ok && pe.Value == "encoder bug"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := pipeline.Source(pipeline.Range(0, 100, 1))
			if tc.name == "error" {
				src = &trackedSource{n: 100, l: &ledger{}}
			}
			_, st, err := runAll(t, pipeline.Config{
				Source:      src,
				Stages:      []pipeline.StageConfig{{Op: pipeline.OpFunc(identity), Concurrency: 2, MaxFailures: -1}},
				BufferSize:  2,
				MaxFailures: 2,
				SinkEncode:  tc.encode,
			})
			fl, ok := errors.AsType[*pipeline.FailureLimitError](err)
			if !ok {
				t.Fatalf("err = %v, want a FailureLimitError", err)
			}
			if fl.Stage != "" || fl.Limit != 2 {
				t.Errorf("limit error of stage %q, limit %d; want the pipeline's (\"\", 2)", fl.Stage, fl.Limit)
			}
			if fl.Last.Stage != "sink" || !tc.want(fl.Last.Err) {
				t.Errorf("last error %v (stage %q), want the sink's", fl.Last, fl.Last.Stage)
			}
			if st.State != "failed" {
				t.Errorf("state %q, want failed", st.State)
			}
		})
	}
}

// TestSinkEncodeBeforeNext shows that the hook runs on the pipeline's
// goroutines, before anyone calls Next, and that Stop releases what it
// made and left in the buffer.
func TestSinkEncodeBeforeNext(t *testing.T) {
	const buffer = 4
	for _, tc := range sinkCases {
		t.Run(tc.name, func(t *testing.T) {
			l, h := &ledger{}, &sinkHook{}
			p := mustNew(t, pipeline.Config{
				Source:     &trackedSource{n: 1000, l: l},
				Stages:     tc.stages,
				BufferSize: buffer,
				SinkEncode: h.encode,
			})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			for end := time.Now().Add(deadline); p.Stats().Sink.Len < buffer; {
				if time.Now().After(end) {
					t.Fatalf("the buffer never filled: %+v", p.Stats().Sink)
				}
				time.Sleep(time.Millisecond)
			}
			if c := h.calls.Load(); c < buffer {
				t.Errorf("SinkEncode ran %d times with %d items buffered", c, buffer)
			}
			p.Stop()
			goleak.VerifyNone(t)
			l.check(t, 0)
		})
	}
}

// TestSinkEncodeNotAStage checks what Stats and traces show: the stages,
// with the hook's time in the last one's busy time but not its latencies,
// and no span or thread for the hook.
func TestSinkEncodeNotAStage(t *testing.T) {
	const n, nap = 20, 10 * time.Millisecond
	p := mustNew(t, pipeline.Config{
		Source:     pipeline.Range(0, n, 1),
		Stages:     []pipeline.StageConfig{{Name: "sink", Op: pipeline.OpFunc(identity), Concurrency: 2}},
		BufferSize: 2,
		SinkEncode: func(v any) (any, error) { time.Sleep(nap); return v, nil },
	})
	if err := p.StartTrace(1000); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := drain(t, p)
	if err != nil || !equal(sorted(int64s(out)), seq(n)) {
		t.Fatalf("got %v, %v", out, err)
	}
	st := p.Stats()
	var buf bytes.Buffer
	if err := p.WriteTrace(&buf); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	goleak.VerifyNone(t)

	if len(st.Stages) != 1 || st.Stages[0].Name != "sink_0" {
		t.Fatalf("stages %+v, want one, renamed from the reserved \"sink\" to \"sink_0\"", st.Stages)
	}
	s := st.Stages[0]
	if s.BusyNs < int64(n*nap) {
		t.Errorf("busy %v, want at least the hook's %v", time.Duration(s.BusyNs), n*nap)
	}
	if s.LatencyP99Ns >= int64(nap) {
		t.Errorf("p99 latency %v includes the hook's %v", time.Duration(s.LatencyP99Ns), nap)
	}
	var tf traceFile
	if err := json.Unmarshal(buf.Bytes(), &tf); err != nil {
		t.Fatal(err)
	}
	spans, threads := 0, 0
	for _, e := range tf.TraceEvents {
		switch e.Ph {
		case "X":
			spans++
			if e.Name != "sink_0" {
				t.Errorf("span %q, want only the stage's", e.Name)
			}
		case "M":
			if e.Name == "thread_name" {
				threads++
			}
		}
	}
	if spans != n || threads > 2 {
		t.Errorf("%d spans on %d threads, want %d on the stage's 2 at most", spans, threads, n)
	}
}

func TestSinkNameFreeWithoutHook(t *testing.T) {
	p := mustNew(t, pipeline.Config{
		Source:     pipeline.Range(0, 1, 1),
		Stages:     []pipeline.StageConfig{{Name: "sink", Op: pipeline.OpFunc(identity)}},
		BufferSize: 1,
	})
	if name := p.Stats().Stages[0].Name; name != "sink" {
		t.Errorf("name %q, want \"sink\" (reserved only with SinkEncode)", name)
	}
}
