package sources

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// Parquet page checksums. A writer may store in each PageHeader the CRC32
// (IEEE, as gzip) of the page's bytes as written, after the header.
// arrow-go does not check them, so a flipped bit in a column chunk would
// reach the user as a wrong value; verifyRowGroup walks the pages of the
// selected column chunks before the reader decodes them. The walk reads
// through the file's spans, which the row group's prefetch has usually
// filled already.

// errStopWalk ends a walk without an error: the headers are not ones this
// walk understands (the reader decides), or the chunk has no checksums.
var errStopWalk = errors.New("stop")

// verifyRowGroup checks the page CRCs of row group rg's leaf columns.
func verifyRowGroup(f io.ReaderAt, md *metadata.FileMetaData, rg int, leaves []int) error {
	if md == nil || rg < 0 || rg >= md.NumRowGroups() {
		return nil
	}
	rgm := md.RowGroup(rg)
	for _, leaf := range leaves {
		cc, err := rgm.ColumnChunk(leaf)
		if err != nil || cc.CryptoMetadata() != nil {
			continue // the reader reports it; encrypted pages are not ours to check
		}
		start := cc.DataPageOffset()
		if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && start > cc.DictionaryPageOffset() {
			start = cc.DictionaryPageOffset()
		}
		if err := verifyChunk(f, start, cc.TotalCompressedSize()); err != nil {
			name := md.Schema.Column(leaf).Path()
			return fmt.Errorf("column %q: %w", name, err)
		}
	}
	return nil
}

// verifyChunk walks the pages in [start, start+size). A column chunk whose
// first page has no CRC is taken to have none (writers set them on every
// page or on none), which keeps files without checksums at one header
// read per chunk.
func verifyChunk(f io.ReaderAt, start, size int64) error {
	if start < 0 || size <= 0 {
		return nil
	}
	end := start + size
	buf := make([]byte, 64<<10)
	for page, off := 0, start; off < end; page++ {
		br := &countReader{r: bufio.NewReaderSize(io.NewSectionReader(f, off, end-off), 4096)}
		h, err := readPageHeader(br)
		if err != nil {
			return nil // a header the reader will report on, or a writer's padding
		}
		data := off + br.n
		if h.compressed < 0 || data+int64(h.compressed) > end {
			return nil
		}
		if !h.hasCRC {
			if page == 0 {
				return nil
			}
		} else {
			sum := crc32.NewIEEE()
			if _, err := io.CopyBuffer(sum, io.NewSectionReader(f, data, int64(h.compressed)), buf); err != nil {
				return nil // unreadable here: the reader reads it, retrying, and reports
			}
			if got := sum.Sum32(); got != uint32(h.crc) {
				return fmt.Errorf("page %d at offset %d: CRC32 mismatch (stored %#08x, computed %#08x)", page, off, uint32(h.crc), got)
			}
		}
		off = data + int64(h.compressed)
	}
	return nil
}

type pageHeader struct {
	typ, uncompressed, compressed, crc int32
	hasCRC                             bool
}

// countReader counts the bytes a Thrift header took.
type countReader struct {
	r *bufio.Reader
	n int64
}

func (c *countReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

func (c *countReader) discard(n uint64) error {
	if n > 1<<30 {
		return errStopWalk
	}
	k, err := c.r.Discard(int(n))
	c.n += int64(k)
	return err
}

// Thrift compact protocol types.
const (
	ctStop   = 0
	ctTrue   = 1
	ctFalse  = 2
	ctByte   = 3
	ctI16    = 4
	ctI32    = 5
	ctI64    = 6
	ctDouble = 7
	ctBinary = 8
	ctList   = 9
	ctSet    = 10
	ctMap    = 11
	ctStruct = 12
)

// readPageHeader parses a Parquet PageHeader (Thrift compact protocol):
// fields 1-4 (type, sizes, crc), the rest skipped.
func readPageHeader(r *countReader) (pageHeader, error) {
	var h pageHeader
	var seen uint8
	last := int16(0)
	for {
		b, err := r.ReadByte()
		if err != nil {
			return h, err
		}
		typ := b & 0x0f
		if typ == ctStop {
			break
		}
		id := last + int16(b>>4)
		if b>>4 == 0 {
			v, err := readVarint(r)
			if err != nil {
				return h, err
			}
			id = int16(unzigzag(v))
		}
		last = id
		if id >= 1 && id <= 4 && typ == ctI32 {
			v, err := readVarint(r)
			if err != nil {
				return h, err
			}
			x := int32(unzigzag(v))
			switch id {
			case 1:
				h.typ = x
			case 2:
				h.uncompressed = x
			case 3:
				h.compressed = x
			case 4:
				h.crc, h.hasCRC = x, true
			}
			seen |= 1 << id
			continue
		}
		if err := skipThrift(r, typ, 0); err != nil {
			return h, err
		}
	}
	if seen&0b1110 != 0b1110 {
		return h, errStopWalk // type and both sizes are required
	}
	return h, nil
}

func readVarint(r *countReader) (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errStopWalk
}

func unzigzag(v uint64) int64 { return int64(v>>1) ^ -int64(v&1) }

// skipThrift skips a value of compact type typ.
func skipThrift(r *countReader, typ byte, depth int) error {
	if depth > 32 {
		return errStopWalk
	}
	switch typ {
	case ctTrue, ctFalse:
		return nil
	case ctByte:
		_, err := r.ReadByte()
		return err
	case ctI16, ctI32, ctI64:
		_, err := readVarint(r)
		return err
	case ctDouble:
		return r.discard(8)
	case ctBinary:
		n, err := readVarint(r)
		if err != nil {
			return err
		}
		return r.discard(n)
	case ctList, ctSet:
		b, err := r.ReadByte()
		if err != nil {
			return err
		}
		n, et := uint64(b>>4), b&0x0f
		if n == 15 {
			if n, err = readVarint(r); err != nil {
				return err
			}
		}
		return skipN(r, n, depth, et)
	case ctMap:
		n, err := readVarint(r)
		if err != nil || n == 0 {
			return err
		}
		b, err := r.ReadByte()
		if err != nil {
			return err
		}
		if n > 1<<30 {
			return errStopWalk
		}
		for range n {
			if err := skipElem(r, b>>4, depth); err != nil {
				return err
			}
			if err := skipElem(r, b&0x0f, depth); err != nil {
				return err
			}
		}
		return nil
	case ctStruct:
		last := int16(0)
		for {
			b, err := r.ReadByte()
			if err != nil {
				return err
			}
			ft := b & 0x0f
			if ft == ctStop {
				return nil
			}
			if b>>4 == 0 {
				v, err := readVarint(r)
				if err != nil {
					return err
				}
				last = int16(unzigzag(v))
			} else {
				last += int16(b >> 4)
			}
			if err := skipThrift(r, ft, depth+1); err != nil {
				return err
			}
		}
	}
	return errStopWalk
}

// skipN skips n list elements of type et.
func skipN(r *countReader, n uint64, depth int, et byte) error {
	if n > 1<<30 {
		return errStopWalk
	}
	for range n {
		if err := skipElem(r, et, depth); err != nil {
			return err
		}
	}
	return nil
}

// skipElem skips one list, set or map element: booleans there are a byte
// each, so every element takes at least one byte and a crafted count
// costs no more work than the bytes it covers.
func skipElem(r *countReader, et byte, depth int) error {
	if et == ctTrue || et == ctFalse {
		_, err := r.ReadByte()
		return err
	}
	return skipThrift(r, et, depth+1)
}

// quietReader reads through the spans without counting the reads in the
// source's stats (the reader counts the same bytes when it decodes them),
// except those that go to the file: a row group too large to fetch ahead
// is walked from the file (one small read per column chunk without CRCs).
// Where the fetch failed the walk stops rather than add requests to the
// reader's retry, which then reports the failure.
type quietReader struct{ f *spanFile }

func (q quietReader) ReadAt(p []byte, off int64) (int, error) {
	if s := q.f.find(off, len(p)); s != nil {
		<-s.done
		if s.err != nil {
			return 0, s.err
		}
		return copy(p, s.b[off-s.off:]), nil
	}
	if q.f.stats != nil {
		q.f.stats.bytes.Add(int64(len(p)))
	}
	return q.f.File.ReadAt(p, off)
}
