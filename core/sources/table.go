package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/value"
)

// TableOptions configures a source over Parquet or Arrow IPC files.
type TableOptions struct {
	// Paths are the files: ".parquet" or ".pq" for Parquet; ".arrow",
	// ".feather" or ".ipc" for the Arrow IPC file format.
	Paths []string
	// Columns to read; empty reads every column.
	Columns []string
	// Scalars turns non-binary values into Go scalars (int64, float64,
	// bool, string, nil) instead of 1-row Arrow slices. Slices reach
	// batches without a copy (collate joins consecutive slices of one
	// record batch by reference); scalars suit Python stages that read
	// each row.
	Scalars bool
	// Sampling deals the files' row groups (Parquet) or record batches
	// (Arrow) to ranks as the sampler deals samples (World < 1 means 1);
	// rows within one are read in order. Sampling.Epoch is the first
	// epoch's number; each Open begins the next.
	Sampling sampler.Options
	// ShuffleBuffer > 0 also shuffles rows through a buffer this large.
	ShuffleBuffer int
	// BatchRows is how many Parquet rows are decoded at a time (default 4096).
	BatchRows int64
	// Open opens a file for random access; nil opens local files.
	Open func(ctx context.Context, name string) (File, error)
	// WithIndex gives each row "__index__": SampleID(part, its row number
	// in the part), for checkpoints (StreamResume); parts are numbered in
	// the order the files' row groups or batches are listed.
	WithIndex bool
	// Resume, if set, makes the first epoch (Resume.Epoch) skip the rows
	// it lists.
	Resume *StreamResume
	// NoChecksums skips the check of Parquet page CRCs. By default a
	// row group whose pages carry CRCs (written with page checksums) is
	// checked before it is decoded, and one that does not match fails as
	// one item.
	NoChecksums bool
}

// File is what the readers need of an opened table file: *os.File, or a
// remote object read with range requests (core/storage).
type File interface {
	io.ReaderAt
	io.ReadSeeker
	io.Closer
}

// part is one row group or record batch, or a file that cannot be read
// (err set), which fails as one item when its turn comes.
type part struct {
	file  int
	index int
	rows  int64
	err   error
}

// TableSource is a pipeline.Source over the rows of Parquet and Arrow IPC
// files: each row is a dict of the selected columns. Binary columns
// (image bytes) become []byte; other columns become 1-row Arrow slices
// (or scalars, see TableOptions.Scalars). The files' footers are read
// when the source is made; a file that cannot be read, or lacks a selected
// column, fails as one item per epoch, naming it, and the rest is read.
type TableSource struct {
	o     TableOptions
	meta  []*metadata.FileMetaData // Parquet footers by file, read once
	parts []part
	rows  int64
	units *unitEpochs
}

type tableFormat int

const (
	formatParquet tableFormat = iota
	formatArrow
)

func formatOf(path string) (tableFormat, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".parquet", ".pq":
		return formatParquet, nil
	case ".arrow", ".feather", ".ipc":
		return formatArrow, nil
	}
	return 0, fmt.Errorf("table: %s: unknown format; want a .parquet/.pq or .arrow/.feather/.ipc file", path)
}

// NewTableSource reads the files' footers and plans their parts.
func NewTableSource(o TableOptions) (*TableSource, error) {
	if len(o.Paths) == 0 {
		return nil, errors.New("table: no files")
	}
	if o.BatchRows <= 0 {
		o.BatchRows = 4096
	}
	if o.ShuffleBuffer < 0 {
		return nil, fmt.Errorf("table: shuffle buffer must be >= 0, got %d", o.ShuffleBuffer)
	}
	if o.Open == nil {
		o.Open = func(_ context.Context, name string) (File, error) { return os.Open(name) }
	}
	s := &TableSource{o: o, meta: make([]*metadata.FileMetaData, len(o.Paths))}
	good := 0
	for i, p := range o.Paths {
		f, err := formatOf(p)
		if err != nil {
			return nil, err
		}
		counts, err := s.partRows(f, i)
		if err != nil {
			s.parts = append(s.parts, part{file: i, err: noEOF(err)})
			continue
		}
		for j, n := range counts {
			s.parts = append(s.parts, part{file: i, index: j, rows: n})
			s.rows += max(n, 0)
		}
		good++
	}
	if good == 0 {
		return nil, fmt.Errorf("table: no file could be read; the first: %w", s.parts[0].err)
	}
	cfg := o.Sampling.Config(int64(len(s.parts)))
	cfg.World = max(cfg.World, 1)
	units, err := newUnitEpochs(cfg, o.Sampling.Epoch, o.Resume, o.ShuffleBuffer)
	if err != nil {
		return nil, fmt.Errorf("table: %d parts: %w", len(s.parts), err)
	}
	s.units = units
	for i, p := range s.parts {
		if p.err == nil && p.rows >= 0 { // Parquet footers give row counts
			s.units.sizes.set(int64(i), p.rows)
		}
	}
	return s, nil
}

// UnitSizes are the row counts of the parts known so far (from Parquet
// footers, or Arrow record batches read to their end), by part index: a
// checkpoint keeps them (StreamResume.Sizes) so that a resumed epoch does
// not read parts it consumed whole.
func (s *TableSource) UnitSizes() map[int64]int64 { return s.units.sizes.snapshot() }

// SourceState is what a checkpoint needs of the source (pipeline.StateReporter).
func (s *TableSource) SourceState() any { return streamState{Sizes: s.UnitSizes()} }

// OpStats counts the parts (row groups, record batches) opened, the
// Parquet bytes read and the time spent waiting for them, and what a
// resumed epoch skipped (pipeline.OpStatsReporter).
func (s *TableSource) OpStats() map[string]int64 { return s.units.opStats("parts") }

// Rows is the number of rows in the readable Parquet files, all ranks
// together (Arrow IPC footers do not record row counts).
func (s *TableSource) Rows() int64 { return s.rows }

// partRows opens file i and returns its parts' row counts, checking that
// the selected columns exist. A Parquet footer is kept for the epochs.
func (s *TableSource) partRows(f tableFormat, i int) ([]int64, error) {
	t, err := openTable(context.Background(), s.o.Open, f, s.o.Paths[i], nil)
	if err != nil {
		return nil, err
	}
	defer t.close()
	var rows []int64
	err = guard(t.alloc, func() (err error) {
		if _, err := t.columns(s.o.Columns); err != nil {
			return err
		}
		if t.pqFile != nil {
			s.meta[i] = t.pqFile.MetaData()
		}
		rows, err = t.partRows()
		return err
	})
	return rows, err
}

// Open begins the next epoch.
func (s *TableSource) Open(context.Context) (pipeline.Iterator, error) {
	pl, skip, shuf, err := s.units.next()
	if err != nil {
		return nil, err
	}
	return &tableIter{s: s, plan: pl, file: -1, skip: skip, shuf: shuf}, nil
}

type tableIter struct {
	s    *TableSource
	plan *sampler.Plan
	next int64 // the plan's next part

	file  int    // the open file's index, or -1
	t     *table // the open file
	cols  []int
	names []string

	rec  arrow.RecordBatch // the batch rows are being taken from
	row  int
	recs *recordIter // the rest of the current part

	ahead *aheadTable // the next part's file, opened ahead

	shuf *shuffler

	rg   int      // the part's row group (or record batch) in its file
	unit int64    // the part being read: its index in parts
	k    int64    // rows of the part taken so far
	skip *skipSet // a resumed epoch's consumed rows
}

func (it *tableIter) Next(ctx context.Context) (any, error) { return it.shuf.next(ctx, it.read) }

func (it *tableIter) read(ctx context.Context) (any, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if it.rec != nil && it.row < int(it.rec.NumRows()) {
			r, k := it.row, it.k
			it.row++
			it.k++
			if it.skip.has(it.unit, k) {
				it.s.units.samplesSkipped.Add(1)
				continue
			}
			d, err := rowDict(it.rec, it.names, r, it.s.o.Scalars)
			if err != nil {
				return nil, &pipeline.ItemFailure{Item: fmt.Sprintf("%s: row %d", it.recs.name, k), Err: err}
			}
			if it.s.o.WithIndex {
				d.Set("__index__", SampleID(it.unit, k))
			}
			return d, nil
		}
		if it.rec != nil {
			it.rec.Release()
			it.rec = nil
		}
		if it.recs != nil {
			rec, err := it.recs.next(ctx)
			if err == nil {
				it.rec, it.row = rec, 0
				continue
			}
			name := it.recs.name
			it.recs.close()
			it.recs = nil
			it.t.spans.drop(it.rg)
			if !errors.Is(err, io.EOF) {
				// A reader that failed may be in any state: the next
				// part opens the file afresh (and frees what this left).
				it.closeFile()
				return nil, &pipeline.ItemFailure{Item: name, Err: err}
			}
			it.s.units.sizes.set(it.unit, it.k)
		}
		if it.next >= it.plan.Len() {
			return nil, io.EOF
		}
		_, idx, _ := it.plan.At(it.next)
		it.next++
		if n, ok := it.skip.done(idx); ok {
			it.s.units.unitsSkipped.Add(1)
			it.s.units.samplesSkipped.Add(n)
			continue
		}
		p := it.s.parts[idx]
		it.unit, it.k = idx, 0
		path := it.s.o.Paths[p.file]
		if p.err != nil {
			return nil, &pipeline.ItemFailure{Item: path, Err: p.err}
		}
		if err := it.openFile(ctx, p.file); err != nil {
			return nil, &pipeline.ItemFailure{Item: path, Err: noEOF(err)}
		}
		it.rg = p.index
		it.s.units.io.units.Add(1)
		it.prefetch(ctx, p)
		recs, err := it.t.part(ctx, p.index, it.cols, it.s.o.BatchRows, !it.s.o.NoChecksums)
		if err != nil {
			name := it.t.partName(p.index)
			it.t.spans.drop(p.index)
			it.closeFile()
			return nil, &pipeline.ItemFailure{Item: name, Err: noEOF(err)}
		}
		it.recs = recs
	}
}

// prefetch starts fetching the Parquet row group p, and the plan's next
// part: in the same file, its row group; in another file, the file is
// opened and its row group fetched in a goroutine. So each row group is
// read in a few requests made at once while the rows before it are taken.
func (it *tableIter) prefetch(ctx context.Context, p part) {
	var leaves []int // none for Arrow IPC, or if the read is to report an error: no fetch
	if it.t.pq != nil {
		leaves, _ = it.t.leafColumns(it.cols)
	}
	fetch := func(q part) {
		if r, ok := chunkRanges(it.s.meta[q.file], q.index, leaves); ok {
			it.t.spans.fetch(q.index, r)
		}
	}
	fetch(p)
	if it.next >= it.plan.Len() {
		return
	}
	_, idx, _ := it.plan.At(it.next)
	if _, whole := it.skip.done(idx); whole {
		return
	}
	q := it.s.parts[idx]
	switch {
	case q.err != nil:
	case q.file == p.file:
		fetch(q)
	case it.ahead == nil || it.ahead.file != q.file:
		it.dropAhead()
		a := &aheadTable{file: q.file, done: make(chan struct{})}
		it.ahead = a
		go func() { // owned by it: dropAhead and openFile wait for it
			defer close(a.done)
			a.ot, a.err = it.s.open(ctx, q.file)
			if a.err != nil || a.ot.t.pq == nil {
				return
			}
			if leaves, err := a.ot.t.leafColumns(a.ot.cols); err == nil {
				if r, ok := chunkRanges(it.s.meta[q.file], q.index, leaves); ok {
					a.ot.t.spans.fetch(q.index, r)
				}
			}
		}()
	}
}

// aheadTable is a file opened before its turn, in a goroutine.
type aheadTable struct {
	file int
	done chan struct{} // closed when ot or err is set
	ot   *openedTable
	err  error
}

// dropAhead waits for the file opened ahead, if any, and closes it.
func (it *tableIter) dropAhead() {
	if a := it.ahead; a != nil {
		it.ahead = nil
		<-a.done
		if a.ot != nil {
			a.ot.t.close()
		}
	}
}

// openedTable is a file opened for reading with its selected columns.
type openedTable struct {
	t     *table
	cols  []int
	names []string
}

// open opens file i, its reads counted in the source's stats.
func (s *TableSource) open(ctx context.Context, i int) (*openedTable, error) {
	path := s.o.Paths[i]
	f, _ := formatOf(path)
	t, err := openTable(ctx, s.o.Open, f, path, s.meta[i])
	if err != nil {
		return nil, err
	}
	t.spans.stats = &s.units.io
	cols, err := t.columns(s.o.Columns)
	if err != nil {
		t.close()
		return nil, err
	}
	return &openedTable{t: t, cols: cols, names: t.names(cols)}, nil
}

func (it *tableIter) openFile(ctx context.Context, i int) error {
	if it.file == i {
		return nil
	}
	it.closeFile()
	var ot *openedTable
	if a := it.ahead; a != nil && a.file == i {
		it.ahead = nil
		<-a.done // ends soon if ctx is cancelled: the open uses it
		if a.err != nil {
			return a.err
		}
		ot = a.ot
	} else {
		it.dropAhead()
		var err error
		if ot, err = it.s.open(ctx, i); err != nil {
			return err
		}
	}
	it.file, it.t, it.cols, it.names = i, ot.t, ot.cols, ot.names
	return nil
}

func (it *tableIter) closeFile() {
	if it.recs != nil {
		it.recs.close()
		it.recs = nil
	}
	if it.t != nil {
		it.t.close()
	}
	it.file, it.t = -1, nil
}

func (it *tableIter) Close() error {
	if it.rec != nil {
		it.rec.Release()
		it.rec = nil
	}
	it.closeFile()
	it.dropAhead()
	it.shuf.drop(value.Release)
	return nil
}

// rowDict makes row i of rec (the selected columns, in order) a dict; a
// cell that cannot be converted (text that is not UTF-8) fails the row.
func rowDict(rec arrow.RecordBatch, names []string, i int, scalars bool) (d *value.Dict, err error) {
	d = value.NewDict(len(names))
	k := 0
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt data (the Arrow reader panicked: %v)", r)
		}
		if err != nil {
			value.Release(d)
			d, err = nil, fmt.Errorf("column %q: %w", names[k], err)
		}
	}()
	for ; k < len(names); k++ {
		v, err := cell(rec.Column(k), i, scalars)
		if err != nil {
			return d, err
		}
		d.Set(names[k], v)
	}
	return d, nil
}

func cell(a arrow.Array, i int, scalars bool) (any, error) {
	if b, ok := a.(array.BinaryLike); ok && isBinary(a.DataType()) {
		if a.IsNull(i) {
			return nil, nil
		}
		return slices.Clone(b.ValueBytes()[b.ValueOffset64(i) : b.ValueOffset64(i)+int64(b.ValueLen(i))]), nil
	}
	if fb, ok := a.(*array.FixedSizeBinary); ok {
		if a.IsNull(i) {
			return nil, nil
		}
		return slices.Clone(fb.Value(i)), nil
	}
	if scalars {
		if v, ok, err := scalar(a, i); ok || err != nil {
			return v, err
		}
	}
	if err := validText(a, i); err != nil {
		// A consumer decoding it (pyarrow's to_pylist) would fail far
		// from the file.
		return nil, err
	}
	return array.NewSlice(a, int64(i), int64(i)+1), nil
}

// validText checks that cell i of a text column is UTF-8.
func validText(a arrow.Array, i int) error {
	var v string
	switch x := a.(type) {
	case *array.String:
		v = x.Value(i)
	case *array.LargeString:
		v = x.Value(i)
	case *array.StringView:
		v = x.Value(i)
	default:
		return nil
	}
	if a.IsNull(i) {
		return nil
	}
	return utf8Err(v)
}

// utf8Err says where v stops being UTF-8, or returns nil.
func utf8Err(v string) error {
	if utf8.ValidString(v) {
		return nil
	}
	for j := 0; ; {
		r, n := utf8.DecodeRuneInString(v[j:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Errorf("text is not valid UTF-8 (byte %d of %d)", j, len(v))
		}
		j += n
	}
}

func isBinary(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.BINARY, arrow.LARGE_BINARY, arrow.BINARY_VIEW:
		return true
	}
	return false
}

// scalar converts a cell of a primitive column to a Go value; text must
// be UTF-8 (Python decodes it into a str).
func scalar(a arrow.Array, i int) (any, bool, error) {
	if a.IsNull(i) {
		return nil, true, nil
	}
	switch x := a.(type) {
	case *array.Int8:
		return int64(x.Value(i)), true, nil
	case *array.Int16:
		return int64(x.Value(i)), true, nil
	case *array.Int32:
		return int64(x.Value(i)), true, nil
	case *array.Int64:
		return x.Value(i), true, nil
	case *array.Uint8:
		return int64(x.Value(i)), true, nil
	case *array.Uint16:
		return int64(x.Value(i)), true, nil
	case *array.Uint32:
		return int64(x.Value(i)), true, nil
	case *array.Float32:
		return float64(x.Value(i)), true, nil
	case *array.Float64:
		return x.Value(i), true, nil
	case *array.Boolean:
		return x.Value(i), true, nil
	case *array.String: // Value aliases the batch's memory
		return text(x.Value(i))
	case *array.LargeString:
		return text(x.Value(i))
	}
	return nil, false, nil
}

func text(v string) (any, bool, error) {
	if err := utf8Err(v); err != nil {
		return nil, false, err
	}
	return strings.Clone(v), true, nil
}

// table is one open Parquet or Arrow IPC file.
type table struct {
	path   string
	f      File
	spans  *spanFile // f: reads through the row groups fetched ahead
	alloc  *tableAlloc
	pq     *pqarrow.FileReader
	pqFile *file.Reader
	ipc    *ipc.FileReader
	schema *arrow.Schema
}

// openTable opens a file; md, if known, is its Parquet footer (which is
// then not read again). A file whose footer or schema is corrupt is an
// error, never a panic.
func openTable(ctx context.Context, open func(context.Context, string) (File, error), format tableFormat, path string, md *metadata.FileMetaData) (*table, error) {
	f, err := open(ctx, path)
	if err != nil {
		return nil, err
	}
	// Reads go through spans: fetched ahead for Parquet, and counted.
	t := &table{path: path, spans: newSpanFile(f), alloc: newTableAlloc()}
	t.f = t.spans
	err = guard(t.alloc, func() error {
		switch format {
		case formatParquet:
			opts := []file.ReadOption{file.WithReadProps(parquet.NewReaderProperties(t.alloc))}
			if md != nil {
				opts = append(opts, file.WithMetadata(md))
			}
			pf, err := file.NewParquetReader(t.spans, opts...)
			if err != nil {
				return err
			}
			t.pqFile = pf
			if err := checkArrowSchemaMeta(pf.MetaData().KeyValueMetadata()); err != nil {
				return err
			}
			fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, t.alloc)
			if err != nil {
				return err
			}
			sc, err := fr.Schema()
			if err != nil {
				return fmt.Errorf("reading the schema: %w", err)
			}
			t.pq, t.schema = fr, sc
		case formatArrow:
			if err := checkArrowFooter(t.spans, t.spans); err != nil {
				return err
			}
			r, err := ipc.NewFileReader(t.f, ipc.WithAllocator(t.alloc))
			if err != nil {
				return err
			}
			t.ipc = r
			t.schema = r.Schema()
		}
		return checkNames(t.schema.Fields(), 0)
	})
	if err != nil {
		t.close()
		if format == formatArrow {
			return nil, fmt.Errorf("not a readable Arrow IPC file: %w", err)
		}
		return nil, fmt.Errorf("not a readable Parquet file: %w", err)
	}
	return t, nil
}

// close closes the readers and the file, then frees what failed reads
// left allocated.
func (t *table) close() {
	_ = guard(t.alloc, func() error {
		if t.ipc != nil {
			t.ipc.Close()
		}
		if t.pqFile != nil {
			t.pqFile.Close() // closes f too
			return nil
		}
		t.f.Close()
		return nil
	})
	t.alloc.freeLeft()
}

// columns maps names to the schema's field indices (all fields when
// names is empty).
func (t *table) columns(names []string) ([]int, error) {
	if len(names) == 0 {
		out := make([]int, t.schema.NumFields())
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	out := make([]int, len(names))
	for i, n := range names {
		idx := t.schema.FieldIndices(n)
		if len(idx) == 0 {
			have := make([]string, t.schema.NumFields())
			for j, f := range t.schema.Fields() {
				have[j] = f.Name
			}
			return nil, fmt.Errorf("no column %q (it has %s)", n, strings.Join(have, ", "))
		}
		out[i] = idx[0]
	}
	return out, nil
}

func (t *table) names(cols []int) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = t.schema.Field(c).Name
	}
	return out
}

func (t *table) partRows() ([]int64, error) {
	if t.pq != nil {
		md := t.pqFile.MetaData()
		out := make([]int64, md.NumRowGroups())
		for i := range out {
			out[i] = md.RowGroup(i).NumRows()
		}
		return out, nil
	}
	// A footer's block list is 24 bytes a record batch: a corrupt length
	// must not plan billions of parts.
	n := t.ipc.NumRecords()
	size, err := t.spans.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	if n < 0 || int64(n)*24 > size {
		return nil, fmt.Errorf("not a readable Arrow IPC file: its footer lists %d record batches, more than its %d bytes can hold", n, size)
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = -1 // known once read
	}
	return out, nil
}

func (t *table) partName(i int) string {
	if t.pq != nil {
		return fmt.Sprintf("%s: row group %d", t.path, i)
	}
	return fmt.Sprintf("%s: record batch %d", t.path, i)
}

// part returns the record batches of part i, with the selected columns;
// verify checks a Parquet row group's page CRCs first.
func (t *table) part(ctx context.Context, i int, cols []int, batchRows int64, verify bool) (r *recordIter, err error) {
	r = &recordIter{name: t.partName(i), alloc: t.alloc}
	err = guard(t.alloc, func() error {
		if t.pq != nil {
			// Parquet column indices are leaf indices; map the top-level fields.
			leaves, err := t.leafColumns(cols)
			if err != nil {
				return err
			}
			if verify {
				if err := verifyRowGroup(quietReader{t.spans}, t.pqFile.MetaData(), i, leaves); err != nil {
					return err
				}
			}
			t.pq.Props.BatchSize = batchRows
			rr, err := t.pq.GetRecordReader(ctx, leaves, []int{i})
			if err != nil {
				return err
			}
			r.rr = rr
			r.project = t.projection(cols, rr.Schema())
			return nil
		}
		rec, err := t.ipc.RecordBatchAt(i)
		if err != nil {
			return err
		}
		r.one, r.project = rec, cols
		return nil
	})
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// leafColumns lists the Parquet leaf columns under the selected fields.
func (t *table) leafColumns(cols []int) ([]int, error) {
	m := t.pq.Manifest
	var out []int
	for _, c := range cols {
		if c >= len(m.Fields) {
			return nil, fmt.Errorf("column %d is out of range", c)
		}
		out = append(out, leaves(&m.Fields[c])...)
	}
	return out, nil
}

func leaves(f *pqarrow.SchemaField) []int {
	if len(f.Children) == 0 {
		return []int{f.ColIndex}
	}
	var out []int
	for i := range f.Children {
		out = append(out, leaves(&f.Children[i])...)
	}
	return out
}

// projection maps the selected fields to their positions in the reader's
// schema (the reader keeps the file's field order).
func (t *table) projection(cols []int, sc *arrow.Schema) []int {
	out := make([]int, len(cols))
	for i, c := range cols {
		idx := sc.FieldIndices(t.schema.Field(c).Name)
		out[i] = idx[0]
	}
	return out
}

// recordIter yields the record batches of one part, with the selected
// columns in order.
type recordIter struct {
	name    string
	alloc   *tableAlloc
	rr      pqarrow.RecordReader
	project []int             // the selected columns' positions in the batches read
	one     arrow.RecordBatch // Arrow IPC: the part is one batch
}

// next returns the next batch, checked (validBatch); a reader's panic is
// an error.
func (r *recordIter) next(ctx context.Context) (out arrow.RecordBatch, err error) {
	err = guard(r.alloc, func() error {
		var err error
		out, err = r.read(ctx)
		if err != nil {
			return noEOF(err)
		}
		if err := validBatch(out); err != nil {
			out.Release()
			out = nil
			return err
		}
		return nil
	})
	if err != nil && out != nil {
		out.Release() // a panic after the batch was made
		out = nil
	}
	return out, err
}

func (r *recordIter) read(ctx context.Context) (arrow.RecordBatch, error) {
	var rec arrow.RecordBatch
	if r.rr == nil {
		if r.one == nil {
			return nil, io.EOF
		}
		rec = r.one
		r.one = nil
		defer rec.Release() // the projection below holds what it keeps
	} else {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !r.rr.Next() {
			if err := r.rr.Err(); err != nil && err != io.EOF {
				return nil, err
			}
			return nil, io.EOF
		}
		rec = r.rr.RecordBatch() // the reader's until its next Next
	}
	cols := make([]arrow.Array, len(r.project))
	fields := make([]arrow.Field, len(r.project))
	for i, c := range r.project {
		cols[i], fields[i] = rec.Column(c), rec.Schema().Field(c)
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows()), nil
}

func (r *recordIter) close() {
	_ = guard(r.alloc, func() error {
		if r.rr != nil {
			r.rr.Release()
		}
		if r.one != nil {
			r.one.Release()
		}
		return nil
	})
	r.rr, r.one = nil, nil
}

func init() { Register("table", newTable) }

// newTable builds a Parquet / Arrow IPC source:
//
//	{"urls": ["*.parquet"], "columns": ["img", "label"], "scalars": false,
//	 "batch_rows": 4096, "shuffle_buffer": 0, "with_index": false,
//	 "verify_checksums": true,
//	 "sampling": {...}, "storage": {...}, "stream_resume": {...}}
func newTable(m map[string]any) (pipeline.Source, error) {
	r := options.New(m)
	st, err := readStream(r)
	if err != nil {
		return nil, err
	}
	o := TableOptions{Sampling: st.sampling, ShuffleBuffer: st.shuffleBuffer, WithIndex: st.withIndex, Resume: st.resume}
	if o.Columns, err = r.Strings("columns"); err != nil {
		return nil, err
	}
	if o.Scalars, err = r.Bool("scalars", false); err != nil {
		return nil, err
	}
	if o.BatchRows, err = r.Int("batch_rows", 0); err != nil {
		return nil, err
	}
	verify, err := r.Bool("verify_checksums", true)
	if err != nil {
		return nil, err
	}
	o.NoChecksums = !verify
	if err := r.Done(); err != nil {
		return nil, err
	}
	paths, client, err := st.resolve()
	if err != nil {
		return nil, err
	}
	o.Paths = paths
	o.Open = func(ctx context.Context, name string) (File, error) { return client.OpenFile(ctx, name) }
	return NewTableSource(o)
}
