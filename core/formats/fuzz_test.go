package formats

import (
	"archive/zip"
	"testing"
)

// The fuzz targets check that no input makes a parser panic, hang or
// return a view outside its input, and that what it accepts is consistent.

func FuzzNpy(f *testing.F) {
	f.Add(npyBytes("<f4", false, "(2, 3)", seq(24)))
	f.Add(npyBytes(">i2", true, "(2, 2, 2)", seq(16)))
	f.Add(npyBytes("|b1", false, "()", seq(1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseNpy(b)
		if err != nil {
			return
		}
		n := a.Numel() * int64(a.ItemSize)
		if int64(len(a.Data)) != n {
			t.Fatalf("data of %d bytes for %d", len(a.Data), n)
		}
		if n <= 1<<20 {
			a.CopyC(make([]byte, n))
		}
	})
}

func FuzzNpz(f *testing.F) {
	x := npyBytes("|u1", false, "(4,)", seq(4))
	f.Add(zipOf(f, zip.Store, map[string][]byte{"x.npy": x}))
	f.Add(zipOf(f, zip.Deflate, map[string][]byte{"x.npy": x, "y.npy": x}))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := ParseNpz(b, 1<<20)
		if err != nil {
			return
		}
		var total int
		for _, e := range entries {
			total += len(e.Array.Data)
		}
		if total > 1<<20 {
			t.Fatalf("%d bytes of arrays past a 1 MiB limit", total)
		}
	})
}

func FuzzWAV(f *testing.F) {
	f.Add(wavBytes(1, 2, 8000, 16, seq(40), false), 0.0, -1.0)
	f.Add(wavBytes(3, 2, 48000, 32, seq(32), true), 0.0001, 0.0)
	f.Fuzz(func(t *testing.T, b []byte, off, dur float64) {
		w, err := ParseWAV(b)
		if err != nil {
			return
		}
		if len(w.Data)%w.frameSize() != 0 {
			t.Fatalf("data of %d bytes is not whole frames of %d", len(w.Data), w.frameSize())
		}
		_ = w.Window(off, dur)
		if len(w.Data)%w.frameSize() != 0 {
			t.Fatalf("window of %d bytes is not whole frames", len(w.Data))
		}
	})
}

func FuzzTar(f *testing.F) {
	f.Add(tarOf(f, "a.jpg", "a.cls"))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := ParseTar(b)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Offset < 0 || e.Size < 0 || e.Offset+e.Size > int64(len(b)) {
				t.Fatalf("entry %+v outside %d bytes", e, len(b))
			}
		}
	})
}
