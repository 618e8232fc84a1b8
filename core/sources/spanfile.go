package sources

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// maxPartPrefetch bounds the bytes fetched ahead for one row group; a
// larger one is read column chunk by column chunk, as the reader asks.
const maxPartPrefetch = 64 << 20

// spanGap is the largest hole between two column chunks that is read
// rather than paid for with another request.
const spanGap = 1 << 20

// spanFile serves a Parquet reader's reads from byte spans fetched ahead
// of it, each in a goroutine: a row group's selected column chunks, in a
// few coalesced requests made at once, instead of one request per column
// chunk made when the reader reaches it. Reads outside the spans go to
// the file. Close waits for the goroutines; their reads end with the
// context the file was opened with.
type spanFile struct {
	File
	mu    sync.Mutex
	parts map[int][]*span // fetched spans by row group
	wg    sync.WaitGroup
	stats *ioStats // if set, counts the reader's reads and waits
}

type span struct {
	off  int64
	b    []byte
	done chan struct{} // closed once b or err is set
	err  error
}

func newSpanFile(f File) *spanFile { return &spanFile{File: f, parts: map[int][]*span{}} }

// fetch starts reading ranges ([offset, length)) for part, unless they are
// being read already.
func (f *spanFile) fetch(part int, ranges [][2]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.parts[part]; ok {
		return
	}
	spans := make([]*span, len(ranges))
	for i, r := range ranges {
		s := &span{off: r[0], b: make([]byte, r[1]), done: make(chan struct{})}
		spans[i] = s
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer close(s.done)
			n, err := f.File.ReadAt(s.b, s.off)
			if n < len(s.b) && err == nil {
				err = errShortSpan
			}
			s.err = err
		}()
	}
	f.parts[part] = spans
}

// drop forgets part's spans (a goroutine still reading one finishes on
// its own; Close waits for it).
func (f *spanFile) drop(part int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.parts, part)
}

func (f *spanFile) find(off int64, n int) *span {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, spans := range f.parts {
		for _, s := range spans {
			if s.off <= off && off+int64(n) <= s.off+int64(len(s.b)) {
				return s
			}
		}
	}
	return nil
}

// ReadAt answers from a span that holds [off, off+len(p)), waiting for it
// if it is being read; otherwise, or if its read failed, from the file
// (which retries, and whose error is then the one that counts).
func (f *spanFile) ReadAt(p []byte, off int64) (int, error) {
	if f.stats != nil {
		defer f.stats.waited(time.Now())
		f.stats.bytes.Add(int64(len(p)))
	}
	if s := f.find(off, len(p)); s != nil {
		<-s.done
		if s.err == nil {
			return copy(p, s.b[off-s.off:]), nil
		}
	}
	return f.File.ReadAt(p, off)
}

func (f *spanFile) Close() error {
	f.wg.Wait()
	return f.File.Close()
}

type spanError string

func (e spanError) Error() string { return string(e) }

const errShortSpan = spanError("short read of a prefetched span")

// chunkRanges are the byte ranges of row group rg's column chunks for
// leaves, coalesced across gaps of up to spanGap, and their total size;
// ok is false when there is nothing to fetch or it is over maxPartPrefetch.
func chunkRanges(md *metadata.FileMetaData, rg int, leaves []int) (ranges [][2]int64, ok bool) {
	if md == nil || rg < 0 || rg >= md.NumRowGroups() {
		return nil, false
	}
	rgm := md.RowGroup(rg)
	var total int64
	for _, leaf := range leaves {
		cc, err := rgm.ColumnChunk(leaf)
		if err != nil || cc.CryptoMetadata() != nil {
			return nil, false
		}
		start := cc.DataPageOffset()
		if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && start > cc.DictionaryPageOffset() {
			start = cc.DictionaryPageOffset()
		}
		n := cc.TotalCompressedSize()
		if start < 0 || n <= 0 {
			return nil, false
		}
		ranges = append(ranges, [2]int64{start, n})
		total += n
	}
	if len(ranges) == 0 || total > maxPartPrefetch {
		return nil, false
	}
	slices.SortFunc(ranges, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	out := ranges[:1]
	for _, r := range ranges[1:] {
		last := &out[len(out)-1]
		if end := last[0] + last[1]; r[0] <= end+spanGap {
			last[1] = max(end, r[0]+r[1]) - last[0]
		} else {
			out = append(out, r)
		}
	}
	var fetched int64
	for _, r := range out {
		fetched += r[1]
	}
	return out, fetched <= maxPartPrefetch
}
