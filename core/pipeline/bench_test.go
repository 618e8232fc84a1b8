package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

// repeatSource yields the same boxed value n times: no allocation per
// item, so benchmarks measure the engine, not the source.
type repeatSource struct {
	n int
	v any
}

func (s repeatSource) Open(context.Context) (pipeline.Iterator, error) {
	return &repeatIter{n: s.n, v: s.v}, nil
}

type repeatIter struct {
	n int
	v any
}

func (it *repeatIter) Next(context.Context) (any, error) {
	if it.n == 0 {
		return nil, io.EOF
	}
	it.n--
	return it.v, nil
}

func (it *repeatIter) Close() error { return nil }

var noop = pipeline.OpFunc(func(_ context.Context, in any) (any, error) { return in, nil })

// BenchmarkPipeStage reports the cost per item (ns/op = ns per item) of a
// pipeline of a source, the stages named, and the sink read by Next. The
// pipeline is built and started before the timer runs; source_only is the
// baseline to subtract to get a stage's own cost.
func BenchmarkPipeStage(b *testing.B) {
	for _, bc := range []struct {
		name   string
		stages []pipeline.StageConfig
	}{
		{"source_only", nil},
		{"noop_c1", []pipeline.StageConfig{{Op: noop, Concurrency: 1}}},
		{"noop_c4", []pipeline.StageConfig{{Op: noop, Concurrency: 4}}},
		{"ordered_c1", []pipeline.StageConfig{{Op: noop, Concurrency: 1, Order: pipeline.OrderInput}}},
		{"ordered_c4", []pipeline.StageConfig{{Op: noop, Concurrency: 4, Order: pipeline.OrderInput}}},
		{"noop_c4_x3", []pipeline.StageConfig{{Op: noop, Concurrency: 4}, {Op: noop, Concurrency: 4}, {Op: noop, Concurrency: 4}}},
		{"aggregate_32", []pipeline.StageConfig{{Kind: pipeline.KindAggregate, Size: 32}, {Kind: pipeline.KindDisaggregate}}},
	} {
		for _, qs := range []int{0, 64} {
			name := bc.name
			if qs != 0 {
				name = fmt.Sprintf("%s_q%d", bc.name, qs)
			}
			b.Run(name, func(b *testing.B) {
				drainPerItem(b, pipeline.Config{
					Source:      repeatSource{n: b.N, v: any(int64(1 << 20))},
					Stages:      bc.stages,
					BufferSize:  max(qs, 8),
					QueueSize:   qs,
					MaxFailures: -1,
				})
			})
		}
	}
}

// BenchmarkStartup is the fixed cost of an epoch: New, Start, reading the
// end of an empty source, and Stop.
func BenchmarkStartup(b *testing.B) {
	stages := []pipeline.StageConfig{
		{Op: noop, Concurrency: 4},
		{Op: noop, Concurrency: 4, Order: pipeline.OrderInput},
		{Kind: pipeline.KindAggregate, Size: 8},
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := pipeline.New(pipeline.Config{Source: repeatSource{}, Stages: stages, BufferSize: 4})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Start(); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Next(context.Background(), -1); !errors.Is(err, pipeline.ErrEndOfData) {
			b.Fatal(err)
		}
		p.Stop()
	}
}

// BenchmarkSinkEncode is BenchmarkPipeStage's source_only and noop_c1 with
// a Config.SinkEncode that returns its item: the hook's own cost per item
// (two clock reads and a call) on the goroutine that feeds the sink.
func BenchmarkSinkEncode(b *testing.B) {
	for _, bc := range []struct {
		name   string
		stages []pipeline.StageConfig
	}{
		{"source_only", nil},
		{"noop_c1", []pipeline.StageConfig{{Op: noop, Concurrency: 1}}},
	} {
		for _, hook := range []bool{false, true} {
			name := bc.name
			var encode func(any) (any, error)
			if hook {
				name += "_hook"
				encode = func(v any) (any, error) { return v, nil }
			}
			b.Run(name, func(b *testing.B) {
				drainPerItem(b, pipeline.Config{
					Source:      repeatSource{n: b.N, v: any(int64(1 << 20))},
					Stages:      bc.stages,
					BufferSize:  8,
					MaxFailures: -1,
					SinkEncode:  encode,
				})
			})
		}
	}
}

// drainPerItem builds and starts a pipeline, then times reading every item
// (b.N of them) with Next: the per-item cost, without start-up.
func drainPerItem(b *testing.B, cfg pipeline.Config) {
	p, err := pipeline.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop()
	if err := p.Start(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	ctx := context.Background()
	for {
		if _, err := p.Next(ctx, -1); err != nil {
			if !errors.Is(err, pipeline.ErrEndOfData) {
				b.Fatal(err)
			}
			return
		}
	}
}
