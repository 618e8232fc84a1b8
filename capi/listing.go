package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/value"
)

// listingSpec is a sampler source's dataset when it is listed in Go:
//
//	{"kind": "files", "root": "/data/**/*.jpg", "extensions": [".jpg"], "recursive": true}
//	{"kind": "image_folder", "root": "/data/train", "extensions": [...]}
//
// files yields paths; image_folder yields (path, label) tuples.
type listingSpec struct {
	Kind       string      `json:"kind"`
	Root       string      `json:"root"`
	Extensions []string    `json:"extensions"`
	Recursive  bool        `json:"recursive"`
	Storage    storageSpec `json:"storage"` // for an s3:// root
}

type listing struct {
	items   value.List
	classes []string // image_folder
}

// Python asks for a listing's size and classes before it builds the
// pipeline; the build then takes the same listing instead of walking the
// tree again. A listing is taken once, so a later build lists afresh and
// sees files added since.
var (
	listingsMu sync.Mutex
	listings   = map[string]*listing{}
)

const maxPendingListings = 16

func (s listingSpec) key() string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (s listingSpec) list() (*listing, error) {
	remote := storage.IsRemote(s.Root)
	var client *storage.Client
	if remote {
		if !strings.HasPrefix(s.Root, "s3://") {
			return nil, fmt.Errorf("listing: %s: only local and s3:// roots can be listed; give http(s) URLs as a list", s.Root)
		}
		var err error
		if client, err = s.Storage.client(); err != nil {
			return nil, err
		}
	}
	ctx := context.Background()
	switch s.Kind {
	case "files":
		o := sources.FileOptions{Root: s.Root, Extensions: s.Extensions, Recursive: s.Recursive}
		var paths []string
		var err error
		if remote {
			paths, err = sources.ListRemote(ctx, client, o)
		} else {
			paths, err = sources.ListFiles(o)
		}
		if err != nil {
			return nil, err
		}
		items := make(value.List, len(paths))
		for i, p := range paths {
			items[i] = p
		}
		return &listing{items: items}, nil
	case "image_folder":
		var f *sources.Folder
		var err error
		if remote {
			f, err = sources.ImageFolderRemote(ctx, client, s.Root, s.Extensions)
		} else {
			f, err = sources.ImageFolder(s.Root, s.Extensions)
		}
		if err != nil {
			return nil, err
		}
		items := make(value.List, len(f.Paths))
		for i, p := range f.Paths {
			items[i] = value.Tuple{p, f.Labels[i]}
		}
		return &listing{items: items, classes: f.Classes}, nil
	}
	return nil, fmt.Errorf("listing: unknown kind %q (want \"files\" or \"image_folder\")", s.Kind)
}

// peekListing lists s and keeps the result for the build that follows.
func peekListing(s listingSpec) (*listing, error) {
	l, err := s.list()
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
func takeListing(s listingSpec) (*listing, error) {
	listingsMu.Lock()
	l, ok := listings[s.key()]
	delete(listings, s.key())
	listingsMu.Unlock()
	if ok {
		return l, nil
	}
	return s.list()
}
