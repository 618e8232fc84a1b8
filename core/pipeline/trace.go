package pipeline

import (
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// trace records op calls as spans, up to a fixed number, for the Chrome /
// Perfetto trace viewer (ui.perfetto.dev, chrome://tracing). Recording is
// lock-free: a call claims a slot with one atomic add and fills it with
// atomic stores, so a trace can be written while the pipeline runs.
type trace struct {
	start time.Time
	next  atomic.Int64
	spans []traceSpan
}

type traceSpan struct {
	t0, dur atomic.Int64 // ns since start; dur < 0 until the span is complete
	where   atomic.Int64 // stage<<32 | worker<<1 | failed
}

func (t *trace) add(sl *slot, t0 time.Time, d time.Duration, failed bool) {
	i := t.next.Add(1) - 1
	if i >= int64(len(t.spans)) {
		return
	}
	sp := &t.spans[i]
	f := int64(0)
	if failed {
		f = 1
	}
	sp.t0.Store(int64(t0.Sub(t.start)))
	sp.where.Store(int64(sl.stage)<<32 | int64(sl.worker)<<1 | f)
	sp.dur.Store(int64(d))
}

// StartTrace begins recording the next maxSpans op calls of every pipe
// stage (a previous trace is discarded). Costs one atomic load per item
// when no trace is on, and an atomic add and three stores when one is.
func (p *Pipeline) StartTrace(maxSpans int) error {
	if maxSpans < 1 || maxSpans > 10_000_000 {
		return fmt.Errorf("trace: maxSpans must be between 1 and 10,000,000, got %d", maxSpans)
	}
	t := &trace{start: time.Now(), spans: make([]traceSpan, maxSpans)}
	for i := range t.spans {
		t.spans[i].dur.Store(-1)
	}
	p.trace.Store(t)
	return nil
}

// StopTrace stops recording; the spans recorded so far stay for WriteTrace.
func (p *Pipeline) StopTrace() {
	if t := p.trace.Swap(nil); t != nil {
		p.lastTrace.Store(t)
	}
}

type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteTrace writes the spans of the current (or last stopped) trace in
// the Trace Event Format: one complete ("X") event per op call, on a
// track per stage worker, named by thread_name metadata events.
func (p *Pipeline) WriteTrace(w io.Writer) error {
	t := p.trace.Load()
	if t == nil {
		t = p.lastTrace.Load()
	}
	if t == nil {
		return fmt.Errorf("trace: no trace was started (call StartTrace first)")
	}
	n := min(t.next.Load(), int64(len(t.spans)))
	events := make([]traceEvent, 0, n+16)
	named := map[int]bool{}
	for i := int64(0); i < n; i++ {
		sp := &t.spans[i]
		dur := sp.dur.Load()
		if dur < 0 {
			continue // claimed but not complete yet
		}
		where := sp.where.Load()
		stage, worker, failed := int(where>>32), int(where>>1&0x7fffffff), where&1 == 1
		tid := stage*1000 + worker + 1
		name := p.stages[stage].Name
		if !named[tid] {
			named[tid] = true
			events = append(events, traceEvent{Name: "thread_name", Ph: "M", Pid: 1, Tid: tid,
				Args: map[string]any{"name": fmt.Sprintf("%s #%d", name, worker)}})
		}
		ev := traceEvent{Name: name, Cat: "op", Ph: "X", Ts: float64(sp.t0.Load()) / 1e3,
			Dur: float64(dur) / 1e3, Pid: 1, Tid: tid}
		if failed {
			ev.Args = map[string]any{"failed": true}
		}
		events = append(events, ev)
	}
	return json.NewEncoder(w).Encode(struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}{events, "ms"})
}
