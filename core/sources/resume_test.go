package sources_test

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

// consumed turns samples' "__index__" into a StreamResume's runs, one
// run per sample (newSkipSet merges them).
func consumed(items []*value.Dict) map[int64][][2]int64 {
	m := map[int64][][2]int64{}
	for _, d := range items {
		v, _ := d.Get("__index__")
		id := v.(int64)
		k := id & (1<<32 - 1)
		m[id>>32] = append(m[id>>32], [2]int64{k, k + 1})
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

type unitSized interface {
	pipeline.Source
	UnitSizes() map[int64]int64
	OpStats() map[string]int64
}

// Consume part of an epoch on two ranks, then resume it on one: every
// sample of the epoch comes exactly once, for tar shards and table parts.
// Units consumed whole are not opened again when their sizes are known.
func TestStreamingSourcesResume(t *testing.T) {
	dir := t.TempDir()
	shards := writeShards(t, dir, tar.FormatPAX, 5, 4)
	pq := filepath.Join(dir, "t.parquet")
	writeParquet(t, pq, 0, 4, 4, 4, 4, 4)
	ipcPath := filepath.Join(dir, "t.arrow")
	writeArrow(t, ipcPath, 0, 4, 4, 4, 4, 4)
	var opens atomic.Int64
	table := func(path string) func(world, rank, buffer int, r *sources.StreamResume) unitSized {
		return func(world, rank, buffer int, r *sources.StreamResume) unitSized {
			s, err := sources.NewTableSource(sources.TableOptions{Paths: []string{path},
				Sampling:      sampler.Options{Shuffle: true, Seed: 4, World: world, Rank: rank, DropLast: true, Epoch: 2},
				ShuffleBuffer: buffer, WithIndex: true, Resume: r, Scalars: true})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	kinds := []struct {
		name  string
		field string
		make  func(world, rank, buffer int, r *sources.StreamResume) unitSized
	}{
		{"tar", "__key__", func(world, rank, buffer int, r *sources.StreamResume) unitSized {
			return mustTar(t, sources.TarOptions{Shards: shards,
				Sampling:      sampler.Options{Shuffle: true, Seed: 4, World: world, Rank: rank, DropLast: true, Epoch: 2},
				ShuffleBuffer: buffer, WithIndex: true, Resume: r,
				Open: func(_ context.Context, name string) (io.ReadCloser, error) { opens.Add(1); return os.Open(name) }})
		}},
		{"parquet", "img", table(pq)},
		{"arrow", "img", table(ipcPath)},
	}
	cases := []struct {
		name            string
		buffer, perRank int
		whole           int64 // units the resumed epoch must not open
	}{
		// Shuffled across shards: no unit is consumed whole.
		{"shuffle buffer, 3 each", 3, 3, 0},
		// In unit order, 5 of a rank's 2x4 samples: its first unit whole.
		{"in order, 5 each", 0, 5, 2},
	}
	for _, kind := range kinds {
		for _, c := range cases {
			t.Run(kind.name+"/"+c.name, func(t *testing.T) {
				full := readAll2(t, kind.make(1, 0, c.buffer, nil))
				var seen []*value.Dict
				sizes := map[int64]int64{}
				for rank := range 2 {
					src := kind.make(2, rank, c.buffer, nil)
					all := readAll2(t, src)
					seen = append(seen, all[:c.perRank]...)
					maps.Copy(sizes, src.UnitSizes())
				}
				// The ranks read 4 of the 5 units to their end (drop_last
				// leaves one out); Parquet footers give all 5.
				if want := map[bool]int{true: 5, false: 4}[kind.name == "parquet"]; len(sizes) != want {
					t.Errorf("sizes %v, want %d units", sizes, want)
				}
				opens.Store(0)
				src := kind.make(1, 0, c.buffer, &sources.StreamResume{Epoch: 2, Consumed: consumed(seen), Sizes: sizes})
				resumed := readAll2(t, src)
				union := append(keysOf(seen, kind.field), keysOf(resumed, kind.field)...)
				slices.Sort(union)
				want := keysOf(full, kind.field)
				slices.Sort(want)
				if !slices.Equal(union, want) {
					t.Errorf("seen %d + resumed %d samples; union is not the epoch:\n%v\nwant\n%v", len(seen), len(resumed), union, want)
				}
				st := src.OpStats()
				if st["resume_units_skipped"] != c.whole || st["resume_samples_skipped"] != int64(len(seen)) {
					t.Errorf("op stats %v, want %d units and %d samples skipped", st, c.whole, len(seen))
				}
				// One rank now reads all 5 shards, but those consumed whole.
				if kind.name == "tar" && opens.Load() != 5-c.whole {
					t.Errorf("resumed epoch opened %d shards, want %d", opens.Load(), 5-c.whole)
				}
				// The next epoch is whole again.
				if next := readAll2(t, src); len(next) != len(full) {
					t.Errorf("the epoch after the resumed one has %d samples, want %d", len(next), len(full))
				}
			})
		}
	}
}

func TestStreamResumeIsChecked(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.tar")
	shard(t, p, tar.FormatPAX, samples(0, 4)...)
	for _, c := range []struct {
		name string
		r    sources.StreamResume
		want string
	}{
		{"unit out of range", sources.StreamResume{Consumed: map[int64][][2]int64{3: {{0, 1}}}}, "unit 3, but the source has 1 units"},
		{"negative unit", sources.StreamResume{Consumed: map[int64][][2]int64{-1: {{0, 1}}}}, "unit -1"},
		{"empty run", sources.StreamResume{Consumed: map[int64][][2]int64{0: {{2, 2}}}}, "bad run [2, 2)"},
		{"negative run", sources.StreamResume{Consumed: map[int64][][2]int64{0: {{-1, 2}}}}, "bad run [-1, 2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := sources.NewTarSource(sources.TarOptions{Shards: []string{p}, Resume: &c.r})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to say %q", err, c.want)
			}
		})
	}
	// Overlapping and unordered runs merge; [0, 4) with size 4 is the whole shard.
	r := &sources.StreamResume{Consumed: map[int64][][2]int64{0: {{2, 4}, {0, 1}, {1, 3}}}, Sizes: map[int64]int64{0: 4}}
	src := mustTar(t, sources.TarOptions{Shards: []string{p}, Resume: r})
	if got := readAll(t, src); len(got.items) != 0 || src.OpStats()["resume_units_skipped"] != 1 {
		t.Fatalf("resumed %d samples, stats %v; want none, the shard skipped whole", len(got.items), src.OpStats())
	}
	// Without the size, the shard is read and each sample skipped.
	r.Sizes = nil
	src = mustTar(t, sources.TarOptions{Shards: []string{p}, Resume: r})
	if got := readAll(t, src); len(got.items) != 0 || src.OpStats()["resume_samples_skipped"] != 4 || src.OpStats()["resume_units_skipped"] != 0 {
		t.Fatalf("resumed %d samples, stats %v; want none, 4 skipped one by one", len(got.items), src.OpStats())
	}
	if got := src.UnitSizes(); got[0] != 4 {
		t.Fatalf("sizes after reading the shard: %v", got)
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
