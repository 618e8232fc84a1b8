package sources_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

// corruptCase damages a file written next to a good one; wantFail are
// the failures (prefixes, after the corrupt file's path) each epoch, and
// wantRows the corrupt file's rows still read.
type corruptCase struct {
	name      string
	ext       string
	write     func(t *testing.T, path string) // the file before the damage
	damage    func(t *testing.T, path string, b []byte) []byte
	noCRC     bool
	wantFail  []string
	wantRows  []string
	atListing bool // the file fails when listed, not when read
}

func flipAt(off ...int64) func(*testing.T, string, []byte) []byte {
	return func(_ *testing.T, _ string, b []byte) []byte {
		for _, o := range off {
			b[o] ^= 0xff
		}
		return b
	}
}

// dataPageOffset is where row group rg's column col starts its data pages.
func dataPageOffset(t *testing.T, path string, rg, col int) int64 {
	t.Helper()
	r, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cc, err := r.MetaData().RowGroup(rg).ColumnChunk(col)
	if err != nil {
		t.Fatal(err)
	}
	return cc.DataPageOffset()
}

func copyTestdata(name string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// le32 is the little-endian bytes of int32s.
func le32(xs ...int32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func TestTableSourceCorruptUnitsFailAlone(t *testing.T) {
	pq := func(t *testing.T, p string) { writeParquet(t, p, 0, 3, 3) }
	arw := func(t *testing.T, p string) { writeArrow(t, p, 0, 3, 3) }
	cases := []corruptCase{
		{name: "parquet truncated", ext: ".parquet", write: pq, atListing: true,
			damage:   func(_ *testing.T, _ string, b []byte) []byte { return b[:len(b)/2] },
			wantFail: []string{": not a readable Parquet file"}},
		{name: "parquet wrong magic", ext: ".parquet", write: pq, atListing: true,
			damage:   func(_ *testing.T, _ string, b []byte) []byte { copy(b[len(b)-4:], "PAR2"); return b },
			wantFail: []string{": not a readable Parquet file"}},
		{name: "parquet page header garbage", ext: ".parquet", write: pq,
			damage: func(t *testing.T, p string, b []byte) []byte {
				off := dataPageOffset(t, p, 1, 1)
				copy(b[off:], bytes.Repeat([]byte{0xff}, 12))
				return b
			},
			wantFail: []string{": row group 1: "}, wantRows: want(0, 3)},
		{name: "parquet page CRC v1 snappy", ext: ".parquet", write: copyTestdata("crc_v1.parquet"),
			damage: func(t *testing.T, p string, b []byte) []byte {
				r, _ := file.OpenParquetFile(p, false)
				defer r.Close()
				cc, _ := r.MetaData().RowGroup(1).ColumnChunk(1)
				b[cc.DataPageOffset()+cc.TotalCompressedSize()-3] ^= 0x01 // in the page's values
				return b
			},
			wantFail: []string{`: row group 1: column "label": page 0 at offset 362: CRC32 mismatch (stored `}, wantRows: want(0, 5)},
		{name: "parquet page CRC v2 zstd dictionary", ext: ".parquet", write: copyTestdata("crc_v2.parquet"),
			damage: func(t *testing.T, p string, b []byte) []byte {
				r, _ := file.OpenParquetFile(p, false)
				defer r.Close()
				cc, _ := r.MetaData().RowGroup(0).ColumnChunk(2)
				off := cc.DictionaryPageOffset()
				b[off+cc.TotalCompressedSize()-3] ^= 0x10 // the data page's last bytes
				return b
			},
			wantFail: []string{`: row group 0: column "text": page 1 at offset `}, wantRows: want(5, 5)},
		{name: "parquet page CRC off", ext: ".parquet", write: copyTestdata("crc_v1.parquet"), noCRC: true,
			damage: func(t *testing.T, p string, b []byte) []byte {
				off := dataPageOffset(t, p, 1, 0)
				i := bytes.Index(b[off:], []byte("\x11\t\x007")) // snappy: copy "img-", then "7"
				if i < 0 {
					t.Fatal("no img-7")
				}
				b[int(off)+i+3] = '9' // "img-9" for "img-7": undetected without CRCs
				return b
			},
			wantRows: []string{"img-0", "img-1", "img-2", "img-3", "img-4", "img-5", "img-6", "img-9", "img-8", "img-9"}},
		{name: "arrow truncated", ext: ".arrow", write: arw, atListing: true,
			damage:   func(_ *testing.T, _ string, b []byte) []byte { return b[:len(b)-100] },
			wantFail: []string{": not a readable Arrow IPC file"}},
		{name: "arrow wrong magic", ext: ".arrow", write: arw, atListing: true,
			damage:   func(_ *testing.T, _ string, b []byte) []byte { copy(b[len(b)-6:], "ARROW2"); return b },
			wantFail: []string{": not a readable Arrow IPC file"}},
		{name: "arrow footer schema flipped", ext: ".arrow", write: arw, atListing: true,
			damage:   flipAt(969), // a field's offset in the footer's schema: arrow-go panics
			wantFail: []string{": not a readable Arrow IPC file: corrupt footer"}},
		{name: "arrow footer batch count", ext: ".arrow", write: arw, atListing: true,
			damage:   flipAt(1007), // the block list's length: billions of record batches
			wantFail: []string{": not a readable Arrow IPC file: corrupt footer: a vector of 4278190082 elements"}},
		{name: "arrow record batch flipped", ext: ".arrow", write: arw,
			damage:   flipAt(610), // a buffer's offset in batch 1's metadata: arrow-go panics
			wantFail: []string{": record batch 1: corrupt data (the Arrow reader panicked: "}, wantRows: want(0, 3)},
		{name: "arrow binary offsets out of bounds", ext: ".arrow", write: arw,
			damage: func(t *testing.T, _ string, b []byte) []byte {
				i := bytes.LastIndex(b, le32(0, 5, 10, 15)) // batch 1's img offsets
				if i < 0 {
					t.Fatal("no offsets")
				}
				copy(b[i+12:], le32(1<<30))
				return b
			},
			wantFail: []string{`: record batch 1: arrow/ipc: error reading record batch: arrow/array: binary offsets out of bounds`}, wantRows: want(0, 3)},
		{name: "arrow string offsets decrease", ext: ".arrow", write: arw,
			damage: func(t *testing.T, _ string, b []byte) []byte {
				i := bytes.Index(b, le32(0, 2, 4, 6)) // batch 0's text offsets: t0 t1 t2
				if i < 0 {
					t.Fatal("no offsets")
				}
				copy(b[i+4:], le32(5))
				return b
			},
			wantFail: []string{`: record batch 0: column "text": offset 4 at 2 is below the one before (5)`}, wantRows: want(3, 3)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer columnar.Allocator.AssertSize(t, 0)
			dir := t.TempDir()
			good, bad := filepath.Join(dir, "good.parquet"), filepath.Join(dir, "bad"+c.ext)
			writeParquet(t, good, 100, 4, 4)
			c.write(t, bad)
			b, err := os.ReadFile(bad)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bad, c.damage(t, bad, b), 0o644); err != nil {
				t.Fatal(err)
			}
			src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{bad, good}, BatchRows: 2, NoChecksums: c.noCRC})
			if err != nil {
				t.Fatal(err)
			}
			for epoch := range 3 {
				r := readTable(t, src)
				got := r.imgs()
				r.release()
				if w := append(slices.Clone(c.wantRows), want(100, 8)...); !slices.Equal(got, w) {
					t.Errorf("epoch %d: rows %v, want %v", epoch, got, w)
				}
				if len(r.failures) != len(c.wantFail) {
					t.Fatalf("epoch %d: failures %q, want %q", epoch, r.failures, c.wantFail)
				}
				for i, w := range c.wantFail {
					if !strings.HasPrefix(r.failures[i], bad+w) {
						t.Errorf("epoch %d: failure %q, want prefix %q", epoch, r.failures[i], bad+w)
					}
					if strings.Contains(r.failures[i], "goroutine ") {
						t.Errorf("a Go stack in %q", r.failures[i])
					}
				}
				columnar.Allocator.AssertSize(t, 0)
			}
		})
	}
}

// TestTableSourceSurvivesEveryByteFlip flips each byte of a Parquet and an
// Arrow IPC file in turn: whatever the damage, the good file next to it is
// read whole, every failure names the damaged file, text reaching Go
// scalars is UTF-8, and no memory is left allocated.
func TestTableSourceSurvivesEveryByteFlip(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeParquet(t, good, 100, 3)
	for _, ext := range []string{".arrow", ".parquet"} {
		orig := filepath.Join(dir, "orig"+ext)
		if ext == ".arrow" {
			writeArrow(t, orig, 0, 3, 3)
		} else {
			writeParquet(t, orig, 0, 3, 3)
		}
		b, err := os.ReadFile(orig)
		if err != nil {
			t.Fatal(err)
		}
		step := 1
		if testing.Short() || raceEnabled { // every 7th byte: about 5 s under -race
			step = 7
		}
		bad := filepath.Join(dir, "bad"+ext)
		for i := 0; i < len(b); i += step {
			c := bytes.Clone(b)
			c[i] ^= 0xff
			if err := os.WriteFile(bad, c, 0o644); err != nil {
				t.Fatal(err)
			}
			src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{bad, good}, Scalars: i%2 == 0, BatchRows: 2})
			if err != nil {
				t.Fatalf("flip %d: %v", i, err)
			}
			for range 2 {
				r := readTable(t, src)
				var goodRows []string
				for _, d := range r.rows {
					for _, k := range d.Keys {
						if !utf8.ValidString(k) {
							t.Errorf("%s flip %d: column name %q is not UTF-8", ext, i, k)
						}
					}
					for _, v := range d.Values {
						if s, ok := v.(string); ok && !utf8.ValidString(s) {
							t.Errorf("%s flip %d: text %q is not UTF-8", ext, i, s)
						}
					}
					if img, _ := d.Get("img"); img != nil && strings.HasPrefix(string(img.([]byte)), "img-10") {
						goodRows = append(goodRows, string(img.([]byte)))
					}
				}
				r.release()
				if !slices.Equal(goodRows, want(100, 3)) {
					t.Errorf("%s flip %d: good rows %v", ext, i, goodRows)
				}
				for _, f := range r.failures {
					if !strings.HasPrefix(f, bad+": ") {
						t.Errorf("%s flip %d: failure %q does not name the file", ext, i, f)
					}
				}
				if n := columnar.Allocator.AllocatedBytes(); n != 0 {
					t.Fatalf("%s flip %d: %d bytes left allocated", ext, i, n)
				}
			}
		}
	}
}

// TestTableSourceTextMustBeUTF8 fails the row whose text is not UTF-8,
// as a scalar or as an Arrow slice (which pyarrow would fail to decode far
// from the file), naming file, row group, row and column.
func TestTableSourceTextMustBeUTF8(t *testing.T) {
	defer columnar.Allocator.AssertSize(t, 0)
	dir := t.TempDir()
	for _, ext := range []string{".parquet", ".arrow"} {
		p := filepath.Join(dir, "u"+ext)
		sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "text", Type: arrow.BinaryTypes.String}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		for i, s := range []string{"ok", "a\xffb", "fine"} {
			b.Field(0).(*array.Int64Builder).Append(int64(i))
			b.Field(1).(*array.StringBuilder).Append(s)
		}
		rec := b.NewRecordBatch()
		b.Release()
		writeRecord(t, p, sc, rec)
		rec.Release()
		for _, scalars := range []bool{true, false} {
			src, err := sources.NewTableSource(sources.TableOptions{Paths: []string{p}, Scalars: scalars})
			if err != nil {
				t.Fatal(err)
			}
			rows, failures := drainSource(t, src)
			var ids []string
			for _, d := range rows {
				id, _ := d.Get("id")
				ids = append(ids, value.Describe(id))
				value.Release(d)
			}
			part := "row group 0"
			if ext == ".arrow" {
				part = "record batch 0"
			}
			w := fmt.Sprintf(`%s: %s: row 1: column "text": text is not valid UTF-8 (byte 1 of 3)`, p, part)
			if !slices.Equal(failures, []string{w}) || (scalars && !slices.Equal(ids, []string{"0", "2"})) || len(rows) != 2 {
				t.Errorf("%s scalars=%v: rows %v failures %q, want %q", ext, scalars, ids, failures, w)
			}
		}
	}
}

func writeRecord(t *testing.T, p string, sc *arrow.Schema, rec arrow.RecordBatch) {
	t.Helper()
	writeBatches(t, p, sc, rec)
}
