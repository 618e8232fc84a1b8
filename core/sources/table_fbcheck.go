package sources

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// An Arrow IPC file's footer is a flatbuffer that arrow-go reads without
// checking: a corrupt vector length there makes it allocate Go slices of
// that length (a fatal out-of-memory, not a panic that can be recovered).
// checkArrowFooter walks the footer's tables and vectors first, checking
// that each lies inside the footer, as a flatbuffers verifier does.

type fbKind uint8

const (
	fbScalar    fbKind = iota // size bytes inline
	fbString                  // offset to a string
	fbTable                   // offset to a table of layout sub
	fbTableVec                // offset to a vector of tables of layout sub
	fbScalarVec               // offset to a vector of size-byte elements
	fbUnion                   // offset to a table whose layout the previous field's type picks
)

type fbField struct {
	kind fbKind
	size int
	sub  *fbLayout
	pick func(typ byte) *fbLayout // fbUnion: the layout for its type
}

type fbLayout struct{ fields []fbField }

var (
	fbKeyValue = &fbLayout{[]fbField{{kind: fbString}, {kind: fbString}}}
	fbInt      = &fbLayout{[]fbField{{kind: fbScalar, size: 4}, {kind: fbScalar, size: 1}}}
	fbDictEnc  = &fbLayout{[]fbField{{kind: fbScalar, size: 8}, {kind: fbTable, sub: fbInt}, {kind: fbScalar, size: 1}, {kind: fbScalar, size: 2}}}
	fbFieldL   = &fbLayout{} // Field, filled in init (it nests)
	fbSchema   = &fbLayout{[]fbField{{kind: fbScalar, size: 2}, {kind: fbTableVec, sub: fbFieldL}, {kind: fbTableVec, sub: fbKeyValue}, {kind: fbScalarVec, size: 8}}}
	fbFooter   = &fbLayout{[]fbField{{kind: fbScalar, size: 2}, {kind: fbTable, sub: fbSchema}, {kind: fbScalarVec, size: 24}, {kind: fbScalarVec, size: 24}, {kind: fbTableVec, sub: fbKeyValue}}}
	// Type union members: scalars only, but Timestamp's time zone (10)
	// and Union's type ids (14).
	fbScalars   = &fbLayout{}
	fbTimestamp = &fbLayout{[]fbField{{kind: fbScalar, size: 2}, {kind: fbString}}}
	fbUnionType = &fbLayout{[]fbField{{kind: fbScalar, size: 2}, {kind: fbScalarVec, size: 4}}}
)

func init() {
	fbFieldL.fields = []fbField{{kind: fbString}, {kind: fbScalar, size: 1}, {kind: fbScalar, size: 1}, {kind: fbUnion, pick: unionLayout},
		{kind: fbTable, sub: fbDictEnc}, {kind: fbTableVec, sub: fbFieldL}, {kind: fbTableVec, sub: fbKeyValue}}
}

func unionLayout(typ byte) *fbLayout {
	switch typ {
	case 10:
		return fbTimestamp
	case 14:
		return fbUnionType
	}
	return fbScalars
}

// fbMessage is an IPC message whose header must be a Schema (type 1).
var fbMessage = &fbLayout{[]fbField{{kind: fbScalar, size: 2}, {kind: fbScalar, size: 1},
	{kind: fbUnion, pick: func(typ byte) *fbLayout {
		if typ == 1 {
			return fbSchema
		}
		return nil
	}}, {kind: fbScalar, size: 8}, {kind: fbTableVec, sub: fbKeyValue}}}

var errFlatbuffer = errors.New("corrupt footer")

type fbChecker struct {
	b     []byte
	nodes int // tables visited: a bound on the work of a crafted buffer
}

func (c *fbChecker) u32(p int) (int, error) {
	if p < 0 || p+4 > len(c.b) {
		return 0, errFlatbuffer
	}
	return int(binary.LittleEndian.Uint32(c.b[p:])), nil
}

// offset follows the uoffset at p.
func (c *fbChecker) offset(p int) (int, error) {
	o, err := c.u32(p)
	if err != nil {
		return 0, err
	}
	if t := p + o; t < len(c.b) && t >= 0 {
		return t, nil
	}
	return 0, errFlatbuffer
}

// vector checks the vector at p of n elements of size bytes each.
func (c *fbChecker) vector(p, size int) (n int, err error) {
	if n, err = c.u32(p); err != nil {
		return 0, err
	}
	if n > (len(c.b)-p-4)/size {
		return 0, fmt.Errorf("%w: a vector of %d elements", errFlatbuffer, n)
	}
	return n, nil
}

func (c *fbChecker) table(t int, l *fbLayout, depth int) error {
	c.nodes++
	if depth > 64 || c.nodes > 1<<20 {
		return fmt.Errorf("%w: nested too deep", errFlatbuffer)
	}
	if t < 0 || t+4 > len(c.b) {
		return errFlatbuffer
	}
	vt := t - int(int32(binary.LittleEndian.Uint32(c.b[t:])))
	if vt < 0 || vt+4 > len(c.b) {
		return errFlatbuffer
	}
	vsize, tsize := int(binary.LittleEndian.Uint16(c.b[vt:])), int(binary.LittleEndian.Uint16(c.b[vt+2:]))
	if vsize < 4 || vsize%2 != 0 || vt+vsize > len(c.b) || tsize < 4 || t+tsize > len(c.b) {
		return errFlatbuffer
	}
	var small [8]byte // the 1-byte scalars by field: a union's type precedes it
	for i := 0; i < (vsize-4)/2; i++ {
		off := int(binary.LittleEndian.Uint16(c.b[vt+4+2*i:]))
		if off == 0 {
			continue
		}
		f := fbField{kind: fbScalar, size: 1}
		if i < len(l.fields) {
			f = l.fields[i]
		}
		size := 4
		if f.kind == fbScalar {
			size = f.size
		}
		if off < 4 || off+size > tsize {
			return errFlatbuffer
		}
		p := t + off
		if f.kind == fbScalar {
			if size == 1 && i < len(small) {
				small[i] = c.b[p]
			}
			continue
		}
		q, err := c.offset(p)
		if err != nil {
			return err
		}
		switch f.kind {
		case fbString:
			_, err = c.vector(q, 1)
		case fbTable:
			err = c.table(q, f.sub, depth+1)
		case fbUnion:
			sub := f.pick(small[max(i-1, 0)])
			if sub == nil {
				return fmt.Errorf("%w: union type %d", errFlatbuffer, small[max(i-1, 0)])
			}
			err = c.table(q, sub, depth+1)
		case fbScalarVec:
			_, err = c.vector(q, f.size)
		case fbTableVec:
			var n int
			if n, err = c.vector(q, 4); err == nil {
				for k := 0; k < n && err == nil; k++ {
					var e int
					if e, err = c.offset(q + 4 + 4*k); err == nil {
						err = c.table(e, f.sub, depth+1)
					}
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkArrowFooter reads an Arrow IPC file's footer (it ends the file:
// footer, its int32 length, "ARROW1") and checks its flatbuffer.
func checkArrowFooter(f io.ReadSeeker, r io.ReaderAt) error {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	const magic = "ARROW1"
	var tail [10]byte
	if size < int64(len(tail))+8 {
		return errors.New("too short for an Arrow IPC file")
	}
	if _, err := r.ReadAt(tail[:], size-10); err != nil {
		return err
	}
	if string(tail[4:]) != magic {
		return errors.New("no ARROW1 magic at its end")
	}
	n := int64(int32(binary.LittleEndian.Uint32(tail[:4])))
	if n <= 0 || n > size-10-8 {
		return fmt.Errorf("footer length %d in a file of %d bytes", n, size)
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, size-10-n); err != nil {
		return err
	}
	c := &fbChecker{b: b}
	root, err := c.offset(0)
	if err == nil {
		err = c.table(root, fbFooter, 0)
	}
	return err
}

// checkArrowSchemaMeta checks the Arrow schema a Parquet writer may keep in
// the footer's "ARROW:schema" (base64 of an IPC schema message), which
// pqarrow reads as unchecked as an Arrow IPC footer.
func checkArrowSchemaMeta(kv metadata.KeyValueMetadata) error {
	v := kv.FindValue("ARROW:schema")
	if v == nil {
		return nil
	}
	// As pqarrow decodes it: padded base64, else unpadded.
	var b []byte
	var err error
	if len(*v)%4 == 0 {
		b, err = base64.StdEncoding.DecodeString(*v)
	}
	if len(b) == 0 || err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(*v); err != nil {
			return nil // pqarrow reports it
		}
	}
	// [0xFFFFFFFF] int32 length, then the Message flatbuffer.
	if len(b) >= 4 && binary.LittleEndian.Uint32(b) == 0xFFFFFFFF {
		b = b[4:]
	}
	if len(b) < 4 {
		return nil
	}
	n := int(int32(binary.LittleEndian.Uint32(b)))
	if n < 0 || n > len(b)-4 {
		return nil // a short read for pqarrow, an error
	}
	c := &fbChecker{b: b[4 : 4+n]}
	root, err := c.offset(0)
	if err == nil {
		err = c.table(root, fbMessage, 0)
	}
	if err != nil {
		return fmt.Errorf("its ARROW:schema metadata: %w", err)
	}
	return nil
}
