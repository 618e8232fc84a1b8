package storage_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/storage"
)

func mustCache(t *testing.T, o storage.CacheOptions) *storage.Cache {
	t.Helper()
	c, err := storage.NewCache(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMemoryCacheIsLRU(t *testing.T) {
	c := mustCache(t, storage.CacheOptions{MemoryBytes: 100})
	c.Put("a", blob(40))
	c.Put("b", blob(40))
	if _, ok := c.Get("a"); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.Put("c", blob(40)) // evicts b
	c.Put("huge", blob(101))
	for name, want := range map[string]bool{"a": true, "b": false, "c": true, "huge": false} {
		if _, ok := c.Get(name); ok != want {
			t.Errorf("%s cached = %v, want %v", name, ok, want)
		}
	}
	st := c.Stats()
	if st.MemoryHits != 3 || st.Misses != 2 || st.MemoryBytes != 80 || st.Evictions != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestDiskCacheSharedAndEvicted(t *testing.T) {
	dir := t.TempDir()
	opts := storage.CacheOptions{Dir: dir, DiskBytes: 1000}
	p1, p2 := mustCache(t, opts), mustCache(t, opts) // two "processes"
	url := func(i int) string { return fmt.Sprintf("http://h/obj-%d", i) }
	p1.Put(url(0), blob(300))
	if b, ok := p2.Get(url(0)); !ok || !bytes.Equal(b, blob(300)) {
		t.Fatal("an entry written by one process is not read by another")
	}
	p1.Put("/local/file.jpg", blob(10))
	if _, ok := p2.Get("/local/file.jpg"); ok {
		t.Error("local files must not go to the disk cache")
	}
	// Age entries so that eviction order is by last use: obj-0 was used
	// most recently of the old ones.
	old := time.Now().Add(-time.Hour)
	for i := 1; i <= 2; i++ {
		p2.Put(url(i), blob(300))
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if !d.IsDir() {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	p1.Get(url(0))                  // touches obj-0
	p1.Put(url(3), blob(300))       // 1200 > 1000 in all; p1 alone has put 600
	restarted := mustCache(t, opts) // counts the directory: evicts to 900 or less, oldest first
	have := map[int]bool{}
	for i := 0; i < 4; i++ {
		_, have[i] = restarted.Get(url(i))
	}
	if !have[0] || !have[3] || (have[1] && have[2]) {
		t.Errorf("after eviction: %v (want 0 and 3 kept, 1 or 2 evicted)", have)
	}
	if st := restarted.Stats(); st.DiskBytes > 1000 {
		t.Errorf("disk holds %d bytes, budget 1000", st.DiskBytes)
	}
	if restarted.Stats().Evictions == 0 {
		t.Errorf("no eviction counted: %+v", restarted.Stats())
	}
}

// Many writers and readers of the same names: a reader sees a whole entry
// or none.
func TestDiskCacheConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	for w := range 4 {
		c := mustCache(t, storage.CacheOptions{Dir: dir, DiskBytes: 1 << 20, MemoryBytes: 1 << 16})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				name := fmt.Sprintf("s3://b/k%d", i%20)
				want := blob(1000 + i%20)
				if b, ok := c.Get(name); ok && !bytes.Equal(b, want) {
					t.Errorf("worker %d read a damaged %s (%d bytes)", w, name, len(b))
					return
				}
				c.Put(name, want)
			}
		}()
	}
	wg.Wait()
	if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 {
		t.Errorf("%d temporary files left", len(left))
	}
}

// entryFile is the one entry file under dir.
func entryFile(t *testing.T, dir string) string {
	t.Helper()
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "tmp" {
			return filepath.SkipDir
		}
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 1 {
		t.Fatalf("want one entry file, found %v", files)
	}
	return files[0]
}

// A damaged entry is never served: it is a miss (so the caller reads the
// origin again), it is deleted and counted, and the next Put restores it.
func TestDiskCacheDropsCorruptEntries(t *testing.T) {
	want := blob(1000)
	cases := []struct {
		name   string
		damage func(f []byte) []byte
	}{
		{"flipped payload byte", func(f []byte) []byte { f[len(f)-500] ^= 0x10; return f }},
		{"flipped length byte", func(f []byte) []byte { f[8] ^= 1; return f }},
		{"flipped checksum byte", func(f []byte) []byte { f[17] ^= 0x80; return f }},
		{"truncated", func(f []byte) []byte { return f[:len(f)-1] }},
		{"truncated to the header", func(f []byte) []byte { return f[:24] }},
		{"extended", func(f []byte) []byte { return append(f, 0) }},
		{"emptied", func(f []byte) []byte { return nil }},
		{"old format (bare bytes)", func([]byte) []byte { return bytes.Clone(want) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := storage.CacheOptions{Dir: dir, DiskBytes: 1 << 20}
			c := mustCache(t, opts)
			const name = "https://h/obj"
			c.Put(name, want)
			p := entryFile(t, dir)
			f, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, tc.damage(f), 0o644); err != nil {
				t.Fatal(err)
			}
			// A fresh cache, as a restarted job or another process sees it.
			c = mustCache(t, opts)
			if b, ok := c.Get(name); ok {
				t.Fatalf("a damaged entry was served (%d bytes)", len(b))
			}
			st := c.Stats()
			if st.Corrupt != 1 || st.Misses != 1 || st.DiskHits != 0 {
				t.Errorf("stats after the damaged read: %+v (want Corrupt 1, Misses 1)", st)
			}
			if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the damaged entry was not deleted: %v", err)
			}
			if st.DiskBytes != 0 {
				t.Errorf("disk bytes %d after deleting the only entry", st.DiskBytes)
			}
			c.Put(name, want) // what the caller read from the origin
			if b, ok := c.Get(name); !ok || !bytes.Equal(b, want) {
				t.Errorf("the entry put back is not served whole (ok=%v, %d bytes)", ok, len(b))
			}
			if st := c.Stats(); st.Corrupt != 1 || st.DiskHits != 1 || st.DiskBytes != int64(len(want)) {
				t.Errorf("stats after the entry was put back: %+v", st)
			}
		})
	}
}
