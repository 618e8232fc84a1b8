package main

import (
	"context"
	"io"
	"testing"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sources"
)

// A source kind registered outside capi is built from a spec naming it,
// with no change to capi: spec.go only routes.
func init() { sources.Register("test_countdown", newCountdown) }

type countdown struct{ from int64 }

func newCountdown(m map[string]any) (pipeline.Source, error) {
	r := options.New(m)
	from, err := r.Int("from", 3)
	if err != nil {
		return nil, err
	}
	return countdown{from}, r.Done()
}

func (c countdown) Open(context.Context) (pipeline.Iterator, error) {
	return &countdownIter{c.from}, nil
}

type countdownIter struct{ n int64 }

func (it *countdownIter) Next(context.Context) (any, error) {
	if it.n == 0 {
		return nil, io.EOF
	}
	it.n--
	return it.n, nil
}

func (it *countdownIter) Close() error { return nil }

func TestANewSourceKindNeedsNoCapiChange(t *testing.T) {
	spec := `{"source": {"kind": "test_countdown", "from": 5}, "stages": [{"kind": "pipe", "name": "id", "concurrency": 2,
		"op": {"kind": "native", "name": "identity", "options": {}}}, {"kind": "aggregate", "num_items": 2, "drop_last": false}]}`
	if got := run(t, spec); got != 3 {
		t.Errorf("got %d batches of 5 items by 2, want 3", got)
	}
	if _, err := buildConfig([]byte(`{"source": {"kind": "test_countdown", "to": 1}}`)); err == nil ||
		err.Error() != `test_countdown source: unknown option "to"; known options: from` {
		t.Errorf("got %v", err)
	}
}
