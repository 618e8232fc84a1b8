package formats

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// npyBytes writes a version 1.0 .npy file with the given header fields.
func npyBytes(descr string, fortran bool, shape string, data []byte) []byte {
	f := "False"
	if fortran {
		f = "True"
	}
	return npyRaw(fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, f, shape), data)
}

// npyRaw writes a version 1.0 .npy file with header h.
func npyRaw(h string, data []byte) []byte {
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	_ = binary.Write(&b, binary.LittleEndian, uint16(len(h)))
	b.WriteString(h)
	b.Write(data)
	return b.Bytes()
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestParseNpy(t *testing.T) {
	i16 := seq(12) // six int16
	for _, tc := range []struct {
		name  string
		in    []byte
		dtype string
		shape []int64
		want  []byte
	}{
		{"uint8 2x3", npyBytes("|u1", false, "(2, 3)", seq(6)), "uint8", []int64{2, 3}, seq(6)},
		{"scalar", npyBytes("<f8", false, "()", seq(8)), "float64", []int64{}, seq(8)},
		{"empty", npyBytes("<f4", false, "(0, 5)", nil), "float32", []int64{0, 5}, []byte{}},
		{"1-d trailing comma", npyBytes("<i2", false, "(6,)", i16), "int16", []int64{6}, i16},
		{"trailing bytes ignored", npyBytes("|b1", false, "(2,)", []byte{1, 0, 9}), "bool", []int64{2}, []byte{1, 0}},
		// big-endian int16 [0x0001, 0x0203, ...] become little-endian
		{"big endian", npyBytes(">i2", false, "(3,)", seq(6)), "int16", []int64{3}, []byte{1, 0, 3, 2, 5, 4}},
		// Fortran 2x3 uint8: column-major 0..5 is rows [0 2 4] [1 3 5]
		{"fortran", npyBytes("|u1", true, "(2, 3)", seq(6)), "uint8", []int64{2, 3}, []byte{0, 2, 4, 1, 3, 5}},
		{"fortran 2x2x2 int16", npyBytes("<i2", true, "(2, 2, 2)", seq(16)), "int16", []int64{2, 2, 2},
			// element (i,j,k) is at i + 2j + 4k in column-major order
			[]byte{0, 1, 8, 9, 4, 5, 12, 13, 2, 3, 10, 11, 6, 7, 14, 15}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseNpy(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if a.DType() != tc.dtype || fmt.Sprint(a.Shape) != fmt.Sprint(tc.shape) {
				t.Fatalf("got %s %v, want %s %v", a.DType(), a.Shape, tc.dtype, tc.shape)
			}
			got := make([]byte, a.Numel()*int64(a.ItemSize))
			a.CopyC(got)
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("data %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseNpyBad(t *testing.T) {
	good := npyBytes("<f4", false, "(2, 3)", seq(24))
	flipped := bytes.Clone(good)
	flipped[20] ^= 0xff
	v2 := bytes.Clone(good)
	v2[6] = 2
	huge := append([]byte("\x93NUMPY\x02\x00"), 0xff, 0xff, 0xff, 0x7f)
	for _, tc := range []struct {
		name, want string
		in         []byte
	}{
		{"zero bytes", "empty input", nil},
		{"not npy", "not a .npy file", []byte("PK\x03\x04 this is a zip")},
		{"truncated header", "truncated header", good[:40]},
		{"truncated data", "truncated data", good[:len(good)-1]},
		{"flipped header byte", "npy: header", flipped},
		{"version 2 reads the length as 4 bytes", "npy:", v2},
		{"huge header", "over the limit", huge},
		{"object dtype", "unsupported dtype", npyBytes("|O", false, "(1,)", seq(8))},
		{"complex", "unsupported dtype", npyBytes("<c8", false, "(1,)", seq(8))},
		{"structured", "structured", npyRaw("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", seq(4))},
		{"negative dim", "integers >= 0", npyBytes("<f4", false, "(-1,)", nil)},
		// 2^40 * 2^40 elements overflow; a declared size far over the data is truncated
		{"overflow", "overflows", npyBytes("|u1", false, "(1099511627776, 1099511627776)", nil)},
		{"bomb shape", "truncated data", npyBytes("<f8", false, "(100000, 100000)", seq(64))},
		{"missing key", "lacks", npyRaw("{'descr': '<f4', 'shape': (1,), }", seq(4))},
		{"unknown key", "unknown key", npyRaw("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", seq(4))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNpy(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func zipOf(t testing.TB, method uint16, members map[string][]byte) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, name := range []string{"x.npy", "y.npy", "z.npy", "bad.txt"} {
		data, ok := members[name]
		if !ok {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestParseNpz(t *testing.T) {
	x := npyBytes("|u1", false, "(4,)", seq(4))
	y := npyBytes("<f8", false, "(2, 2)", seq(32))
	for _, method := range []uint16{zip.Store, zip.Deflate} {
		entries, err := ParseNpz(zipOf(t, method, map[string][]byte{"x.npy": x, "y.npy": y}), DefaultMaxUncompressed)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 || entries[0].Name != "x" || entries[1].Name != "y" ||
			entries[1].Array.DType() != "float64" || !bytes.Equal(entries[0].Array.Data, seq(4)) {
			t.Fatalf("method %d: got %+v", method, entries)
		}
	}
}

func TestParseNpzBad(t *testing.T) {
	x := npyBytes("|u1", false, "(4,)", seq(4))
	good := zipOf(t, zip.Deflate, map[string][]byte{"x.npy": x})
	// A bomb: 64 MiB of zeros deflates to ~64 KiB.
	zeros := npyBytes("|u1", false, "(67108864,)", make([]byte, 64<<20))
	bomb := zipOf(t, zip.Deflate, map[string][]byte{"z.npy": zeros})
	// The same bomb with its declared sizes rewritten to 4 bytes: the limit
	// passes, inflating must stop at the declared size.
	liar := bytes.Clone(bomb)
	for _, sig := range []string{"PK\x03\x04", "PK\x01\x02"} {
		i := bytes.Index(liar, []byte(sig))
		at := map[string]int{"PK\x03\x04": 22, "PK\x01\x02": 24}[sig]
		binary.LittleEndian.PutUint32(liar[i+at:], 4)
	}
	flipped := bytes.Clone(good)
	flipped[45] ^= 0xff
	for _, tc := range []struct {
		name, want string
		in         []byte
		limit      int64
	}{
		{"zero bytes", "empty input", nil, DefaultMaxUncompressed},
		{"not zip", "not a zip archive", x, DefaultMaxUncompressed},
		{"truncated", "not a zip archive", good[:len(good)-10], DefaultMaxUncompressed},
		{"flipped", "npz", flipped, DefaultMaxUncompressed},
		{"bomb over the limit", "over max_uncompressed_bytes (1000000)", bomb, 1_000_000},
		{"lying sizes", "npz: member \"z.npy\"", liar, 1_000_000},
		{"member npy is bad", "member \"x.npy\": npy: truncated data", zipOf(t, zip.Store, map[string][]byte{"x.npy": x[:len(x)-1]}), DefaultMaxUncompressed},
		{"not npy member", "not an .npy file", zipOf(t, zip.Store, map[string][]byte{"bad.txt": x}), DefaultMaxUncompressed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNpz(tc.in, tc.limit)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := ParseNpz(bomb, 80<<20); err != nil {
		t.Fatalf("the bomb within a raised limit: %v", err)
	}
}

// wavBytes writes a WAV file; extra chunks go before data.
func wavBytes(format, channels, rate, bits int, data []byte, extensible bool) []byte {
	var fmtc bytes.Buffer
	code := uint16(format)
	if extensible {
		code = 0xFFFE
	}
	le := binary.LittleEndian
	binary.Write(&fmtc, le, code)
	binary.Write(&fmtc, le, uint16(channels))
	binary.Write(&fmtc, le, uint32(rate))
	binary.Write(&fmtc, le, uint32(rate*channels*bits/8))
	binary.Write(&fmtc, le, uint16(channels*bits/8))
	binary.Write(&fmtc, le, uint16(bits))
	if extensible {
		binary.Write(&fmtc, le, uint16(22))
		binary.Write(&fmtc, le, uint16(bits))
		binary.Write(&fmtc, le, uint32(3))
		binary.Write(&fmtc, le, uint16(format))
		fmtc.Write(make([]byte, 14))
	}
	var b bytes.Buffer
	b.WriteString("RIFF")
	binary.Write(&b, le, uint32(4+8+fmtc.Len()+8+3+1+8+len(data)))
	b.WriteString("WAVEfmt ")
	binary.Write(&b, le, uint32(fmtc.Len()))
	b.Write(fmtc.Bytes())
	b.WriteString("LIST")
	binary.Write(&b, le, uint32(3))
	b.WriteString("abc\x00") // odd-sized chunk and its pad byte
	b.WriteString("data")
	binary.Write(&b, le, uint32(len(data)))
	b.Write(data)
	return b.Bytes()
}

func TestParseWAV(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       []byte
		dtype    string
		channels int
		frames   int64
	}{
		{"pcm16 stereo", wavBytes(1, 2, 8000, 16, seq(40), false), "int16", 2, 10},
		{"pcm8 mono", wavBytes(1, 1, 8000, 8, seq(7), false), "uint8", 1, 7},
		{"pcm32", wavBytes(1, 1, 8000, 32, seq(16), false), "int32", 1, 4},
		{"float32 extensible", wavBytes(3, 2, 48000, 32, seq(32), true), "float32", 2, 4},
		{"float64", wavBytes(3, 1, 48000, 64, seq(24), false), "float64", 1, 3},
		{"partial frame dropped", wavBytes(1, 2, 8000, 16, seq(41), false), "int16", 2, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWAV(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if w.DType() != tc.dtype || w.Channels != tc.channels || w.Frames() != tc.frames {
				t.Fatalf("got %s, %d channels, %d frames", w.DType(), w.Channels, w.Frames())
			}
		})
	}
	w, _ := ParseWAV(wavBytes(1, 1, 10, 16, seq(40), false)) // 20 frames, 2 s
	if err := w.Window(0.5, 1); err != nil || w.Frames() != 10 || w.Data[0] != 10 {
		t.Fatalf("window 0.5 s + 1 s: %v, %d frames, first byte %d", err, w.Frames(), w.Data[0])
	}
	w, _ = ParseWAV(wavBytes(1, 1, 10, 16, seq(40), false))
	if err := w.Window(1.5, -1); err != nil || w.Frames() != 5 {
		t.Fatalf("window from 1.5 s: %v, %d frames", err, w.Frames())
	}
	for _, off := range []float64{3, -1} {
		w, _ = ParseWAV(wavBytes(1, 1, 10, 16, seq(40), false))
		if err := w.Window(off, -1); err == nil {
			t.Fatalf("offset %v: no error", off)
		}
	}
}

func TestParseWAVBad(t *testing.T) {
	good := wavBytes(1, 2, 8000, 16, seq(40), false)
	for _, tc := range []struct {
		name, want string
		in         []byte
	}{
		{"zero bytes", "empty input", nil},
		{"not wav", "not a RIFF WAVE", []byte("\x89PNG\r\n\x1a\n.............")},
		{"header only", "no fmt chunk", good[:12]},
		{"truncated data", "the data chunk declares 40 bytes, 30 are present", good[:len(good)-10]},
		{"truncated fmt", "truncated fmt", good[:30]},
		{"24-bit", "unsupported sample size of 24 bits", wavBytes(1, 1, 8000, 24, seq(6), false)},
		{"a-law", "unsupported format code 0x6", wavBytes(6, 1, 8000, 8, seq(6), false)},
		{"no channels", "0 channels", wavBytes(1, 0, 8000, 16, nil, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseWAV(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func tarOf(t testing.TB, files ...string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755})
	for _, name := range files {
		body := "contents of " + name
		if err := tw.WriteHeader(&tar.Header{Name: name, Size: int64(len(body)), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestParseTar(t *testing.T) {
	long := "dir/" + strings.Repeat("long", 40) + ".jpg" // needs a PAX/GNU long name
	b := tarOf(t, "dir/a.jpg", "dir/a.cls", long)
	entries, err := ParseTar(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[2].Name != long {
		t.Fatalf("got %+v", entries)
	}
	for _, e := range entries {
		if got := string(b[e.Offset : e.Offset+e.Size]); got != "contents of "+e.Name {
			t.Fatalf("%s: contents %q", e.Name, got)
		}
	}
	// Without the closing zero blocks, as Python's tarfile accepts.
	if entries, err := ParseTar(b[:len(b)-1024]); err != nil || len(entries) != 3 {
		t.Fatalf("unterminated: %v, %d entries", err, len(entries))
	}
}

func TestParseTarBad(t *testing.T) {
	good := tarOf(t, "a.jpg", "b.jpg")
	flipped := bytes.Clone(good)
	flipped[512+100] ^= 0xff // the second header's mode field: its checksum no longer matches
	for _, tc := range []struct {
		name, want string
		in         []byte
	}{
		{"zero bytes", "empty input", nil},
		{"not tar", "not a tar archive", bytes.Repeat([]byte("not a tar "), 100)},
		{"truncated contents", "truncated", good[:512*3+5]},
		{"truncated header", "truncated", good[:512*2+100]},
		{"flipped header", "tar:", flipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTar(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
