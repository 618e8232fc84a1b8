package sources

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/value"
)

// Listing is a dataset listed from a directory tree or a bucket:
//
//	{"kind": "files", "root": "/data/**/*.jpg", "extensions": [".jpg"], "recursive": true, "storage": {...}}
//	{"kind": "image_folder", "root": "/data/train", "extensions": [...], "storage": {...}}
//
// files yields paths; image_folder yields (path, label) tuples. Storage
// (storage.ReadOptions) is for an s3:// root.
type Listing struct {
	Kind       string
	Root       string
	Extensions []string
	Recursive  bool
	Storage    storage.Options
}

// ReadListing reads a listing's options (and checks them with r.Done).
func ReadListing(r *options.Reader) (Listing, error) {
	var l Listing
	var err error
	if l.Kind, err = r.String("kind", ""); err != nil {
		return l, err
	}
	if l.Kind != "files" && l.Kind != "image_folder" {
		return l, fmt.Errorf("listing: unknown kind %q (want \"files\" or \"image_folder\")", l.Kind)
	}
	if l.Root, err = r.String("root", ""); err != nil {
		return l, err
	}
	if l.Extensions, err = r.Strings("extensions"); err != nil {
		return l, err
	}
	if l.Recursive, err = r.Bool("recursive", false); err != nil {
		return l, err
	}
	if l.Storage, err = readStorage(r); err != nil {
		return l, err
	}
	return l, r.Done()
}

// Listed is a listing's result: the items, and for image_folder the class
// names in label order.
type Listed struct {
	Items   value.List
	Classes []string
}

// List walks the tree or lists the bucket now.
func (s Listing) List(ctx context.Context) (*Listed, error) {
	remote := storage.IsRemote(s.Root)
	var client *storage.Client
	if remote {
		if !storage.Listable(s.Root) {
			return nil, fmt.Errorf("listing: %s: only local, s3:// and gs:// roots can be listed; give http(s) URLs as a list", s.Root)
		}
		var err error
		if client, err = storage.New(s.Storage); err != nil {
			return nil, err
		}
	}
	switch s.Kind {
	case "files":
		o := FileOptions{Root: s.Root, Extensions: s.Extensions, Recursive: s.Recursive}
		var paths []string
		var err error
		if remote {
			paths, err = ListRemote(ctx, client, o)
		} else {
			paths, err = ListFiles(o)
		}
		if err != nil {
			return nil, err
		}
		items := make(value.List, len(paths))
		for i, p := range paths {
			items[i] = p
		}
		return &Listed{Items: items}, nil
	case "image_folder":
		var f *Folder
		var err error
		if remote {
			f, err = ImageFolderRemote(ctx, client, s.Root, s.Extensions)
		} else {
			f, err = ImageFolder(s.Root, s.Extensions)
		}
		if err != nil {
			return nil, err
		}
		items := make(value.List, len(f.Paths))
		for i, p := range f.Paths {
			items[i] = value.Tuple{p, f.Labels[i]}
		}
		return &Listed{Items: items, Classes: f.Classes}, nil
	}
	return nil, fmt.Errorf("listing: unknown kind %q (want \"files\" or \"image_folder\")", s.Kind)
}

// A host asks for a listing's size and classes before it builds the
// pipeline (PeekListing); the build then takes the same listing instead of
// walking the tree again. A listing is taken once, so a later build lists
// afresh and sees files added since.
var (
	listingsMu sync.Mutex
	listings   = map[string]*Listed{}
)

const maxPendingListings = 16

func (s Listing) key() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// PeekListing lists s and keeps the result for the build that follows.
func PeekListing(ctx context.Context, s Listing) (*Listed, error) {
	l, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	listingsMu.Lock()
	defer listingsMu.Unlock()
	if len(listings) >= maxPendingListings {
		clear(listings) // peeks never built; their builds will list again
	}
	listings[s.key()] = l
	return l, nil
}

// takeListing returns the listing peeked for s, or lists s now.
func takeListing(ctx context.Context, s Listing) (*Listed, error) {
	listingsMu.Lock()
	l, ok := listings[s.key()]
	delete(listings, s.key())
	listingsMu.Unlock()
	if ok {
		return l, nil
	}
	return s.List(ctx)
}

// expandPaths expands brace patterns, then globs (sorted; s3:// globs by
// listing the bucket), keeping the order of the patterns.
func expandPaths(patterns []string, st storage.Options) ([]string, error) {
	var out []string
	for _, p := range patterns {
		names, err := ExpandBraces(p)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if !strings.ContainsAny(n, "*?[") {
				out = append(out, n)
				continue
			}
			var matched []string
			switch {
			case storage.Listable(n):
				client, err := storage.New(st)
				if err != nil {
					return nil, err
				}
				matched, err = ListRemote(context.Background(), client, FileOptions{Root: n})
				if err != nil {
					return nil, err
				}
			case storage.IsRemote(n):
				return nil, fmt.Errorf("%s: http(s) URLs cannot be globbed; list them, or use brace patterns", n)
			default:
				matched, err = ListFiles(FileOptions{Root: n})
				if err != nil {
					return nil, err
				}
			}
			out = append(out, matched...)
		}
	}
	return out, nil
}

// readStorage reads the "storage" group of a source's options.
func readStorage(r *options.Reader) (storage.Options, error) {
	return readGroup(r, "storage", storage.ReadOptions)
}

// readSampling reads the "sampling" group of a source's options.
func readSampling(r *options.Reader) (sampler.Options, error) {
	return readGroup(r, "sampling", sampler.ReadOptions)
}

// readGroup reads the option group name with read, refusing names in it
// that read did not ask for.
func readGroup[T any](r *options.Reader, name string, read func(*options.Reader) (T, error)) (T, error) {
	g, err := r.Sub(name)
	if err != nil {
		var zero T
		return zero, err
	}
	o, err := read(g)
	if err != nil {
		return o, err
	}
	return o, g.Done()
}

// streamSpec is what the streaming sources (webdataset, table) read alike:
// their files, how their units are dealt and shuffled, and where a resumed
// first epoch picks up.
type streamSpec struct {
	urls          []string // as given: paths, brace patterns, globs
	sampling      sampler.Options
	shuffleBuffer int
	withIndex     bool
	resume        *StreamResume
	storage       storage.Options
}

// readStream reads the options webdataset and table share; the caller
// reads its own, calls r.Done, then resolve.
func readStream(r *options.Reader) (*streamSpec, error) {
	s := &streamSpec{}
	var err error
	if s.urls, err = r.Strings("urls"); err != nil {
		return nil, err
	}
	buf, err := r.Int("shuffle_buffer", 0)
	if err != nil {
		return nil, err
	}
	if buf < 0 || buf > 1<<31-1 {
		return nil, fmt.Errorf("shuffle_buffer must be an int >= 0, got %d", buf)
	}
	s.shuffleBuffer = int(buf)
	if s.withIndex, err = r.Bool("with_index", false); err != nil {
		return nil, err
	}
	if s.sampling, err = readSampling(r); err != nil {
		return nil, err
	}
	if s.storage, err = readStorage(r); err != nil {
		return nil, err
	}
	var resume StreamResume
	if ok, err := r.JSON("stream_resume", &resume); err != nil {
		return nil, err
	} else if ok {
		s.resume = &resume
	}
	return s, nil
}

// resolve expands the URLs (listing s3:// globs) and makes the client that
// reads them.
func (s *streamSpec) resolve() ([]string, *storage.Client, error) {
	paths, err := expandPaths(s.urls, s.storage)
	if err != nil {
		return nil, nil, err
	}
	client, err := storage.New(s.storage)
	if err != nil {
		return nil, nil, err
	}
	return paths, client, nil
}
