package sources_test

import (
	"archive/tar"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

// consumed turns samples' "__index__" into a StreamResume's map.
func consumed(items []*value.Dict) map[int64][]int64 {
	m := map[int64][]int64{}
	for _, d := range items {
		v, _ := d.Get("__index__")
		id := v.(int64)
		m[id>>32] = append(m[id>>32], id&(1<<32-1))
	}
	return m
}

func keysOf(items []*value.Dict, field string) []string {
	var out []string
	for _, d := range items {
		v, _ := d.Get(field)
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// Consume part of an epoch on two ranks, then resume it on one: every
// sample of the epoch comes exactly once, for tar shards and table parts.
func TestStreamingSourcesResume(t *testing.T) {
	dir := t.TempDir()
	var shards []string
	for s := range 5 {
		p := filepath.Join(dir, fmt.Sprintf("s%d.tar", s))
		shard(t, p, tar.FormatPAX, samples(s, 4)...)
		shards = append(shards, p)
	}
	pq := filepath.Join(dir, "t.parquet")
	writeParquet(t, pq, 0, 4, 4, 4, 4, 4)
	kinds := []struct {
		name  string
		field string
		make  func(world, rank int, r *sources.StreamResume) pipeline.Source
	}{
		{"tar", "__key__", func(world, rank int, r *sources.StreamResume) pipeline.Source {
			return mustTar(t, sources.TarOptions{Shards: shards, Shuffle: true, Seed: 4, World: world, Rank: rank, DropLast: true,
				ShuffleBuffer: 3, WithIndex: true, Resume: r, Epoch: 2})
		}},
		{"table", "img", func(world, rank int, r *sources.StreamResume) pipeline.Source {
			s, err := sources.NewTableSource(sources.TableOptions{Paths: []string{pq}, Shuffle: true, Seed: 4, World: world, Rank: rank,
				DropLast: true, ShuffleBuffer: 3, WithIndex: true, Resume: r, Epoch: 2, Scalars: true})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			full := readAll2(t, kind.make(1, 0, nil))
			// Two ranks (2 units each: drop_last leaves one out) consume 3 samples each.
			var seen []*value.Dict
			for rank := range 2 {
				all := readAll2(t, kind.make(2, rank, nil))
				seen = append(seen, all[:3]...)
			}
			got := consumed(seen)
			resumed := readAll2(t, kind.make(1, 0, &sources.StreamResume{Epoch: 2, Consumed: got}))
			union := append(keysOf(seen, kind.field), keysOf(resumed, kind.field)...)
			slices.Sort(union)
			want := keysOf(full, kind.field)
			slices.Sort(want)
			if !slices.Equal(union, want) {
				t.Errorf("seen %d + resumed %d samples; union is not the epoch:\n%v\nwant\n%v", len(seen), len(resumed), union, want)
			}
		})
	}
}

// readAll2 drains a source's epoch into dicts.
func readAll2(t *testing.T, src pipeline.Source) []*value.Dict {
	t.Helper()
	if ts, ok := src.(*sources.TarSource); ok {
		return readAll(t, ts).items
	}
	return readTable(t, src.(*sources.TableSource)).rows
}
