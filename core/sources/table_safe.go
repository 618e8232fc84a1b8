package sources

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/spdl-go/spdl-go/core/columnar"
)

// tableAlloc is one open table file's allocator: it forwards to
// columnar.Allocator and remembers each live allocation with the read
// (generation) that made it. arrow-go readers that fail part-way, above
// all by panicking, drop buffers without freeing them; after such a read
// the file is closed and freeLeft frees what that read left behind.
// Buffers of the reads that succeeded are the consumers' and are freed by
// their Release as usual (records outlive the file; so does this).
type tableAlloc struct {
	mu     sync.Mutex
	live   map[uintptr]liveAlloc
	gen    int64
	failed map[int64]bool
}

type liveAlloc struct {
	b   []byte
	gen int64
}

func newTableAlloc() *tableAlloc {
	return &tableAlloc{live: map[uintptr]liveAlloc{}, failed: map[int64]bool{}}
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// maxAlloc bounds one allocation for a file's reader: a corrupt length (a
// compressed buffer's stated size, say) asks for terabytes, and a C
// allocation that fails is fatal to the process, not a panic. Past the
// machine's memory it is a panic, which guard turns into the part's error.
var maxAlloc = func() int {
	if m := physicalMemory(); m > 0 && m < 1<<62 {
		return int(m)
	}
	return 1 << 40
}()

func (a *tableAlloc) Allocate(size int) []byte {
	if size > maxAlloc {
		panic(fmt.Sprintf("an allocation of %d bytes, more than this machine's memory", size))
	}
	b := columnar.Allocator.Allocate(size)
	a.mu.Lock()
	a.live[addr(b)] = liveAlloc{b, a.gen}
	a.mu.Unlock()
	return b
}

func (a *tableAlloc) Reallocate(size int, b []byte) []byte {
	a.mu.Lock()
	_, ok := a.live[addr(b)]
	a.mu.Unlock()
	if !ok { // freed by freeLeft already: a stale buffer, start afresh
		return a.Allocate(size)
	}
	if size > maxAlloc {
		panic(fmt.Sprintf("an allocation of %d bytes, more than this machine's memory", size))
	}
	nb := columnar.Allocator.Reallocate(size, b)
	a.mu.Lock()
	delete(a.live, addr(b))
	a.live[addr(nb)] = liveAlloc{nb, a.gen}
	a.mu.Unlock()
	return nb
}

// Free forwards only allocations still live, so that a buffer freed by
// freeLeft and then released by a stale reference is not freed twice.
func (a *tableAlloc) Free(b []byte) {
	a.mu.Lock()
	_, ok := a.live[addr(b)]
	delete(a.live, addr(b))
	a.mu.Unlock()
	if ok {
		columnar.Allocator.Free(b)
	}
}

// begin starts a new read: allocations from now on are its.
func (a *tableAlloc) begin() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++
	return a.gen
}

func (a *tableAlloc) fail(gen int64) {
	a.mu.Lock()
	a.failed[gen] = true
	a.mu.Unlock()
}

// freeLeft frees what failed reads left allocated; called once the file
// is closed, so nothing but their lost references points there.
func (a *tableAlloc) freeLeft() {
	a.mu.Lock()
	var left [][]byte
	for p, l := range a.live {
		if a.failed[l.gen] {
			left = append(left, l.b)
			delete(a.live, p)
		}
	}
	clear(a.failed)
	a.mu.Unlock()
	for _, b := range left {
		columnar.Allocator.Free(b)
	}
}

var _ memory.Allocator = (*tableAlloc)(nil)

// guard runs one call into arrow-go as read gen of alloc, turning a panic
// (a corrupt file reaching a reader that trusts it) into an error that
// keeps the panic's value; a failure marks the read's allocations for
// freeLeft.
func guard(alloc *tableAlloc, f func() error) (err error) {
	gen := alloc.begin()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt data (the Arrow reader panicked: %v)", r)
		}
		if err != nil {
			alloc.fail(gen)
		}
	}()
	return f()
}

// validBatch checks that every column of rec holds rec.NumRows() values
// whose buffers are large enough and whose offsets stay inside them, so
// that no consumer (Go, or pyarrow through the C Data interface) reads out
// of bounds.
func validBatch(rec arrow.RecordBatch) error {
	n := rec.NumRows()
	for i, c := range rec.Columns() {
		if int64(c.Len()) < n {
			return fmt.Errorf("column %q has %d values for %d rows", rec.ColumnName(i), c.Len(), n)
		}
		if err := validData(c.Data(), 0); err != nil {
			return fmt.Errorf("column %q: %w", rec.ColumnName(i), err)
		}
	}
	return nil
}

// noEOF keeps a read error that wraps io.EOF (a truncated file) from
// reading as the end of the part or of the epoch: only io.EOF itself
// ends them.
func noEOF(err error) error {
	if err != nil && err != io.EOF && errors.Is(err, io.EOF) {
		return errors.New(err.Error())
	}
	return err
}

// checkNames fails a schema whose field names (dict keys for Python, or
// Arrow field names) are not UTF-8: a corrupt footer, which would
// otherwise fail every row at the hand-over.
func checkNames(fields []arrow.Field, depth int) error {
	if depth > maxValidDepth {
		return errors.New("schema nested too deep")
	}
	for _, f := range fields {
		if !utf8.ValidString(f.Name) {
			return fmt.Errorf("column name %q is not UTF-8", f.Name)
		}
		if n, ok := f.Type.(arrow.NestedType); ok {
			if err := checkNames(n.Fields(), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
