package sources_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

// isArrowPath: the table source reads the file as Arrow IPC.
func isArrowPath(path string) bool {
	switch filepath.Ext(path) {
	case ".arrow", ".feather", ".ipc":
		return true
	}
	return false
}

// writeTableTB writes records(first, sizes...) as Parquet or Arrow IPC,
// by path's extension (one row group or record batch per size).
func writeTableTB(tb testing.TB, path string, first int, sizes ...int) {
	tb.Helper()
	recs := records(first, sizes...)
	writeBatches(tb, path, tableSchema, recs...)
	for _, rec := range recs {
		rec.Release()
	}
}

// writeBatches writes recs (of schema sc) as Parquet or Arrow IPC, by
// path's extension: one row group or record batch each.
func writeBatches(tb testing.TB, path string, sc *arrow.Schema, recs ...arrow.RecordBatch) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var w interface {
		Write(arrow.RecordBatch) error
		Close() error
	}
	if isArrowPath(path) {
		w, err = ipc.NewFileWriter(f, ipc.WithSchema(sc))
	} else {
		w, err = pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	}
	if err != nil {
		tb.Fatal(err)
	}
	for _, rec := range recs {
		if err := w.Write(rec); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

type memFile struct{ *bytes.Reader }

func (memFile) Close() error { return nil }

// FuzzTableFile reads arbitrary bytes as a Parquet or an Arrow IPC file
// next to a good Parquet file: the source must not panic, must read the
// good file whole, must name the damaged file in each failure, and must
// leave nothing allocated.
func FuzzTableFile(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeTableTB(f, good, 100, 3)
	goodBytes, err := os.ReadFile(good)
	if err != nil {
		f.Fatal(err)
	}
	seeds := map[string]bool{}
	for _, name := range []string{"s.parquet", "s.arrow"} {
		p := filepath.Join(dir, name)
		writeTableTB(f, p, 0, 3, 3)
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		seeds[string(b)] = strings.HasSuffix(name, ".arrow")
	}
	for _, name := range []string{"crc_v1.parquet", "crc_v2.parquet"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		seeds[string(b)] = false
	}
	for s, arrow := range seeds {
		b := []byte(s)
		f.Add(b, arrow)
		f.Add(b[:len(b)/2], arrow)
		for _, at := range []int{len(b) / 3, len(b) - 40, len(b) - 9} {
			c := slices.Clone(b)
			c[at] ^= 0xff
			f.Add(c, arrow)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, arrow bool) {
		name := "fuzz.parquet"
		if arrow {
			name = "fuzz.arrow"
		}
		open := func(_ context.Context, p string) (sources.File, error) {
			if p == name {
				return memFile{bytes.NewReader(data)}, nil
			}
			return memFile{bytes.NewReader(goodBytes)}, nil
		}
		src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{name, "good.parquet"}, Open: open, Scalars: len(data)%2 == 0, BatchRows: 2})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			var r tableRows
			// A few bytes can be many rows (a long batch of no columns, runs
			// of nulls), as in valid files: read a bounded number.
			capped := drainAtMost(t, src, 20000, &r)
			var goodRows []string
			for _, d := range r.rows {
				if img, _ := d.Get("img"); img != nil {
					if s, ok := img.([]byte); ok && strings.HasPrefix(string(s), "img-10") {
						goodRows = append(goodRows, string(s))
					}
				}
			}
			r.release()
			if !capped && !slices.Equal(goodRows[max(len(goodRows)-3, 0):], want(100, 3)) {
				t.Errorf("good rows %v", goodRows)
			}
			for _, f := range r.failures {
				if !strings.HasPrefix(f, name+": ") {
					t.Errorf("failure %q does not name the file", f)
				}
			}
			if n := columnar.Allocator.AllocatedBytes(); n != 0 {
				t.Fatalf("%d bytes left allocated", n)
			}
		}
	})
}

// drainAtMost reads an epoch of src into r, up to n items; it reports
// whether it stopped there.
func drainAtMost(t *testing.T, src pipeline.Source, n int, r *tableRows) bool {
	t.Helper()
	it, err := src.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for range n {
		v, err := it.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return false
		}
		var f *pipeline.ItemFailure
		if errors.As(err, &f) {
			r.failures = append(r.failures, f.Error())
			continue
		}
		if err != nil {
			t.Fatalf("fatal error from the source: %v", err)
		}
		r.rows = append(r.rows, v.(*value.Dict))
	}
	return true
}
