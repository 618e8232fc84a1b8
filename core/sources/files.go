package sources

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// FileOptions selects files.
type FileOptions struct {
	// Root is a directory, or a glob pattern: * ? and [...] match within a
	// path element, ** matches any number of elements (e.g.
	// "/data/train/**/*.jpg").
	Root string
	// Extensions keeps files whose name ends with one of them (".jpg" or
	// "jpg", compared case-insensitively); empty keeps every file.
	Extensions []string
	// Recursive descends into subdirectories of a directory Root (a
	// pattern says itself how deep it goes).
	Recursive bool
}

// ListFiles returns the regular files (and links to them) that o selects,
// sorted by path. A Root that does not exist, a malformed pattern, a
// directory that cannot be read and a selection with no file are errors
// that name the path.
func ListFiles(o FileOptions) ([]string, error) {
	if o.Root == "" {
		return nil, errors.New("files: root is empty; give a directory or a glob pattern")
	}
	exts, err := normExts(o.Extensions)
	if err != nil {
		return nil, err
	}
	base, pattern := splitPattern(o.Root)
	if pattern != "" {
		if _, err := path.Match(strings.ReplaceAll(pattern, "**", "*"), ""); err != nil {
			return nil, fmt.Errorf("files: bad pattern %q: %w", o.Root, err)
		}
	}
	st, err := os.Stat(base)
	if err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	if !st.IsDir() {
		if pattern == "" {
			return nil, fmt.Errorf("files: %s is not a directory", base)
		}
		return nil, fmt.Errorf("files: %s (the fixed part of %q) is not a directory", base, o.Root)
	}
	var out []string
	err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("files: %w", err) // an unreadable directory names itself
		}
		rel, _ := filepath.Rel(base, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if p == base {
				return nil
			}
			if pattern == "" && !o.Recursive {
				return fs.SkipDir
			}
			if pattern != "" && !couldMatchBelow(pattern, rel) {
				return fs.SkipDir
			}
			return nil
		}
		if !isRegular(p, d) {
			return nil
		}
		if pattern != "" && !matchPath(pattern, rel) {
			return nil
		}
		if !hasExt(d.Name(), exts) {
			return nil
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		what := "no files"
		if len(exts) > 0 {
			what = fmt.Sprintf("no files with extension %s", strings.Join(exts, ", "))
		}
		return nil, fmt.Errorf("files: %s under %s", what, o.Root)
	}
	slices.Sort(out)
	return out, nil
}

// Folder is an ImageNet-style dataset: one subdirectory per class, named
// by the class, holding that class's files at any depth.
type Folder struct {
	Paths   []string // sorted by class, then path
	Labels  []int64  // Labels[i] indexes Classes
	Classes []string // the subdirectory names, sorted
}

// ImageFolder lists root/<class>/**/<file> (files directly in root are
// not samples). Classes are numbered in sorted order, as torchvision's
// ImageFolder does. A class directory with no selected file is an error,
// since it would shift every later label.
func ImageFolder(root string, extensions []string) (*Folder, error) {
	exts, err := normExts(extensions)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("image_folder: %w", err)
	}
	f := &Folder{}
	for _, e := range entries {
		if e.IsDir() || (e.Type()&fs.ModeSymlink != 0 && isDir(filepath.Join(root, e.Name()))) {
			f.Classes = append(f.Classes, e.Name())
		}
	}
	if len(f.Classes) == 0 {
		return nil, fmt.Errorf("image_folder: %s has no class subdirectories", root)
	}
	slices.Sort(f.Classes)
	for label, class := range f.Classes {
		paths, err := ListFiles(FileOptions{Root: filepath.Join(root, class), Extensions: exts, Recursive: true})
		if err != nil {
			return nil, fmt.Errorf("image_folder: class %q: %w", class, err)
		}
		f.Paths = append(f.Paths, paths...)
		for range paths {
			f.Labels = append(f.Labels, int64(label))
		}
	}
	return f, nil
}

// splitPattern splits a glob into the directory before its first element
// with a wildcard and the rest; pattern is "" for a plain path.
func splitPattern(root string) (base, pattern string) {
	root = filepath.Clean(root)
	parts := strings.Split(filepath.ToSlash(root), "/")
	for i, p := range parts {
		if strings.ContainsAny(p, "*?[") {
			base = strings.Join(parts[:i], "/")
			if base == "" && i > 0 {
				base = "/"
			} else if base == "" {
				base = "."
			}
			return filepath.FromSlash(base), strings.Join(parts[i:], "/")
		}
	}
	return root, ""
}

// matchPath matches a slash-separated relative path against a pattern
// whose elements are path.Match patterns or **.
func matchPath(pattern, rel string) bool {
	return matchParts(strings.Split(pattern, "/"), strings.Split(rel, "/"))
}

func matchParts(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchParts(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// couldMatchBelow reports whether files under directory rel may match.
func couldMatchBelow(pattern, rel string) bool {
	pat, dir := strings.Split(pattern, "/"), strings.Split(rel, "/")
	for i, d := range dir {
		if i < len(pat) && pat[i] == "**" {
			return true
		}
		if i >= len(pat)-1 { // the last element names files, not directories
			return false
		}
		if ok, _ := path.Match(pat[i], d); !ok {
			return false
		}
	}
	return true
}

func normExts(exts []string) ([]string, error) {
	var out []string
	for _, e := range exts {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" || e == "." {
			return nil, fmt.Errorf("files: empty extension in %q", exts)
		}
		if !strings.HasPrefix(e, ".") {
			e = "." + e
		}
		out = append(out, e)
	}
	return out, nil
}

func hasExt(name string, exts []string) bool {
	if len(exts) == 0 {
		return true
	}
	name = strings.ToLower(name)
	for _, e := range exts {
		if strings.HasSuffix(name, e) {
			return true
		}
	}
	return false
}

// isRegular accepts regular files and links that resolve to one.
func isRegular(p string, d fs.DirEntry) bool {
	if d.Type().IsRegular() {
		return true
	}
	if d.Type()&fs.ModeSymlink != 0 {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular()
	}
	return false
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
