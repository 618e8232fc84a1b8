package sampler_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/value"
)

func drainEpoch(t *testing.T, p *pipeline.Pipeline) []any {
	t.Helper()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var out []any
	for {
		v, err := p.Next(context.Background(), 10*time.Second)
		if errors.Is(err, pipeline.ErrEndOfData) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
}

// Ranks of a job each run a pipeline over a sampler Source: every epoch,
// each item goes to exactly one rank, epochs differ, and an op that
// changes its input in place does not change the next epoch's items.
func TestSourceAcrossRanksAndEpochs(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n, world = 23, 3
	items := make(value.List, n)
	for i := range items {
		items[i] = value.Tuple{"file" + string(rune('a'+i)), int64(i)}
	}
	clobber := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		tp := in.(value.Tuple)
		label := tp[1]
		tp[0] = "clobbered" // in place: the source must hand out copies
		return label, nil
	})
	var pipes []*pipeline.Pipeline
	for r := range world {
		src, err := sampler.NewSource(sampler.Config{N: n, World: world, Rank: r, Shuffle: true, Seed: 5}, items, 0)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pipeline.New(pipeline.Config{
			Source: src, BufferSize: 2, MaxFailures: -1,
			Stages: []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: clobber, Concurrency: 2, Order: pipeline.OrderInput, MaxFailures: -1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		pipes = append(pipes, p)
	}
	var orders [][]int64
	for epoch := range 2 {
		seen := map[int64]int{}
		var order []int64
		for r, p := range pipes {
			got := drainEpoch(t, p)
			if len(got) != (n+world-1)/world {
				t.Fatalf("epoch %d rank %d: %d items", epoch, r, len(got))
			}
			for _, v := range got {
				seen[v.(int64)]++
				order = append(order, v.(int64))
			}
		}
		// 23 over 3 ranks pads one item: 24 dealt, 23 distinct.
		if len(seen) != n {
			t.Fatalf("epoch %d: %d distinct items, want %d", epoch, len(seen), n)
		}
		orders = append(orders, order)
	}
	if slices.Equal(orders[0], orders[1]) {
		t.Fatal("two epochs in the same order")
	}
	if items[0].(value.Tuple)[0] != "filea" {
		t.Fatalf("the source's items were changed: %v", items[0])
	}
}

func TestNewSourceRejectsBadItems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items value.List
		n     int64
		want  string
	}{
		{"count", value.List{int64(1)}, 2, "1 items for a dataset size of 2"},
		{"releaser", value.List{"a", value.Tuple{"b", releaser{}}}, 2, "item 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sampler.NewSource(sampler.Config{N: tc.n, World: 1}, tc.items, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

type releaser struct{}

func (releaser) Release() {}

func TestSourceWithIndex(t *testing.T) {
	d := value.NewDict(1)
	d.Set("path", "c.jpg")
	items := value.List{value.Tuple{"a.jpg", int64(7)}, "b.jpg", d}
	src, err := sampler.NewSource(sampler.Config{N: 3, World: 1}, items, 0)
	if err != nil {
		t.Fatal(err)
	}
	src.WithIndex = true
	it, err := src.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		v, err := it.Next(context.Background())
		if err != nil {
			break
		}
		got = append(got, value.Describe(v))
	}
	want := []string{`("a.jpg", 7, 0)`, `("b.jpg", 1)`, `{"path": "c.jpg", "__index__": 2}`}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if v, _ := items[0].(value.Tuple); len(v) != 2 {
		t.Errorf("the source's own items changed: %v", items[0])
	}
}
