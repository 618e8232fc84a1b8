package img

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestReadFilePooled(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		size int
	}{
		{"empty", 0},
		{"small", 100},
		{"exactly the first buffer", 256 << 10},
		{"bigger than the first buffer", 300 << 10},
		{"over the pool limit", maxPooledFile + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := bytes.Repeat([]byte{0xA5, 0x01, 0x7F}, c.size/3+1)[:c.size]
			path := filepath.Join(dir, c.name)
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			// Twice: the second read reuses the first one's buffer.
			for i := 0; i < 2; i++ {
				got, release, err := readFilePooled(path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("read %d bytes, want the file's %d", len(got), len(want))
				}
				release()
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		if _, _, err := readFilePooled(filepath.Join(dir, "nope")); !os.IsNotExist(err) {
			t.Fatalf("err = %v, want not-exist", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		if _, _, err := readFilePooled(dir); err == nil {
			t.Fatal("reading a directory succeeded")
		}
	})
}
