package sources_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

var tableSchema = arrow.NewSchema([]arrow.Field{
	{Name: "img", Type: arrow.BinaryTypes.Binary},
	{Name: "label", Type: arrow.PrimitiveTypes.Int64},
	{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// records makes batches of rows first, first+1, ...: img "img-<i>",
// label i%10, text "t<i>" (null when i%7 == 3).
func records(first int, sizes ...int) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	for _, n := range sizes {
		b := array.NewRecordBuilder(memory.DefaultAllocator, tableSchema)
		for i := first; i < first+n; i++ {
			b.Field(0).(*array.BinaryBuilder).Append([]byte(fmt.Sprintf("img-%d", i)))
			b.Field(1).(*array.Int64Builder).Append(int64(i % 10))
			if i%7 == 3 {
				b.Field(2).AppendNull()
			} else {
				b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("t%d", i))
			}
		}
		out = append(out, b.NewRecordBatch())
		b.Release()
		first += n
	}
	return out
}

// writeParquet writes rows as row groups of the given sizes.
func writeParquet(t *testing.T, path string, first int, sizes ...int) {
	t.Helper()
	if isArrowPath(path) {
		t.Fatalf("writeParquet: %s is named as an Arrow IPC file", path)
	}
	writeTableTB(t, path, first, sizes...)
}

// writeArrow writes rows as record batches of the given sizes.
func writeArrow(t *testing.T, path string, first int, sizes ...int) {
	t.Helper()
	if !isArrowPath(path) {
		t.Fatalf("writeArrow: %s is not named as an Arrow IPC file", path)
	}
	writeTableTB(t, path, first, sizes...)
}

type tableRows struct {
	rows     []*value.Dict
	failures []string
}

func readTable(t *testing.T, src *sources.TableSource) tableRows {
	t.Helper()
	var r tableRows
	r.rows, r.failures = drainSource(t, src)
	return r
}

func (r tableRows) release() {
	for _, d := range r.rows {
		value.Release(d)
	}
}

// imgs returns the img fields' text.
func (r tableRows) imgs() []string {
	var out []string
	for _, d := range r.rows {
		v, _ := d.Get("img")
		out = append(out, string(v.([]byte)))
	}
	return out
}

func want(first, n int) []string {
	var out []string
	for i := first; i < first+n; i++ {
		out = append(out, fmt.Sprintf("img-%d", i))
	}
	return out
}

func TestTableSourceReadsParquetAndArrow(t *testing.T) {
	defer columnar.Allocator.AssertSize(t, 0)
	dir := t.TempDir()
	pq, arw := filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.arrow")
	writeParquet(t, pq, 0, 5, 4)
	writeArrow(t, arw, 9, 3, 3)
	src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{pq, arw}, BatchRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := readTable(t, src)
	defer r.release()
	if len(r.failures) > 0 {
		t.Fatal(r.failures)
	}
	if got := r.imgs(); !slices.Equal(got, want(0, 15)) {
		t.Fatalf("rows %v", got)
	}
	// Non-binary columns are 1-row Arrow slices; nulls stay nulls.
	for _, i := range []int{2, 3, 10} {
		lbl, _ := r.rows[i].Get("label")
		txt, _ := r.rows[i].Get("text")
		l, s := lbl.(*array.Int64), txt.(*array.String)
		if l.Len() != 1 || l.Value(0) != int64(i%10) {
			t.Errorf("row %d label %v", i, l)
		}
		if (i%7 == 3) != s.IsNull(0) || (!s.IsNull(0) && s.Value(0) != fmt.Sprintf("t%d", i)) {
			t.Errorf("row %d text %v", i, s)
		}
	}
	if src.Rows() != 9 { // Arrow record batch sizes are known only once read
		t.Errorf("Rows() = %d", src.Rows())
	}
}

func TestTableSourceScalarsAndColumns(t *testing.T) {
	defer columnar.Allocator.AssertSize(t, 0)
	pq := filepath.Join(t.TempDir(), "a.pq")
	writeParquet(t, pq, 0, 4)
	src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{pq}, Columns: []string{"text", "label"}, Scalars: true})
	if err != nil {
		t.Fatal(err)
	}
	r := readTable(t, src)
	defer r.release()
	var got []string
	for _, d := range r.rows {
		got = append(got, value.Describe(d))
	}
	if w := []string{`{"text": "t0", "label": 0}`, `{"text": "t1", "label": 1}`, `{"text": "t2", "label": 2}`, `{"text": None, "label": 3}`}; !slices.Equal(got, w) {
		t.Errorf("rows %v", got)
	}
}

func TestTableSourceBadFilesFailAlone(t *testing.T) {
	defer columnar.Allocator.AssertSize(t, 0)
	dir := t.TempDir()
	good, noCol, corrupt, missing := filepath.Join(dir, "good.parquet"), filepath.Join(dir, "nocol.parquet"),
		filepath.Join(dir, "corrupt.parquet"), filepath.Join(dir, "missing.arrow")
	writeParquet(t, good, 0, 3)
	// A file without the "label" column.
	sc := arrow.NewSchema([]arrow.Field{{Name: "img", Type: arrow.BinaryTypes.Binary}}, nil)
	f, _ := os.Create(noCol)
	w, _ := pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	b.Field(0).(*array.BinaryBuilder).Append([]byte("x"))
	rec := b.NewRecordBatch()
	w.Write(rec)
	rec.Release()
	b.Release()
	w.Close()
	os.WriteFile(corrupt, []byte("PAR1 this is not parquet PAR1"), 0o644)
	src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{good, noCol, corrupt, missing}, Columns: []string{"img", "label"}})
	if err != nil {
		t.Fatal(err)
	}
	for epoch := range 2 { // failures repeat every epoch
		r := readTable(t, src)
		if got := r.imgs(); !slices.Equal(got, want(0, 3)) {
			t.Errorf("epoch %d rows %v", epoch, got)
		}
		r.release()
		wantF := []string{
			noCol + `: no column "label" (it has img)`,
			corrupt + ": not a readable Parquet file",
			missing + ": open " + missing + ": no such file or directory",
		}
		if len(r.failures) != 3 {
			t.Fatalf("failures %q", r.failures)
		}
		for i, w := range wantF {
			if !strings.HasPrefix(r.failures[i], w) {
				t.Errorf("failure %d = %q, want prefix %q", i, r.failures[i], w)
			}
		}
	}
	if _, err := sources.NewTableSource(sources.TableOptions{Paths: []string{missing}}); err == nil || !strings.Contains(err.Error(), "no file could be read") {
		t.Errorf("only bad files: %v", err)
	}
	if _, err := sources.NewTableSource(sources.TableOptions{Paths: []string{filepath.Join(dir, "x.csv")}}); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("csv: %v", err)
	}
}

func TestTableSourceSplitsPartsOverRanks(t *testing.T) {
	defer columnar.Allocator.AssertSize(t, 0)
	dir := t.TempDir()
	var paths []string
	for i := range 2 {
		p := filepath.Join(dir, fmt.Sprintf("p%d.parquet", i))
		writeParquet(t, p, i*12, 3, 3, 3, 3)
		paths = append(paths, p)
	}
	var all []string
	for rank := range 4 {
		src, err := sources.NewTableSource(sources.TableOptions{Paths: paths, Sampling: sampler.Options{Shuffle: true, Seed: 9, World: 4, Rank: rank}, ShuffleBuffer: 4})
		if err != nil {
			t.Fatal(err)
		}
		r := readTable(t, src)
		if len(r.rows) != 6 {
			t.Errorf("rank %d read %d rows", rank, len(r.rows))
		}
		all = append(all, r.imgs()...)
		r.release()
	}
	slices.Sort(all)
	w := want(0, 24)
	slices.Sort(w)
	if !slices.Equal(all, w) {
		t.Errorf("ranks together read %v", all)
	}
}
