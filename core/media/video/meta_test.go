package video_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// ffmpegTo runs the ffmpeg CLI with args, writing clipDir/name, once per
// test binary, and returns the path.
func ffmpegTo(t *testing.T, name string, args ...string) string {
	t.Helper()
	clipsMu.Lock()
	defer clipsMu.Unlock()
	if p, ok := clips[name]; ok {
		return p
	}
	p := filepath.Join(clipDir, name)
	cmd := append(append([]string{"-v", "error", "-y"}, args...), p)
	if out, err := exec.Command("ffmpeg", cmd...).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %s: %v\n%s", strings.Join(cmd, " "), err, out)
	}
	clips[name] = p
	return p
}

// ffmpegFrames decodes the first n frames of path with the ffmpeg CLI
// (which turns frames by the display matrix by default) as RGB24.
func ffmpegFrames(t *testing.T, path string, n int) []byte {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-v", "error", "-i", path, "-frames:v", strconv.Itoa(n), "-f", "rawvideo", "-pix_fmt", "rgb24", "-").Output()
	if err != nil {
		t.Fatalf("ffmpeg decoding %s: %v", path, err)
	}
	return out
}

// turn rotates frame i of x (h x w x c) clockwise by degrees.
func turn(x *tensor.Tensor, i, degrees int) []byte {
	s := x.Shape()
	h, w, c := int(s[1]), int(s[2]), int(s[3])
	src := unsafe.Slice((*byte)(unsafe.Add(x.Data(), i*h*w*c)), h*w*c)
	out := make([]byte, len(src))
	for y := range h {
		for xx := range w {
			var o int
			switch degrees {
			case 90:
				o = xx*h + (h - 1 - y)
			case 180:
				o = (h-1-y)*w + (w - 1 - xx)
			case 270:
				o = (w-1-xx)*h + y
			}
			copy(out[o*c:(o+1)*c], src[(y*w+xx)*c:][:c])
		}
	}
	return out
}

func TestRotation(t *testing.T) {
	needEncoder(t, "libx264")
	base := makeClip(t, "rot-base.mp4", "testsrc2=s=64x48:r=8:d=1", "libx264", "-pix_fmt", "yuv420p")
	for _, deg := range []int{90, 180, 270} {
		t.Run(strconv.Itoa(deg), func(t *testing.T) {
			noLeak(t)
			// The CLI's "rotate" tag is counter-clockwise; the stream's
			// display matrix then asks for deg degrees clockwise.
			path := ffmpegTo(t, "rot"+strconv.Itoa(deg)+".mp4", "-i", base, "-c", "copy", "-metadata:s:v:0", "rotate="+strconv.Itoa((360-deg)%360))
			info, err := av.Probe(av.Source{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Streams[0].Rotation; got != deg {
				t.Fatalf("probe says rotation %d, want %d", got, deg)
			}
			ks := []int64{0, 3}
			plain := decode(t, av.Source{Path: path}, video.Options{Indices: ks})
			if s := plain.Shape(); !slices.Equal(s, []int64{2, 48, 64, 3}) {
				t.Fatalf("without apply_rotation: shape %v", s)
			}
			x := decode(t, av.Source{Path: path}, video.Options{Indices: ks, ApplyRotation: true})
			want := []int64{2, 64, 48, 3}
			if deg == 180 {
				want = []int64{2, 48, 64, 3}
			}
			if s := x.Shape(); !slices.Equal(s, want) {
				t.Fatalf("shape %v, want %v", s, want)
			}
			per := x.NBytes() / 2
			for i := range ks {
				if !bytes.Equal(frameBytes(x, i, per), turn(plain, i, deg)) {
					t.Fatalf("frame %d is not the unturned frame turned %d degrees", i, deg)
				}
			}
			// The same picture FFmpeg's CLI shows (its own YUV conversion:
			// close, not identical).
			ref := ffmpegFrames(t, path, 4)
			if len(ref) != 4*per {
				t.Fatalf("ffmpeg gave %d bytes for 4 frames, want %d (a %v frame each)", len(ref), 4*per, want[1:])
			}
			for i, k := range ks {
				got, exp := frameBytes(x, i, per), ref[int(k)*per:][:per]
				var sum float64
				for j := range got {
					sum += math.Abs(float64(got[j]) - float64(exp[j]))
				}
				if mean := sum / float64(per); mean > 4 {
					t.Fatalf("frame %d differs from ffmpeg's turned frame by %.1f on average", k, mean)
				}
			}
			// A size applies to the turned frame.
			y := decode(t, av.Source{Path: path}, video.Options{NumFrames: 2, ApplyRotation: true, Height: 20, Width: 10})
			if s := y.Shape(); !slices.Equal(s, []int64{2, 20, 10, 3}) {
				t.Fatalf("turned and resized: shape %v", s)
			}
			z := decode(t, av.Source{Path: path}, video.Options{NumFrames: 1, ApplyRotation: true, ShortSide: 24})
			if s := z.Shape(); (deg != 180 && !slices.Equal(s, []int64{1, 32, 24, 3})) || (deg == 180 && !slices.Equal(s, []int64{1, 24, 32, 3})) {
				t.Fatalf("turned, short side 24: shape %v", s)
			}
		})
	}
}

func TestSampleAspectRatio(t *testing.T) {
	noLeak(t)
	path := makeClip(t, "sar43.mp4", "testsrc2=s=64x48:r=8:d=1,setsar=4/3", "libx264", "-pix_fmt", "yuv420p")
	info, err := av.Probe(av.Source{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Streams[0].SampleAspectRatio; !slices.Equal(got, []int{4, 3}) {
		t.Fatalf("probe says sample aspect ratio %v, want [4 3]", got)
	}
	if s := decode(t, av.Source{Path: path}, video.Options{NumFrames: 2}).Shape(); !slices.Equal(s, []int64{2, 48, 64, 3}) {
		t.Fatalf("without apply_sar: shape %v", s)
	}
	if s := decode(t, av.Source{Path: path}, video.Options{NumFrames: 2, ApplySAR: true}).Shape(); !slices.Equal(s, []int64{2, 48, 85, 3}) {
		t.Fatalf("apply_sar: shape %v, want 48x85 (64*4/3)", s)
	}
	if s := decode(t, av.Source{Path: path}, video.Options{NumFrames: 1, ApplySAR: true, ShortSide: 24}).Shape(); !slices.Equal(s, []int64{1, 24, 43, 3}) {
		t.Fatalf("apply_sar, short side 24: shape %v", s)
	}
	// Square pixels: nothing changes.
	sq := makeClip(t, "testsrc2.mp4", "testsrc2=s=64x48:r=8:d=1", "libx264", "-pix_fmt", "yuv420p")
	a := decode(t, av.Source{Path: sq}, video.Options{NumFrames: 2, ApplySAR: true, ApplyRotation: true})
	b := decode(t, av.Source{Path: sq}, video.Options{NumFrames: 2})
	if firstDiff(a, b) >= 0 || !slices.Equal(a.Shape(), b.Shape()) {
		t.Fatal("apply_sar and apply_rotation changed a square-pixel, unturned clip")
	}
}

// TestCoverArt: an MP3 with cover art is audio; its picture is not a
// one-frame video.
func TestCoverArt(t *testing.T) {
	needEncoder(t, "libmp3lame")
	noLeak(t)
	cover := makeClip(t, "cover.png", "testsrc2=s=32x32:d=1", "png", "-frames:v", "1")
	path := ffmpegTo(t, "cover.mp3", "-f", "lavfi", "-i", "sine=frequency=440:duration=1", "-i", cover,
		"-map", "0", "-map", "1", "-c:a", "libmp3lame", "-c:v", "png", "-disposition:v", "attached_pic")
	info, err := av.Probe(av.Source{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var pic bool
	for _, s := range info.Streams {
		pic = pic || (s.Type == "video" && s.AttachedPicture)
	}
	if !pic {
		t.Fatalf("probe shows no attached picture: %+v", info.Streams)
	}
	for _, src := range []av.Source{{Path: path}, {Data: mustRead(t, path), Name: path}} {
		_, err := video.Decode(context.Background(), src, video.Options{NumFrames: 1})
		var e *av.Error
		if err == nil || !errors.As(err, &e) || e.Source != path || !strings.Contains(err.Error(), "cover art") {
			t.Fatalf("decoding the video of an MP3 with cover art: %v; want an error naming %s and its cover art", err, path)
		}
		x, err := audio.Decode(context.Background(), src, audio.Options{})
		if err != nil {
			t.Fatalf("the audio of an MP3 with cover art: %v", err)
		}
		if s := x.Shape(); s[len(s)-1] < 40000 {
			t.Errorf("audio shape %v, want about a second at 44.1 kHz", x.Shape())
		}
		x.Release()
	}
}
