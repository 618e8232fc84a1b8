package sources

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/value"
)

// MaxMemberSize bounds one tar member read into memory.
const MaxMemberSize = 1 << 30

// TarOptions configures a WebDataset source.
type TarOptions struct {
	// Shards are the tar files, in their canonical order (ExpandBraces
	// gives it); shuffling and the split over ranks work on this list.
	Shards []string
	// Sampling deals shards to ranks as the sampler deals samples: a
	// seeded permutation per epoch (Shuffle, Seed), rank r taking every
	// World-th shard from r (World 0 means 1), shards repeated (or, with
	// DropLast, dropped) so that every rank reads as many shards. Ranks
	// then read the same number of samples only if the shards hold equal
	// counts. Sampling.Epoch is the first epoch's number; each Open
	// begins the next.
	Sampling sampler.Options
	// ShuffleBuffer > 0 also shuffles samples across the shards being
	// read: each Next returns a random one of this many buffered samples.
	ShuffleBuffer int
	// Required extensions ("jpg", "cls") every sample must have; a sample
	// without one fails alone.
	Required []string
	// Decode turns members into values by extension: "bytes" (the
	// default), "str", "int", "float" or "json".
	Decode map[string]string
	// Open reads a shard; nil means os.Open.
	Open func(ctx context.Context, name string) (io.ReadCloser, error)
	// Prefetch is how many shards are opened ahead of the one being read
	// (0 means 2; < 0, none). Every open shard is read up to
	// ReadAheadBytes ahead of the samples taken from it, in a goroutine,
	// so that a remote shard's requests wait while samples are read.
	Prefetch int
	// ReadAheadBytes bounds each open shard's read-ahead (0 means 16 MiB).
	ReadAheadBytes int
	// WithIndex gives each sample "__index__": SampleID(shard, its number
	// in the shard), for checkpoints (StreamResume).
	WithIndex bool
	// Resume, if set, makes the first epoch (Resume.Epoch) skip the
	// samples it lists.
	Resume *StreamResume
}

// TarSource is a pipeline.Source over WebDataset tar shards: each sample
// is the run of consecutive members that share a key (the member's path
// up to the first dot of its file name: "a/000123.jpg" and
// "a/000123.seg.png" are fields "jpg" and "seg.png" of sample "a/000123"),
// yielded as a dict {"__key__", "__url__", field: value, ...}. GNU and PAX
// long names are read by archive/tar. A shard that cannot be opened, or is
// cut short or corrupt, fails as one item (naming it and where it broke)
// after the samples before the damage; a sample that lacks a Required
// field or fails to decode fails alone.
type TarSource struct {
	o     TarOptions
	units *unitEpochs
}

var decoders = []string{"bytes", "str", "int", "float", "json"}

// NewTarSource checks o.
func NewTarSource(o TarOptions) (*TarSource, error) {
	if len(o.Shards) == 0 {
		return nil, errors.New("webdataset: no shards")
	}
	for ext, d := range o.Decode {
		if !slices.Contains(decoders, d) {
			return nil, fmt.Errorf("webdataset: decode %q: unknown decoder %q (want one of %s)", ext, d, strings.Join(decoders, ", "))
		}
	}
	for _, r := range o.Required {
		if r == "" || strings.HasPrefix(r, ".") {
			return nil, fmt.Errorf("webdataset: required extension %q: give it without the dot, e.g. \"jpg\"", r)
		}
	}
	if o.ShuffleBuffer < 0 {
		return nil, fmt.Errorf("webdataset: shuffle buffer must be >= 0, got %d", o.ShuffleBuffer)
	}
	if o.Open == nil {
		o.Open = func(_ context.Context, name string) (io.ReadCloser, error) { return os.Open(name) }
	}
	if o.Prefetch == 0 {
		o.Prefetch = 2
	}
	if o.ReadAheadBytes <= 0 {
		o.ReadAheadBytes = 16 << 20
	}
	cfg := o.Sampling.Config(int64(len(o.Shards)))
	if cfg.World == 0 {
		cfg.World = 1
	}
	units, err := newUnitEpochs(cfg, o.Sampling.Epoch, o.Resume, o.ShuffleBuffer)
	if err != nil {
		return nil, fmt.Errorf("webdataset: %d shards: %w", len(o.Shards), err)
	}
	return &TarSource{o: o, units: units}, nil
}

// ShardsPerEpoch is how many shards each rank reads per epoch.
func (s *TarSource) ShardsPerEpoch() int64 {
	pl, _ := sampler.NewPlan(s.units.cfg, sampler.Progress{Epoch: s.o.Sampling.Epoch})
	return pl.Len()
}

// UnitSizes are the sample counts of the shards read to their end so far,
// by shard index: a checkpoint keeps them (StreamResume.Sizes) so that a
// resumed epoch does not open shards it consumed whole.
func (s *TarSource) UnitSizes() map[int64]int64 { return s.units.sizes.snapshot() }

// SourceState is what a checkpoint needs of the source (pipeline.StateReporter).
func (s *TarSource) SourceState() any { return streamState{Sizes: s.UnitSizes()} }

// OpStats counts the shards opened, the bytes read from them and the time
// spent waiting for those bytes, and what a resumed epoch skipped
// (pipeline.OpStatsReporter).
func (s *TarSource) OpStats() map[string]int64 { return s.units.opStats("shards") }

// Open begins the next epoch.
func (s *TarSource) Open(context.Context) (pipeline.Iterator, error) {
	pl, skip, shuf, err := s.units.next()
	if err != nil {
		return nil, err
	}
	return &tarIter{s: s, plan: pl, skip: skip, shuf: shuf}, nil
}

type tarIter struct {
	s    *TarSource
	plan *sampler.Plan
	next int64 // the plan's next shard

	name string // the shard being read
	rc   io.ReadCloser
	// Shards opened ahead, in plan order, each reading in its goroutine.
	ahead []*aheadShard
	tail  *tailReader // under tr: tells a complete archive from a cut one
	tr    *tar.Reader
	hdr   *tar.Header // a member whose data is next, held back while the sample before it was returned
	cur   *tarSample  // fields read so far of the sample being read
	last  string      // the key of the last sample completed in this shard

	shuf *shuffler // nil without a shuffle buffer

	unit int64    // the shard's index in Shards
	k    int64    // samples completed so far in the shard
	skip *skipSet // a resumed epoch's consumed samples
}

// errSkipped is complete's answer for a sample a resumed epoch skips.
var errSkipped = errors.New("sample consumed before the resume")

type tarSample struct {
	key    string
	fields []string
	data   [][]byte
	err    error
}

func (it *tarIter) Next(ctx context.Context) (any, error) { return it.shuf.next(ctx, it.read) }

// read returns the next sample in shard order.
func (it *tarIter) read(ctx context.Context) (any, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if it.tr == nil {
			prefetch := max(it.s.o.Prefetch, 0)
			it.fillAhead(ctx, prefetch+1)
			if len(it.ahead) == 0 {
				return nil, io.EOF
			}
			a := it.ahead[0]
			it.ahead = it.ahead[1:]
			it.fillAhead(ctx, prefetch) // the next shards open while this one is read
			it.name, it.unit, it.k = it.s.o.Shards[a.idx], a.idx, 0
			if err := a.r.wait(ctx); err != nil {
				a.r.Close()
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, &pipeline.ItemFailure{Item: it.name, Err: err}
			}
			it.s.units.io.units.Add(1)
			it.tail = &tailReader{r: bufio.NewReaderSize(a.r, 256<<10)}
			it.rc, it.tr, it.cur, it.last = a.r, tar.NewReader(it.tail), nil, ""
		}
		hdr, err := it.hdr, error(nil)
		if hdr != nil {
			it.hdr = nil
		} else {
			hdr, err = it.tr.Next()
		}
		if errors.Is(err, io.EOF) {
			// archive/tar also ends quietly when the stream stops at a
			// block boundary; only the two zero blocks mark a whole archive.
			if !it.tail.endMarker() {
				if it.tail.n == 0 {
					return nil, it.broken(errors.New("empty file, not a tar archive"))
				}
				return nil, it.broken(fmt.Errorf("truncated: no end-of-archive marker after %d bytes", it.tail.n))
			}
			done := it.cur
			it.closeShard()
			n := it.k
			if done != nil {
				n++
			}
			it.s.units.sizes.set(it.unit, n)
			if done != nil {
				if v, err := it.complete(done); err != errSkipped {
					return v, err
				}
			}
			continue
		}
		if err != nil {
			return nil, it.broken(err)
		}
		if hdr.Typeflag == tar.TypeGNUSparse || isPAXSparse(hdr) {
			// WebDataset shards have no sparse members; a corrupt header
			// that claims one would expand to gigabytes of zeros.
			return nil, it.broken(fmt.Errorf("member %s is a sparse file, which shards do not hold", hdr.Name))
		}
		if hdr.Typeflag != tar.TypeReg { // Next reports the old TypeRegA as TypeReg
			continue
		}
		key, ext := splitKey(hdr.Name)
		if ext == "" {
			continue // no field name: not part of a sample (e.g. a README)
		}
		if it.cur != nil && it.cur.key != key {
			// A new key: the sample before it is complete. Return it now,
			// before this member's data is read (and may turn out cut).
			done := it.cur
			it.cur, it.hdr = nil, hdr
			if v, err := it.complete(done); err != errSkipped {
				return v, err
			}
			continue
		}
		if hdr.Size > MaxMemberSize {
			return nil, it.broken(fmt.Errorf("member %s is %d bytes, more than %d", hdr.Name, hdr.Size, MaxMemberSize))
		}
		// The member belongs to sample number it.k; a resumed epoch that
		// consumed it leaves the data to the next tr.Next, which skips it.
		var data bytes.Buffer
		if !it.skip.has(it.unit, it.k) {
			// Grown as the data arrives: a corrupt header's size is not
			// trusted with an allocation.
			data.Grow(int(min(hdr.Size, 256<<10)))
			if _, err := io.Copy(&data, it.tr); err != nil {
				return nil, it.broken(fmt.Errorf("reading member %s: %w", hdr.Name, err))
			}
		}
		if it.cur == nil {
			it.cur = &tarSample{key: key}
		}
		if slices.Contains(it.cur.fields, ext) {
			it.cur.err = fmt.Errorf("two members named %s.%s", key, ext)
		}
		it.cur.fields = append(it.cur.fields, ext)
		it.cur.data = append(it.cur.data, data.Bytes())
	}
}

// aheadShard is a shard opened before its turn.
type aheadShard struct {
	idx int64
	r   *readAhead
}

// fillAhead opens the plan's next shards until want of them are open
// and waiting, passing over those a resumed epoch consumed whole.
func (it *tarIter) fillAhead(ctx context.Context, want int) {
	for len(it.ahead) < want && it.next < it.plan.Len() {
		_, idx, _ := it.plan.At(it.next)
		it.next++
		if n, ok := it.skip.done(idx); ok {
			it.s.units.unitsSkipped.Add(1)
			it.s.units.samplesSkipped.Add(n)
			continue
		}
		r := startReadAhead(ctx, it.s.o.Open, it.s.o.Shards[idx], it.s.o.ReadAheadBytes, &it.s.units.io)
		it.ahead = append(it.ahead, &aheadShard{idx: idx, r: r})
	}
}

// broken fails the rest of a shard that cannot be read on.
func (it *tarIter) broken(err error) error {
	where := "at its start"
	if it.last != "" {
		where = fmt.Sprintf("after sample %s", it.last)
	}
	name := it.name
	it.closeShard()
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("truncated: %w", err)
	}
	return &pipeline.ItemFailure{Item: name, Err: fmt.Errorf("shard broken %s, rest skipped: %w", where, err)}
}

func (it *tarIter) closeShard() {
	if it.rc != nil {
		it.rc.Close()
	}
	it.rc, it.tail, it.tr, it.hdr, it.cur = nil, nil, nil, nil, nil
}

func isPAXSparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// tailReader counts the bytes read through it and keeps the last 1024.
type tailReader struct {
	r    io.Reader
	n    int64
	last [1024]byte
}

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n >= len(t.last) {
		copy(t.last[:], p[n-len(t.last):n])
	} else if n > 0 {
		copy(t.last[:], t.last[n:])
		copy(t.last[len(t.last)-n:], p[:n])
	}
	t.n += int64(n)
	return n, err
}

// endMarker reports whether the stream ended with two zero blocks.
func (t *tailReader) endMarker() bool {
	if t.n < int64(len(t.last)) || t.n%512 != 0 {
		return false
	}
	for _, b := range t.last {
		if b != 0 {
			return false
		}
	}
	return true
}

// complete checks and decodes a sample's fields.
func (it *tarIter) complete(s *tarSample) (any, error) {
	it.last = s.key
	k := it.k
	it.k++
	if it.skip.has(it.unit, k) {
		it.s.units.samplesSkipped.Add(1)
		return nil, errSkipped
	}
	fail := func(err error) (any, error) {
		return nil, &pipeline.ItemFailure{Item: fmt.Sprintf("%s: sample %s", it.name, s.key), Err: err}
	}
	if s.err != nil {
		return fail(s.err)
	}
	for _, r := range it.s.o.Required {
		if !slices.Contains(s.fields, r) {
			return fail(fmt.Errorf("no .%s member (it has .%s)", r, strings.Join(s.fields, ", .")))
		}
	}
	d := value.NewDict(len(s.fields) + 2)
	d.Set("__key__", s.key)
	d.Set("__url__", it.name)
	if it.s.o.WithIndex {
		d.Set("__index__", SampleID(it.unit, k))
	}
	for i, f := range s.fields {
		v, err := decodeField(it.s.o.Decode[f], s.data[i])
		if err != nil {
			return fail(fmt.Errorf(".%s: %w", f, err))
		}
		d.Set(f, v)
	}
	return d, nil
}

func (it *tarIter) Close() error {
	it.closeShard()
	for _, a := range it.ahead {
		a.r.Close()
	}
	it.ahead = nil
	it.shuf.drop(value.Release)
	return nil
}

// splitKey splits a member name into the sample key and the field name at
// the first dot of the file name.
func splitKey(name string) (key, ext string) {
	dir, file := path.Split(name)
	if strings.HasPrefix(file, ".") {
		return "", "" // hidden files (macOS "._x") are not fields
	}
	base, ext, ok := strings.Cut(file, ".")
	if !ok {
		return "", ""
	}
	return dir + base, ext
}

func decodeField(kind string, b []byte) (any, error) {
	switch kind {
	case "", "bytes":
		return b, nil
	case "str":
		return string(b), nil
	case "int":
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("not an int: %q", clip(b))
		}
		return v, nil
	case "float":
		v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil {
			return nil, fmt.Errorf("not a float: %q", clip(b))
		}
		return v, nil
	case "json":
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		return fromJSON(v), nil
	}
	return nil, fmt.Errorf("unknown decoder %q", kind)
}

// fromJSON turns encoding/json's values into the engine's: objects become
// dicts with sorted keys, integers int64.
func fromJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := value.NewDict(len(keys))
		for _, k := range keys {
			d.Set(k, fromJSON(x[k]))
		}
		return d
	case []any:
		out := make(value.List, len(x))
		for i, e := range x {
			out[i] = fromJSON(e)
		}
		return out
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v // nil, bool, string
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

func init() { Register("webdataset", newWebDataset) }

// newWebDataset builds a tar shard source:
//
//	{"urls": ["shard-{000..009}.tar"], "required": ["jpg"], "decode": {"cls": "int"},
//	 "shuffle_buffer": 0, "prefetch_shards": 2, "with_index": false,
//	 "sampling": {...}, "storage": {...}, "stream_resume": {...}}
//
// Each URL is a path, a brace pattern or a glob.
func newWebDataset(m map[string]any) (pipeline.Source, error) {
	r := options.New(m)
	st, err := readStream(r)
	if err != nil {
		return nil, err
	}
	o := TarOptions{Sampling: st.sampling, ShuffleBuffer: st.shuffleBuffer, WithIndex: st.withIndex, Resume: st.resume}
	if o.Required, err = r.Strings("required"); err != nil {
		return nil, err
	}
	if o.Decode, err = r.StringMap("decode"); err != nil {
		return nil, err
	}
	if r.Has("prefetch_shards") {
		p, err := r.Int("prefetch_shards", 0)
		if err != nil {
			return nil, err
		}
		if p < 0 || p > 1<<31-1 {
			return nil, fmt.Errorf("prefetch_shards must be an int >= 0, got %d", p)
		}
		o.Prefetch = int(p)
		if p == 0 {
			o.Prefetch = -1 // none ahead; TarOptions' 0 means the default
		}
	} else {
		r.Get("prefetch_shards")
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	paths, client, err := st.resolve()
	if err != nil {
		return nil, err
	}
	o.Shards, o.Open = paths, client.Open
	return NewTarSource(o)
}
