package sources

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

const maxValidDepth = 64

// validData checks one array's buffers against its type, length and
// offset, and its children and dictionary, recursively (Arrow's "full"
// validation of the layout, short of UTF-8: that is checked where Go
// turns a cell into a string).
func validData(d arrow.ArrayData, depth int) error {
	if depth > maxValidDepth {
		return errors.New("nested too deep")
	}
	dt := d.DataType()
	if ext, ok := dt.(arrow.ExtensionType); ok {
		dt = ext.StorageType()
	}
	off, n := int64(d.Offset()), int64(d.Len())
	if off < 0 || n < 0 || off > 1<<62 || n > 1<<62 {
		return fmt.Errorf("bad offset %d or length %d", off, n)
	}
	end := off + n // slots the buffers must cover
	bufs := d.Buffers()
	buf := func(i int) []byte {
		if i < len(bufs) && bufs[i] != nil {
			return bufs[i].Bytes()
		}
		return nil
	}
	if dt.ID() == arrow.NULL {
		return nil
	}
	// Validity bitmap: absent means no nulls.
	if v := buf(0); len(v) > 0 && int64(len(v)) < (end+7)/8 {
		return fmt.Errorf("validity bitmap of %d bytes for %d slots", len(v), end)
	} else if len(v) == 0 && n > 0 && d.NullN() != 0 && !noValidity(dt.ID()) {
		return fmt.Errorf("%d nulls but no validity bitmap", d.NullN())
	}
	need := func(i int, bytes int64, what string) error {
		if int64(len(buf(i))) < bytes {
			return fmt.Errorf("%s buffer of %d bytes, need %d", what, len(buf(i)), bytes)
		}
		return nil
	}
	switch t := dt.(type) {
	case *arrow.BooleanType:
		return need(1, (end+7)/8, "values")
	case *arrow.StringType, *arrow.BinaryType:
		return validOffsets(buf(1), buf(2), off, n, 4, "values")
	case *arrow.LargeStringType, *arrow.LargeBinaryType:
		return validOffsets(buf(1), buf(2), off, n, 8, "values")
	case *arrow.DictionaryType:
		if err := validIndices(t, d, buf(1), off, n); err != nil {
			return err
		}
		return nil
	case arrow.FixedWidthDataType:
		return need(1, (end*int64(t.BitWidth())+7)/8, "values")
	case *arrow.ListType, *arrow.MapType:
		return validList(d, buf(1), off, n, 4, depth)
	case *arrow.LargeListType:
		return validList(d, buf(1), off, n, 8, depth)
	case *arrow.FixedSizeListType:
		ch := d.Children()
		if len(ch) != 1 {
			return errors.New("fixed-size list without one child")
		}
		if int64(ch[0].Len()) < end*int64(t.Len()) {
			return fmt.Errorf("fixed-size list child of %d values, need %d", ch[0].Len(), end*int64(t.Len()))
		}
		return validData(ch[0], depth+1)
	case *arrow.StructType:
		ch := d.Children()
		if len(ch) != t.NumFields() {
			return fmt.Errorf("struct with %d children for %d fields", len(ch), t.NumFields())
		}
		for i, c := range ch {
			if int64(c.Len()) < end {
				return fmt.Errorf("field %q has %d values, need %d", t.Field(i).Name, c.Len(), end)
			}
			if err := validData(c, depth+1); err != nil {
				return fmt.Errorf("field %q: %w", t.Field(i).Name, err)
			}
		}
		return nil
	}
	// View and run-end layouts: arrow-go's own full validation, then the
	// children's layouts.
	arr := array.MakeFromData(d)
	defer arr.Release()
	v, ok := arr.(interface{ ValidateFull() error })
	if !ok {
		return fmt.Errorf("column type %s is not read from table files (its layout cannot be checked)", dt)
	}
	if err := v.ValidateFull(); err != nil {
		return err
	}
	for _, c := range d.Children() {
		if err := validData(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func noValidity(id arrow.Type) bool {
	return id == arrow.SPARSE_UNION || id == arrow.DENSE_UNION || id == arrow.RUN_END_ENCODED
}

// offsetsAt reads offsets [off, off+n] (width 4 or 8), checking that they
// are there, start at or after 0 and never decrease; it returns the first
// and the last.
func offsetsAt(b []byte, off, n int64, width int) (first, last int64, err error) {
	if n == 0 && len(b) == 0 {
		return 0, 0, nil
	}
	if int64(len(b))/int64(width) < off+n+1 {
		return 0, 0, fmt.Errorf("offsets buffer of %d bytes for %d values", len(b), off+n+1)
	}
	at := func(i int64) int64 {
		if width == 4 {
			return int64(int32(binary.LittleEndian.Uint32(b[i*4:])))
		}
		return int64(binary.LittleEndian.Uint64(b[i*8:]))
	}
	first = at(off)
	if first < 0 {
		return 0, 0, fmt.Errorf("negative offset %d", first)
	}
	prev := first
	for i := off + 1; i <= off+n; i++ {
		o := at(i)
		if o < prev {
			return 0, 0, fmt.Errorf("offset %d at %d is below the one before (%d)", o, i, prev)
		}
		prev = o
	}
	return first, prev, nil
}

func validOffsets(offsets, data []byte, off, n int64, width int, what string) error {
	_, last, err := offsetsAt(offsets, off, n, width)
	if err != nil {
		return err
	}
	if last > int64(len(data)) {
		return fmt.Errorf("offset %d past the end of the %s buffer (%d bytes)", last, what, len(data))
	}
	return nil
}

func validList(d arrow.ArrayData, offsets []byte, off, n int64, width, depth int) error {
	ch := d.Children()
	if len(ch) != 1 {
		return errors.New("list without one child")
	}
	_, last, err := offsetsAt(offsets, off, n, width)
	if err != nil {
		return err
	}
	if last > int64(ch[0].Len()) {
		return fmt.Errorf("list offset %d past the end of its %d values", last, ch[0].Len())
	}
	return validData(ch[0], depth+1)
}

// validIndices checks a dictionary array's index buffer and its values,
// and that every index of a valid slot names a dictionary value.
func validIndices(t *arrow.DictionaryType, d arrow.ArrayData, b []byte, off, n int64) error {
	w, ok := t.IndexType.(arrow.FixedWidthDataType)
	if !ok || !arrow.IsInteger(t.IndexType.ID()) {
		return fmt.Errorf("dictionary index type %s", t.IndexType)
	}
	width := int64(w.BitWidth() / 8)
	if int64(len(b)) < (off+n)*width {
		return fmt.Errorf("indices buffer of %d bytes, need %d", len(b), (off+n)*width)
	}
	dict := d.Dictionary()
	if dict == nil {
		return errors.New("dictionary array without a dictionary")
	}
	if err := validData(dict, 1); err != nil {
		return fmt.Errorf("dictionary: %w", err)
	}
	size := int64(dict.Len())
	signed := arrow.IsSignedInteger(t.IndexType.ID())
	var valid []byte
	if bufs := d.Buffers(); len(bufs) > 0 && bufs[0] != nil {
		valid = bufs[0].Bytes()
	}
	for i := off; i < off+n; i++ {
		if len(valid) > 0 && valid[i/8]&(1<<(i%8)) == 0 {
			continue
		}
		var x int64
		switch width {
		case 1:
			x = int64(b[i])
			if signed {
				x = int64(int8(b[i]))
			}
		case 2:
			u := binary.LittleEndian.Uint16(b[i*2:])
			x = int64(u)
			if signed {
				x = int64(int16(u))
			}
		case 4:
			u := binary.LittleEndian.Uint32(b[i*4:])
			x = int64(u)
			if signed {
				x = int64(int32(u))
			}
		default:
			x = int64(binary.LittleEndian.Uint64(b[i*8:]))
		}
		if x < 0 || x >= size {
			return fmt.Errorf("dictionary index %d at %d is outside the %d values", x, i, size)
		}
	}
	return nil
}
