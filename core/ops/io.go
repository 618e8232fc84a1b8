package ops

import (
	"context"
	"fmt"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/value"
)

func init() {
	Register("read_file", newReadFile)
}

// readFile reads a whole file or object: a name (str) becomes its
// contents (bytes). Names are local paths, file://, http(s):// or
// s3://bucket/key URLs (core/storage: retries, timeouts, errors that name
// the URL and status). Bytes pass through unchanged, so a pipeline that
// reads files natively also takes samples whose bytes Python already
// loaded.
//
// Options: key (default "path"), output_key (default: key, so the path is
// replaced by the bytes; give another key to keep the path for error
// messages, e.g. decode_image names it), the remote-read options of
// storage.ReadOptions (timeout_s, retries, ca_file, s3), and a cache (storage.Cache):
// cache_memory_bytes (an LRU of any names' bytes), cache_dir and
// cache_disk_bytes (remote objects on local disk, shared by processes,
// kept across runs). Its counters show in the stage's stats.
//
// Cost: a local file is one os.ReadFile; a remote object one GET (more on
// retries), whose wait costs a goroutine, not a thread: run the stage with
// a high concurrency (64 or more) to keep many requests in flight.
type readFile struct {
	field  Field
	client *storage.Client
	cache  *storage.Cache // nil without one
}

func newReadFile(m map[string]any) (Op, error) {
	o := options.New(m)
	f, err := ReadField(o, "path")
	if err != nil {
		return nil, err
	}
	so, err := storage.ReadOptions(o)
	if err != nil {
		return nil, err
	}
	var co storage.CacheOptions
	if co.MemoryBytes, err = o.Int("cache_memory_bytes", 0); err != nil {
		return nil, err
	}
	if co.Dir, err = o.String("cache_dir", ""); err != nil {
		return nil, err
	}
	if co.DiskBytes, err = o.Int("cache_disk_bytes", 0); err != nil {
		return nil, err
	}
	if err := o.Done(); err != nil {
		return nil, err
	}
	client, err := storage.New(so)
	if err != nil {
		return nil, err
	}
	op := readFile{field: f, client: client}
	if co.MemoryBytes != 0 || co.Dir != "" {
		if op.cache, err = storage.NewCache(co); err != nil {
			return nil, err
		}
	}
	return op, nil
}

func (op readFile) Process(ctx context.Context, in any) (any, error) {
	if err := ctx.Err(); err != nil {
		value.Release(in)
		return nil, err
	}
	out, err := op.field.Apply(in, func(v any) (any, error) {
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			if x == "" {
				return nil, fmt.Errorf("read_file: the path is empty")
			}
			if op.cache != nil {
				if b, ok := op.cache.Get(x); ok {
					return named(b, x), nil
				}
			}
			b, err := op.client.ReadAll(ctx, x)
			if err != nil {
				// Both *fs.PathError and *storage.Error name the file.
				return nil, fmt.Errorf("read_file: %w", err)
			}
			if op.cache != nil {
				op.cache.Put(x, b)
			}
			return named(b, x), nil
		default:
			value.Release(v)
			return nil, fmt.Errorf("read_file: expected a path (str) or bytes, got %s", value.Describe(v))
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// named records that b was read from name, so that a decoder's error
// names the file even where the bytes replace the path in the item (an
// empty file too: bytes with capacity have an address of their own).
func named(b []byte, name string) []byte {
	if cap(b) == 0 {
		b = make([]byte, 0, 1)
	}
	value.SetOrigin(b, name)
	return b
}

// OpStats reports the cache's counters (pipeline.OpStatsReporter).
func (op readFile) OpStats() map[string]int64 {
	if op.cache == nil {
		return nil
	}
	s := op.cache.Stats()
	return map[string]int64{
		"cache_memory_hits": s.MemoryHits, "cache_disk_hits": s.DiskHits, "cache_misses": s.Misses,
		"cache_memory_bytes": s.MemoryBytes, "cache_disk_bytes": s.DiskBytes, "cache_evictions": s.Evictions,
		"cache_corrupt_entries": s.Corrupt,
	}
}

// WaitsOnIO exempts read_file from the pipeline's thread cap
// (pipeline.IOBound): its calls wait on disks and servers, not the CPU.
func (readFile) WaitsOnIO() bool { return true }
