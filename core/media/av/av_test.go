package av_test

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/asticode/go-astiav"

	"github.com/spdl-go/spdl-go/core/media/av"
)

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProbe(t *testing.T) {
	cases := []struct {
		file  string
		check func(t *testing.T, info *av.Info)
	}{
		{"testdata/clip.mp4", func(t *testing.T, info *av.Info) {
			s := info.Streams[0]
			if s.Type != "video" || s.Codec != "h264" || s.Width != 64 || s.Height != 48 || s.Frames != 10 || s.FrameRate != 10 {
				t.Fatalf("video stream %+v", s)
			}
			if info.Duration < 0.9 || info.Duration > 1.1 {
				t.Fatalf("duration %v", info.Duration)
			}
		}},
		{"testdata/tone.wav", func(t *testing.T, info *av.Info) {
			s := info.Streams[0]
			if s.Type != "audio" || s.SampleRate != 16000 || s.Channels != 1 {
				t.Fatalf("audio stream %+v", s)
			}
			// The WAV header is complete, so stream info is not read
			// ahead; the durations must still be there.
			if s.Duration <= 0 || info.Duration != s.Duration || info.BitRate != 256000 {
				t.Fatalf("duration %v (stream %v), bit rate %v", info.Duration, s.Duration, info.BitRate)
			}
		}},
		{"testdata/red.png", func(t *testing.T, info *av.Info) {
			if s := info.Streams[0]; s.Width != 8 || s.Height != 6 || s.Codec != "png" {
				t.Fatalf("image stream %+v", s)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			info, err := av.Probe(av.Source{Path: tc.file})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, info)
			// The same from bytes.
			info, err = av.Probe(av.Source{Data: mustRead(t, tc.file), Name: tc.file})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, info)
		})
	}
}

func TestDecodeAllFrames(t *testing.T) {
	for _, src := range []av.Source{{Path: "testdata/clip.mp4"}, {Data: mustRead(t, "testdata/clip.mp4")}} {
		in, err := av.Open(src, av.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := in.Stream(astiav.MediaTypeVideo)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := in.OpenDecoder(st, av.DecoderOptions{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			f, err := dec.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Width() != 64 || f.Height() != 48 {
				t.Fatalf("frame %dx%d", f.Width(), f.Height())
			}
			n++
		}
		dec.Close()
		in.Close()
		in.Close()
		if n != 10 {
			t.Fatalf("%s: decoded %d frames, want 10", src, n)
		}
	}
}

func TestOpenErrorsNameTheInput(t *testing.T) {
	empty := t.TempDir() + "/empty.mp4"
	os.WriteFile(empty, nil, 0o644)
	cases := []struct {
		name string
		src  av.Source
		want string
	}{
		{"missing", av.Source{Path: "testdata/nope.mp4"}, `open "testdata/nope.mp4": `},
		{"empty file", av.Source{Path: empty}, "empty file"},
		{"empty bytes", av.Source{Data: []byte{}, Name: "x.wav"}, `open "x.wav": empty input`},
		{"garbage", av.Source{Data: []byte(strings.Repeat("not media ", 100)), Name: "g.mp4"}, `"g.mp4"`},
		{"truncated", av.Source{Data: mustRead(t, "testdata/clip.mp4")[:100], Name: "t.mp4"}, `"t.mp4"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := av.Open(tc.src, av.OpenOptions{})
			if err == nil {
				// Some truncations open; then decoding must fail or end early.
				in.Close()
				return
			}
			var ae *av.Error
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want an *av.Error containing %q", err, tc.want)
			}
		})
	}
}
