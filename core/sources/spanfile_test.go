package sources_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

// countingFile records the ReadAt calls made on a table file, and fails
// those longer than failOver bytes (when > 0).
type countingFile struct {
	*os.File
	mu       *sync.Mutex
	reads    *[][2]int64 // offset, length
	failOver *int64
}

func (f countingFile) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	*f.reads = append(*f.reads, [2]int64{off, int64(len(p))})
	over := *f.failOver
	f.mu.Unlock()
	if over > 0 && int64(len(p)) > over {
		return 0, errors.New("injected read failure")
	}
	return f.File.ReadAt(p, off)
}

// Reading an epoch of a Parquet file fetches each row group's selected
// column chunks in one request made ahead, not one per column chunk, and
// does not read the footer again; a failed fetch falls back to the file.
func TestParquetRowGroupsAreFetchedAhead(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "t.parquet")
	writeParquet(t, path, 0, 40, 40, 40, 40, 40)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// epoch reads the file and returns the reads made after the source
	// was built (which reads the footer).
	epoch := func(t *testing.T, columns []string, failOver int64) [][2]int64 {
		var mu sync.Mutex
		var reads [][2]int64
		var over int64 // the footer is read whole, when the source is built
		open := func(_ context.Context, name string) (sources.File, error) {
			f, err := os.Open(name)
			if err != nil {
				return nil, err
			}
			return countingFile{File: f, mu: &mu, reads: &reads, failOver: &over}, nil
		}
		src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{path}, Columns: columns, Open: open, Scalars: true})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		reads, over = nil, failOver
		mu.Unlock()
		got := readTable(t, src)
		if len(got.rows) != 200 || len(got.failures) != 0 {
			t.Fatalf("%d rows, failures %v", len(got.rows), got.failures)
		}
		for i, r := range got.rows {
			if v, _ := r.Get("img"); fmt.Sprintf("%s", v) != fmt.Sprintf("img-%d", i) {
				t.Fatalf("row %d: img %s", i, v)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		var fetched int64
		for _, r := range reads {
			if r[0]+r[1] > st.Size()-8 {
				t.Errorf("read [%d, +%d) of the footer again", r[0], r[1])
			}
			fetched += r[1]
		}
		if ops := src.OpStats(); ops["parts_opened"] != 5 || ops["bytes_read"] <= 0 || ops["bytes_read"] > fetched {
			t.Errorf("op stats %v: want 5 parts, and at most the %d bytes fetched read", ops, fetched)
		}
		return reads
	}
	all := epoch(t, nil, 0)
	if len(all) != 5 {
		t.Fatalf("%d reads for 5 row groups, want one each: %v", len(all), all)
	}
	if two := epoch(t, []string{"img", "text"}, 0); len(two) != 5 {
		t.Fatalf("%d reads for 5 row groups of two columns, want one each: %v", len(two), two)
	}
	// After the first row, the second row group is being fetched too.
	{
		var mu sync.Mutex
		var reads [][2]int64
		var over int64
		src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{path}, Scalars: true,
			Open: func(_ context.Context, name string) (sources.File, error) {
				f, err := os.Open(name)
				if err != nil {
					return nil, err
				}
				return countingFile{File: f, mu: &mu, reads: &reads, failOver: &over}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		reads = nil
		mu.Unlock()
		it := afterFirstItem(t, src)
		eventually(t, "after the first row, two row groups fetched", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(reads) >= 2
		})
		it.Close()
	}
	// Every fetch of three column chunks fails; each chunk is then read
	// from the file alone.
	smallest := slices.MinFunc(all, func(a, b [2]int64) int { return int(a[1] - b[1]) })
	if again := epoch(t, nil, smallest[1]-1); len(again) != 5+5*3 {
		t.Fatalf("%d reads, want 5 failed fetches and 15 column chunks: %v", len(again), again)
	}
}

// With a shuffle over files and two ranks, the next row group fetched
// is the plan's, and every row is read once.
func TestParquetFetchAheadFollowsThePlan(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	var paths []string
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprintf("t%d.parquet", i))
		writeParquet(t, p, i*100, 50, 50)
		paths = append(paths, p)
	}
	var all []string
	for rank := range 2 {
		src, err := sources.NewTableSource(sources.TableOptions{Paths: paths, Sampling: sampler.Options{Shuffle: true, Seed: 9, World: 2, Rank: rank}, Scalars: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range readTable(t, src).rows {
			v, _ := r.Get("img")
			all = append(all, fmt.Sprintf("%s", v))
		}
	}
	slices.Sort(all)
	if len(all) != 300 || len(slices.Compact(slices.Clone(all))) != 300 {
		t.Fatalf("%d rows over the ranks, want 300 distinct", len(all))
	}
}

// When the plan's next part is in another file, that file is opened (and
// its row group fetched) while the current part is read; if it cannot be
// opened then, the failure comes at its turn, naming it.
func TestParquetNextFileOpensAhead(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.parquet"), filepath.Join(dir, "c.parquet")}
	for i, p := range paths {
		writeParquet(t, p, i*10, 10)
	}
	var mu sync.Mutex
	var opened []string
	failB := false
	open := func(_ context.Context, name string) (sources.File, error) {
		mu.Lock()
		defer mu.Unlock()
		opened = append(opened, filepath.Base(name))
		if failB && filepath.Base(name) == "b.parquet" {
			return nil, errors.New("injected open failure")
		}
		return os.Open(name)
	}
	for _, fail := range []bool{false, true} {
		src, err := sources.NewTableSource(sources.TableOptions{Paths: paths, Open: open, Scalars: true})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		opened, failB = nil, fail
		mu.Unlock()
		it := afterFirstItem(t, src)
		eventually(t, "after the first row of a, b opened ahead", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Equal(opened, []string{"a.parquet", "b.parquet"})
		})
		rows, failures := 1, []string(nil)
		for {
			v, err := it.Next(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			var f *pipeline.ItemFailure
			if errors.As(err, &f) {
				failures = append(failures, f.Error())
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			value.Release(v)
			rows++
		}
		it.Close()
		want := 30
		if fail {
			want = 20
			if len(failures) != 1 || !strings.Contains(failures[0], "b.parquet: injected open failure") {
				t.Fatalf("failures %v", failures)
			}
		}
		if rows != want || (!fail && len(failures) != 0) {
			t.Fatalf("fail=%v: %d rows, failures %v", fail, rows, failures)
		}
	}
}

// afterFirstItem opens an epoch of src and takes its first item.
func afterFirstItem(t *testing.T, src pipeline.Source) pipeline.Iterator {
	t.Helper()
	it, err := src.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v, err := it.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	value.Release(v)
	return it
}

// eventually waits up to 5 s for cond, which goroutines make true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not so after 5 s: %s", what)
		}
	}
}
