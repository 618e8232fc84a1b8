package img

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// maxPooledFile is the largest file buffer kept for reuse; bigger files
// (multi-megapixel PNGs) get a buffer of their own that the GC takes back.
const maxPooledFile = 8 << 20

// fileBufs holds read buffers for DecodeFile. Decode does not retain its
// input, so the buffer can go back as soon as it returns. A fresh
// os.ReadFile buffer per image costs ~130 KB of zeroing, page faults and GC
// work per photo: about 4% of a decode pipeline's CPU (measured with perf).
var fileBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256<<10); return &b }}

// readFilePooled reads the file at path into a pooled buffer; release gives
// the buffer back and must be called once the bytes are no longer used.
func readFilePooled(path string) (data []byte, release func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if !st.Mode().IsRegular() || size > maxPooledFile {
		b, err := io.ReadAll(f)
		return b, func() {}, err
	}
	bp := fileBufs.Get().(*[]byte)
	// One byte of room beyond the size seen by Stat tells a file that grew
	// since then from one that ended where Stat said.
	need := int(size) + 1
	if cap(*bp) < need {
		*bp = make([]byte, 0, need+need/4)
	}
	b := (*bp)[:cap(*bp)]
	n := 0
	for {
		m, err := f.Read(b[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			fileBufs.Put(bp)
			return nil, nil, err
		}
		if n == len(b) {
			if len(b) >= 4*maxPooledFile {
				fileBufs.Put(bp)
				return nil, nil, fmt.Errorf("file grew past %d bytes while being read", len(b))
			}
			grown := make([]byte, 2*len(b))
			copy(grown, b)
			b = grown
		}
	}
	release = func() {
		if cap(b) <= maxPooledFile {
			*bp = b[:0]
		}
		fileBufs.Put(bp)
	}
	return b[:n], release, nil
}
