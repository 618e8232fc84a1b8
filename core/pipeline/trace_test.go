package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

type traceFile struct {
	TraceEvents []struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Ts   *float64       `json:"ts"`
		Dur  *float64       `json:"dur"`
		Pid  *int           `json:"pid"`
		Tid  *int           `json:"tid"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
	DisplayTimeUnit string `json:"displayTimeUnit"`
}

func TestTraceExport(t *testing.T) {
	defer goleak.VerifyNone(t)
	slow := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		time.Sleep(100 * time.Microsecond)
		if in.(int64)%10 == 3 {
			return nil, errors.New("bad")
		}
		return in, nil
	})
	for _, tc := range []struct {
		name     string
		max      int
		items    int64
		wantSpan int
	}{
		{"window smaller than the run", 50, 100, 50},
		{"window larger than the run", 1000, 40, 40 + 36}, // every decode call, and id for the 36 that did not fail
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, pipeline.Config{
				Source: pipeline.Range(0, tc.items, 1),
				Stages: []pipeline.StageConfig{
					{Name: "decode", Kind: pipeline.KindPipe, Op: slow, Concurrency: 3, MaxFailures: -1},
					{Name: "id", Kind: pipeline.KindPipe, Op: pipeline.OpFunc(identity), Concurrency: 1, MaxFailures: -1},
				},
				BufferSize: 4, MaxFailures: -1,
			})
			if err := p.WriteTrace(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "StartTrace") {
				t.Fatalf("WriteTrace before StartTrace: %v", err)
			}
			if err := p.StartTrace(tc.max); err != nil {
				t.Fatal(err)
			}
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := drain(t, p); err != nil {
				t.Fatal(err)
			}
			p.StopTrace()
			p.Stop()
			var buf bytes.Buffer
			if err := p.WriteTrace(&buf); err != nil {
				t.Fatal(err)
			}
			var f traceFile
			dec := json.NewDecoder(&buf)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				t.Fatalf("trace is not the expected JSON: %v", err)
			}
			spans, failed := 0, 0
			named := map[int]string{}
			for _, ev := range f.TraceEvents {
				if ev.Pid == nil || ev.Tid == nil || ev.Ts == nil {
					t.Fatalf("event without pid/tid/ts: %+v", ev)
				}
				switch ev.Ph {
				case "M":
					if ev.Name != "thread_name" || ev.Args["name"] == "" {
						t.Fatalf("bad metadata event %+v", ev)
					}
					named[*ev.Tid] = ev.Args["name"].(string)
				case "X":
					spans++
					if ev.Dur == nil || *ev.Dur < 0 || *ev.Ts < 0 || (ev.Name != "decode" && ev.Name != "id") || ev.Cat != "op" {
						t.Fatalf("bad span %+v", ev)
					}
					if !strings.HasPrefix(named[*ev.Tid], ev.Name+" #") {
						t.Fatalf("span on track %d (%q) before its thread_name", *ev.Tid, named[*ev.Tid])
					}
					if ev.Name == "decode" && *ev.Dur < 90 {
						t.Fatalf("decode span of %v µs, want >= 100", *ev.Dur)
					}
					if ev.Args["failed"] == true {
						failed++
					}
				default:
					t.Fatalf("unexpected phase %q", ev.Ph)
				}
			}
			if spans != tc.wantSpan {
				t.Fatalf("%d spans, want %d", spans, tc.wantSpan)
			}
			if tc.max > 100 && failed != int(tc.items/10) {
				t.Fatalf("%d failed spans, want %d", failed, tc.items/10)
			}
			if f.DisplayTimeUnit != "ms" {
				t.Fatalf("displayTimeUnit %q", f.DisplayTimeUnit)
			}
		})
	}
	p := mustNew(t, pipeline.Config{Source: pipeline.Range(0, 1, 1), BufferSize: 1})
	if err := p.StartTrace(0); err == nil {
		t.Fatal("StartTrace(0) accepted")
	}
}
