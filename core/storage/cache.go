package storage

import (
	"container/list"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CacheOptions configure a Cache. A zero budget turns that level off.
type CacheOptions struct {
	// MemoryBytes is the budget of the in-memory LRU level (any name).
	MemoryBytes int64
	// Dir holds the on-disk level, for remote objects only; DiskBytes is
	// its budget (of the objects' bytes). Several processes may share Dir:
	// files appear whole (written aside, then renamed), and each process
	// evicts by the files' last use as the directory shows it. Each entry
	// carries its length and CRC-32C, checked on every read: a damaged
	// entry (or one from an older format) is deleted and read again from
	// its origin.
	Dir       string
	DiskBytes int64
}

// Cache keeps objects' bytes in memory and on local disk, keyed by name.
// Entries are never revalidated: a name is assumed to keep its content
// (dataset objects usually do; give changed data a new name, or clear
// the directory). Get returns shared bytes: callers must not modify them.
// It is safe for concurrent use.
type Cache struct {
	o   CacheOptions
	mem *memLRU
	dsk *diskCache

	memHits, diskHits, misses, evictions, corrupt atomic.Int64
}

// CacheStats counts a cache's traffic and contents.
type CacheStats struct {
	MemoryHits, DiskHits, Misses int64
	MemoryBytes, DiskBytes       int64 // held now (the disk figure as this process last counted it)
	Evictions                    int64 // entries evicted from either level
	// Corrupt counts disk entries that failed their check (length,
	// CRC-32C, or an older format) and were deleted; each is also a miss.
	Corrupt int64
}

// NewCache opens a cache, creating Dir if needed and counting what it
// already holds (a cache survives restarts).
func NewCache(o CacheOptions) (*Cache, error) {
	if o.MemoryBytes < 0 || o.DiskBytes < 0 {
		return nil, errors.New("cache: budgets must be >= 0")
	}
	c := &Cache{o: o}
	if o.MemoryBytes > 0 {
		c.mem = &memLRU{budget: o.MemoryBytes, items: map[string]*list.Element{}, order: list.New(), evictions: &c.evictions}
	}
	if o.Dir != "" {
		if o.DiskBytes == 0 {
			return nil, fmt.Errorf("cache: %s: give the disk cache a budget in bytes", o.Dir)
		}
		d := &diskCache{dir: o.Dir, budget: o.DiskBytes, evictions: &c.evictions, corrupt: &c.corrupt}
		if err := os.MkdirAll(d.tmpDir(), 0o755); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
		if err := d.rescan(); err != nil {
			return nil, err
		}
		c.dsk = d
	}
	return c, nil
}

// Get returns the cached bytes of name.
func (c *Cache) Get(name string) ([]byte, bool) {
	if c.mem != nil {
		if b, ok := c.mem.get(name); ok {
			c.memHits.Add(1)
			return b, true
		}
	}
	if c.dsk != nil && IsRemote(name) {
		if b, ok := c.dsk.get(name); ok {
			c.diskHits.Add(1)
			if c.mem != nil {
				c.mem.put(name, b)
			}
			return b, true
		}
	}
	c.misses.Add(1)
	return nil, false
}

// Put stores b under name. A disk write that fails (a full disk) only
// leaves the entry out of the disk level.
func (c *Cache) Put(name string, b []byte) {
	if c.mem != nil {
		c.mem.put(name, b)
	}
	if c.dsk != nil && IsRemote(name) {
		_ = c.dsk.put(name, b)
	}
}

// Stats returns the counters.
func (c *Cache) Stats() CacheStats {
	s := CacheStats{MemoryHits: c.memHits.Load(), DiskHits: c.diskHits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Corrupt: c.corrupt.Load()}
	if c.mem != nil {
		s.MemoryBytes = c.mem.size()
	}
	if c.dsk != nil {
		s.DiskBytes = c.dsk.bytes.Load()
	}
	return s
}

// ---- memory level --------------------------------------------------------

type memLRU struct {
	mu        sync.Mutex
	budget    int64
	used      int64
	items     map[string]*list.Element
	order     *list.List // front: most recently used
	evictions *atomic.Int64
}

type memEntry struct {
	name string
	b    []byte
}

func (m *memLRU) get(name string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[name]; ok {
		m.order.MoveToFront(e)
		return e.Value.(*memEntry).b, true
	}
	return nil, false
}

func (m *memLRU) put(name string, b []byte) {
	n := int64(len(b))
	if n > m.budget {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[name]; ok {
		m.used -= int64(len(e.Value.(*memEntry).b))
		e.Value.(*memEntry).b = b
		m.used += n
		m.order.MoveToFront(e)
	} else {
		m.items[name] = m.order.PushFront(&memEntry{name: name, b: b})
		m.used += n
	}
	for m.used > m.budget {
		e := m.order.Back()
		old := e.Value.(*memEntry)
		m.order.Remove(e)
		delete(m.items, old.name)
		m.used -= int64(len(old.b))
		m.evictions.Add(1)
	}
}

func (m *memLRU) size() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

// ---- disk level ------------------------------------------------------------

type diskCache struct {
	dir       string
	budget    int64
	bytes     atomic.Int64 // as last counted plus what this process added since
	lastScan  atomic.Int64 // unix nanoseconds of the last count
	evictMu   sync.Mutex
	evictions *atomic.Int64
	corrupt   *atomic.Int64
}

// An entry file is a header, then the object's bytes:
//
//	magic "spdlC1\n\x00" | length uint64 LE | CRC-32C (Castagnoli) uint32 LE | 4 zero bytes
//
// A file that is too short, has another magic (entries of the old format
// were the bare bytes), another length or another CRC is not served.
const (
	entryMagic  = "spdlC1\n\x00"
	entryHeader = 24
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeEntry returns the header of an entry holding b.
func encodeEntry(b []byte) []byte {
	h := make([]byte, entryHeader)
	copy(h, entryMagic)
	binary.LittleEndian.PutUint64(h[8:], uint64(len(b)))
	binary.LittleEndian.PutUint32(h[16:], crc32.Checksum(b, castagnoli))
	return h
}

// decodeEntry returns the object's bytes in an entry file, or false when
// the file does not check out.
func decodeEntry(f []byte) ([]byte, bool) {
	if len(f) < entryHeader || string(f[:8]) != entryMagic {
		return nil, false
	}
	b := f[entryHeader:]
	if binary.LittleEndian.Uint64(f[8:]) != uint64(len(b)) || binary.LittleEndian.Uint32(f[16:]) != crc32.Checksum(b, castagnoli) {
		return nil, false
	}
	return b, true
}

// path is the entry file of name: a hash of the name, in 256 subfolders.
func (d *diskCache) path(name string) string {
	h := sha256.Sum256([]byte(name))
	k := hex.EncodeToString(h[:])
	return filepath.Join(d.dir, k[:2], k[2:])
}

func (d *diskCache) tmpDir() string { return filepath.Join(d.dir, "tmp") }

func (d *diskCache) get(name string) ([]byte, bool) {
	p := d.path(name)
	f, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	b, ok := decodeEntry(f)
	if !ok {
		// Damaged on disk (or written by an older version): drop it so
		// that the caller's read from the origin puts a good one back.
		// A good entry renamed over it meanwhile is only lost, never
		// served wrong.
		if os.Remove(p) == nil {
			d.bytes.Add(-max(0, int64(len(f))-entryHeader))
		}
		d.corrupt.Add(1)
		return nil, false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // the last use, for eviction in every process
	return b, true
}

func (d *diskCache) put(name string, b []byte) error {
	final := d.path(name)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(d.tmpDir(), hex.EncodeToString(rnd[:]))
	if err := writeEntry(tmp, b); err != nil {
		os.Remove(tmp)
		return err
	}
	// Readers see no file or a whole one; a concurrent writer of the same
	// name renames identical bytes over it.
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return err
	}
	// Other processes' writes show only in a count of the directory:
	// recount when this process's tally passes the budget, and every 30s.
	if d.bytes.Add(int64(len(b))) > d.budget || time.Since(time.Unix(0, d.lastScan.Load())) > 30*time.Second {
		return d.evict()
	}
	return nil
}

// writeEntry writes the entry file of b at path.
func writeEntry(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(encodeEntry(b))
	if err == nil {
		_, err = f.Write(b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

type diskEntry struct {
	path string
	size int64
	used time.Time
}

// evict deletes the least recently used entries until the directory is
// under 90% of its budget, counting what every process put there.
func (d *diskCache) evict() error {
	d.evictMu.Lock()
	defer d.evictMu.Unlock()
	entries, total, err := d.scan()
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b diskEntry) int { return a.used.Compare(b.used) })
	target := d.budget * 9 / 10
	for _, e := range entries {
		if total <= target {
			break
		}
		if err := os.Remove(e.path); err == nil || errors.Is(err, fs.ErrNotExist) {
			total -= e.size // another process may have removed it first
			if err == nil {
				d.evictions.Add(1)
			}
		}
	}
	d.bytes.Store(total)
	return nil
}

func (d *diskCache) rescan() error {
	// Files a crashed writer left aside.
	if tmps, err := os.ReadDir(d.tmpDir()); err == nil {
		for _, e := range tmps {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Hour {
				os.Remove(filepath.Join(d.tmpDir(), e.Name()))
			}
		}
	}
	_, total, err := d.scan()
	if err != nil {
		return err
	}
	d.bytes.Store(total)
	if total > d.budget {
		return d.evict()
	}
	return nil
}

func (d *diskCache) scan() ([]diskEntry, int64, error) {
	d.lastScan.Store(time.Now().UnixNano())
	var out []diskEntry
	var total int64
	err := filepath.WalkDir(d.dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by another process meanwhile
			}
			return err
		}
		if e.IsDir() {
			if p == d.tmpDir() {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(e.Name(), ".") {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		// Budgets count the objects' bytes, not the headers.
		size := max(0, info.Size()-entryHeader)
		out = append(out, diskEntry{path: p, size: size, used: info.ModTime()})
		total += size
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("cache: %s: %w", d.dir, err)
	}
	return out, total, nil
}
