package img_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/img"
)

// TestJPEGMatchesTJDecompress2 checks that a full-size decode gives
// exactly the pixels of TurboJPEG's tjDecompress2 with flags 0 (accurate
// integer IDCT, smooth upsampling) on the same bytes, from bytes and from a
// path, in every mode; and that a centre crop without a resize (decoded
// through the libjpeg window path) is exactly that rectangle of it.
func TestJPEGMatchesTJDecompress2(t *testing.T) {
	noLeak(t)
	type src struct {
		name string
		data []byte
	}
	var srcs []src
	for i, s := range photoSizes {
		srcs = append(srcs, src{fmt.Sprintf("%dx%d_420", s[0], s[1]), encJPEG(t, cameraPhoto(s[0], s[1], uint64(100+i)), 90)})
	}
	for _, name := range []string{"photo.jpg", "progressive.jpg", "gray.jpg"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src{name, data})
	}
	for _, pf := range []string{"yuvj444p", "yuvj422p"} {
		srcs = append(srcs, src{"341x227_" + pf, encFFmpeg(t, cameraPhoto(341, 227, 7), "jpg", "-pix_fmt", pf, "-q:v", "2")})
	}
	dir := t.TempDir()
	for _, s := range srcs {
		path := filepath.Join(dir, s.name+".jpg")
		if err := os.WriteFile(path, s.data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []img.Mode{img.RGB, img.BGR, img.Gray} {
			t.Run(fmt.Sprintf("%s/mode%d", s.name, mode), func(t *testing.T) {
				want, h, w, err := img.TJReference(s.data, mode)
				if err != nil {
					t.Fatal(err)
				}
				c := mode.Channels()
				o := img.DecodeOptions{Mode: mode}
				fromBytes := decode(t, s.data, o)
				x, err := img.DecodeFile(path, o)
				if err != nil {
					t.Fatal(err)
				}
				fromPath := pix(t, x)
				for _, got := range []struct {
					how string
					p   pixels
				}{{"bytes", fromBytes}, {"path", fromPath}} {
					if got.p.h != h || got.p.w != w || got.p.c != c {
						t.Fatalf("%s: got %dx%dx%d, tjDecompress2 %dx%dx%d", got.how, got.p.h, got.p.w, got.p.c, h, w, c)
					}
					if i := firstDiff(got.p.b, want); i >= 0 {
						t.Fatalf("%s: byte %d (row %d) is %d, tjDecompress2 %d", got.how, i, i/(w*c), got.p.b[i], want[i])
					}
				}
				// A crop whose margins are even, so the centre is exact.
				ch, cw := min(h, 64+h%2), min(w, 64+w%2)
				crop := decode(t, s.data, img.DecodeOptions{Mode: mode, Crop: img.CropOptions{Kind: img.CropCenter, Height: ch, Width: cw}})
				y0, x0 := (h-ch)/2, (w-cw)/2
				for y := range ch {
					row := want[((y0+y)*w+x0)*c : ((y0+y)*w+x0+cw)*c]
					if !bytes.Equal(crop.b[y*cw*c:(y+1)*cw*c], row) {
						t.Fatalf("centre crop %dx%d: row %d differs from tjDecompress2's", ch, cw, y)
					}
				}
			})
		}
	}
}

// firstDiff is the index of the first byte where a and b differ, or -1
// (a length mismatch counts at the shorter length).
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
