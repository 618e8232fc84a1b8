package sources_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/sources"
)

// tree writes files (relative paths) under a new temporary directory.
func tree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		if strings.HasSuffix(f, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func rel(root string, paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		r, _ := filepath.Rel(root, p)
		out[i] = filepath.ToSlash(r)
	}
	return out
}

func TestListFiles(t *testing.T) {
	root := tree(t, "a/1.jpg", "a/2.JPG", "a/notes.txt", "b/sub/3.jpg", "b/sub/deeper/4.jpeg", "c/", "top.png")
	if err := os.Symlink(filepath.Join(root, "a/1.jpg"), filepath.Join(root, "b/link.jpg")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "missing"), filepath.Join(root, "b/dangling.jpg")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		o    sources.FileOptions
		want []string
		err  string
	}{
		{"recursive", sources.FileOptions{Root: root, Recursive: true},
			[]string{"a/1.jpg", "a/2.JPG", "a/notes.txt", "b/link.jpg", "b/sub/3.jpg", "b/sub/deeper/4.jpeg", "top.png"}, ""},
		{"top level only", sources.FileOptions{Root: root}, []string{"top.png"}, ""},
		{"extensions, any case, with or without dot", sources.FileOptions{Root: root, Recursive: true, Extensions: []string{"jpg", ".JPEG"}},
			[]string{"a/1.jpg", "a/2.JPG", "b/link.jpg", "b/sub/3.jpg", "b/sub/deeper/4.jpeg"}, ""},
		{"glob **", sources.FileOptions{Root: root + "/**/*.jpg"}, []string{"a/1.jpg", "b/link.jpg", "b/sub/3.jpg"}, ""},
		{"glob one level", sources.FileOptions{Root: root + "/*/*.jpg"}, []string{"a/1.jpg", "b/link.jpg"}, ""},
		{"glob then extension", sources.FileOptions{Root: root + "/b/**", Extensions: []string{"jpeg"}}, []string{"b/sub/deeper/4.jpeg"}, ""},
		{"glob [class]", sources.FileOptions{Root: root + "/[ab]/*.txt"}, []string{"a/notes.txt"}, ""},
		{"missing root", sources.FileOptions{Root: root + "/nope"}, nil, "nope: no such file or directory"},
		{"root is a file", sources.FileOptions{Root: root + "/top.png"}, nil, "top.png is not a directory"},
		{"bad pattern", sources.FileOptions{Root: root + "/[a"}, nil, "bad pattern"},
		{"nothing matches", sources.FileOptions{Root: root, Recursive: true, Extensions: []string{"wav"}}, nil, "no files with extension .wav under " + root},
		{"empty extension", sources.FileOptions{Root: root, Extensions: []string{""}}, nil, "empty extension"},
		{"empty root", sources.FileOptions{}, nil, "root is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := sources.ListFiles(c.o)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want it to contain %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := rel(root, got); !slices.Equal(r, c.want) {
				t.Errorf("got %q, want %q", r, c.want)
			}
		})
	}
}

func TestListFilesUnreadableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every directory")
	}
	root := tree(t, "ok/1.jpg", "locked/2.jpg")
	if err := os.Chmod(filepath.Join(root, "locked"), 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(filepath.Join(root, "locked"), 0o755)
	_, err := sources.ListFiles(sources.FileOptions{Root: root, Recursive: true})
	if err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("err = %v, want it to name the locked directory", err)
	}
}

func TestImageFolder(t *testing.T) {
	root := tree(t, "dog/3.jpg", "dog/x/2.jpg", "cat/1.jpg", "cat/readme.txt", "loose.jpg")
	f, err := sources.ImageFolder(root, []string{"jpg"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Classes, []string{"cat", "dog"}) {
		t.Errorf("classes %v", f.Classes)
	}
	if r := rel(root, f.Paths); !slices.Equal(r, []string{"cat/1.jpg", "dog/3.jpg", "dog/x/2.jpg"}) {
		t.Errorf("paths %v", r)
	}
	if !slices.Equal(f.Labels, []int64{0, 1, 1}) {
		t.Errorf("labels %v", f.Labels)
	}
	for _, c := range []struct {
		name, root, err string
	}{
		{"empty class", tree(t, "a/1.jpg", "b/"), `class "b": files: no files with extension .jpg`},
		{"no classes", tree(t, "1.jpg"), "has no class subdirectories"},
		{"missing", filepath.Join(root, "nope"), "nope: no such file or directory"},
	} {
		if _, err := sources.ImageFolder(c.root, []string{"jpg"}); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.err)
		}
	}
}
