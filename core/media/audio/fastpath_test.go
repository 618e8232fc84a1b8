package audio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
)

// TestFastPathIdentical decodes every format, mono and stereo, with and
// without resampling and remixing, three ways: the general path (format
// probe, stream info, a new resampler), then the fast path twice (opened
// by signature; the second decode takes the first one's resampler from
// the cache). All three must give the same samples, bit for bit.
func TestFastPathIdentical(t *testing.T) {
	checkLeaks(t)
	opts := []audio.Options{
		{},
		{SampleRate: 16000, NumChannels: 1, NumSamples: 20000}, // bench_audio.py's work
		{SampleRate: 22050},
		{NumChannels: 2},
		{SampleRate: 8000, Start: 0.6, Duration: 0.3}, // seeks
		{Start: 0.25, NumSamples: 1000},
	}
	for _, f := range formats {
		for _, nch := range []int{1, 2} {
			t.Run(f.ext+"/"+itoa(nch)+"ch", func(t *testing.T) {
				freqs := []int{440, 660}[:nch]
				path := f.tone(t, t.TempDir(), 44100, 1.2, freqs...)
				data := mustRead(t, path)
				for _, o := range opts {
					for _, src := range []av.Source{{Path: path}, {Data: data, Name: "bytes"}} {
						old := audio.SetFastOpen(false)
						audio.ClearResamplerCache()
						want := decode(t, src, o)
						audio.SetFastOpen(true)
						first := decode(t, src, o)
						again := decode(t, src, o)
						audio.SetFastOpen(old)
						for i, got := range []decoded{first, again} {
							if err := same(got, want); err != "" {
								t.Fatalf("%+v from %v, fast path (decode %d): %s", o, src, i+1, err)
							}
						}
					}
				}
			})
		}
	}
}

// same says how a differs from b, or "" when they are identical.
func same(a, b decoded) string {
	if len(a.ch) != len(b.ch) || a.samples() != b.samples() {
		return "shape " + itoa(len(a.ch)) + "x" + itoa(a.samples()) + ", want " + itoa(len(b.ch)) + "x" + itoa(b.samples())
	}
	for c := range a.ch {
		for i := range a.ch[c] {
			if math.Float32bits(a.ch[c][i]) != math.Float32bits(b.ch[c][i]) {
				return "channel " + itoa(c) + " sample " + itoa(i) + " = " + ftoa(float64(a.ch[c][i])) + ", want " + ftoa(float64(b.ch[c][i]))
			}
		}
	}
	return ""
}

// TestMatchesFFmpegCLI compares Decode, without resampling or remixing,
// with the ffmpeg CLI's own decode to 32-bit float (clamped to [-1, 1],
// as Decode clamps), for each format, mono and stereo.
func TestMatchesFFmpegCLI(t *testing.T) {
	checkLeaks(t)
	for _, f := range formats {
		for _, nch := range []int{1, 2} {
			t.Run(f.ext+"/"+itoa(nch)+"ch", func(t *testing.T) {
				path := f.tone(t, t.TempDir(), 44100, 1.2, []int{440, 660}[:nch]...)
				cmd := exec.Command("ffmpeg", "-v", "error", "-i", path, "-f", "f32le", "-c:a", "pcm_f32le", "-")
				raw, err := cmd.Output()
				if err != nil {
					t.Fatalf("ffmpeg: %v", err)
				}
				got := decode(t, av.Source{Path: path}, audio.Options{})
				n := len(raw) / 4 / len(got.ch)
				want := decoded{ch: make([][]float32, len(got.ch))}
				for i := range n * len(got.ch) {
					v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
					want.ch[i%len(got.ch)] = append(want.ch[i%len(got.ch)], max(-1, min(1, v)))
				}
				if err := same(got, want); err != "" {
					t.Fatalf("Decode and ffmpeg differ: %s", err)
				}
			})
		}
	}
}

// TestResampleMatchesFFmpegCLI compares resampling to 16 kHz with the
// ffmpeg CLI's aresample at the same filter length: libswresample's
// default, and torchaudio's default width of 6 (filter_size 12), which must
// give a different filter. Mono input, so that only the resampler differs.
func TestResampleMatchesFFmpegCLI(t *testing.T) {
	checkLeaks(t)
	path := formats[1].tone(t, t.TempDir(), 44100, 1.2, 440)
	var outs []decoded
	for _, width := range []int{0, 6, 1} {
		t.Run("width "+itoa(width), func(t *testing.T) {
			af := "aresample=16000"
			if width > 0 {
				af += ":filter_size=" + itoa(2*width)
			}
			raw, err := exec.Command("ffmpeg", "-v", "error", "-i", path, "-af", af, "-f", "f32le", "-c:a", "pcm_f32le", "-").Output()
			if err != nil {
				t.Fatalf("ffmpeg -af %s: %v", af, err)
			}
			got := decode(t, av.Source{Path: path}, audio.Options{SampleRate: 16000, LowpassFilterWidth: width})
			want := decoded{ch: [][]float32{nil}}
			for i := range len(raw) / 4 {
				want.ch[0] = append(want.ch[0], max(-1, min(1, math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))))
			}
			if err := within(got, want, 1e-6); err != "" {
				t.Fatalf("Decode and ffmpeg -af %s differ: %s", af, err)
			}
			outs = append(outs, got)
		})
	}
	if len(outs) == 3 && (within(outs[0], outs[1], 1e-4) == "" || within(outs[1], outs[2], 1e-4) == "") {
		t.Error("lowpass_filter_width did not change the filter")
	}
}

// within reports where a and b differ by more than tol ("" if nowhere).
func within(a, b decoded, tol float64) string {
	if len(a.ch) != len(b.ch) || a.samples() != b.samples() {
		return "shape " + itoa(len(a.ch)) + "x" + itoa(a.samples()) + ", want " + itoa(len(b.ch)) + "x" + itoa(b.samples())
	}
	for c := range a.ch {
		for i := range a.ch[c] {
			if math.Abs(float64(a.ch[c][i]-b.ch[c][i])) > tol {
				return "channel " + itoa(c) + " sample " + itoa(i) + " = " + ftoa(float64(a.ch[c][i])) + ", want " + ftoa(float64(b.ch[c][i]))
			}
		}
	}
	return ""
}

// TestFastPathBadInput gives the fast path's signatures with bad contents:
// each must fail that item with an *av.Error naming it (or, for a flipped
// byte that still parses, decode to audio in range), never crash or leak.
func TestFastPathBadInput(t *testing.T) {
	checkLeaks(t)
	dir := t.TempDir()
	flac := mustRead(t, formats[1].tone(t, dir, 16000, 1, 440))
	wavb := mustRead(t, formats[0].tone(t, dir, 16000, 1, 440))
	patch := func(b []byte, at int, v ...byte) []byte {
		b = bytes.Clone(b)
		copy(b[at:], v)
		return b
	}
	// STREAMINFO (after "fLaC" and the block header, at 8): sample rate,
	// channels and bits in bytes 18-21; total samples in the 36 bits after.
	zeroRate := patch(flac, 18, 0, 0, 0)
	hugeLen := patch(flac, 21, byte(flac[21]|0x0f), 0xff, 0xff, 0xff, 0xff)
	cases := []struct {
		name string
		b    []byte
		o    audio.Options
		want string // in the error; alternatives split by |; "" may decode
	}{
		{"flac signature only", []byte("fLaC"), audio.Options{}, "not a media file"},
		{"flac signature, garbage", append([]byte("fLaC\x00\x00\x00\x22"), bytes.Repeat([]byte{0xa5}, 200)...), audio.Options{}, "not a media file|no audio|Invalid data|holds no audio"},
		{"flac header only", flac[:42], audio.Options{}, "not a media file"},
		// Frame headers carry the rate too: this decodes, seeking or not.
		{"flac zero sample rate", zeroRate, audio.Options{}, ""},
		{"flac zero sample rate, seek", zeroRate, audio.Options{Start: 0.6, SampleRate: 8000}, ""},
		// Refused from STREAMINFO alone, naming the rate the header gives.
		{"flac claims 2^36 samples", hugeLen, audio.Options{MaxSamples: 1 << 20}, "of 16000 Hz audio (declared)"},
		{"flac cut in half", flac[:len(flac)/2], audio.Options{}, ""},
		{"flac frames flipped", flip(flac, 200), audio.Options{SampleRate: 8000}, ""},
		{"wav signature, garbage", append([]byte("RIFF\x00\x01\x00\x00WAVE"), bytes.Repeat([]byte{0x5a}, 100)...), audio.Options{}, "not a media file|no audio|Invalid data|holds no audio"},
		{"wav header only", wavb[:44], audio.Options{}, "holds no audio|Invalid data|not a media file"},
		{"wav samples flipped", flip(wavb, 100), audio.Options{NumChannels: 2}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The same bytes from a path with the wrong extension, and in memory.
			p := filepath.Join(t.TempDir(), "clip.mp3")
			if err := os.WriteFile(p, tc.b, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, src := range []av.Source{{Path: p}, {Data: tc.b, Name: "item 7"}} {
				out, err := audio.Decode(context.Background(), src, tc.o)
				if err == nil {
					d := copyOut(t, out) // checks the range
					out.Release()
					if tc.want != "" {
						t.Fatalf("%v: decoded %d samples, want an error saying %q", src, d.samples(), tc.want)
					}
					continue
				}
				var ae *av.Error
				if !errors.As(err, &ae) || ae.Source != src.String() || (tc.want != "" && !containsAny(err.Error(), tc.want)) {
					t.Fatalf("%v: err = %v; want an *av.Error naming it, saying %q", src, err, tc.want)
				}
			}
		})
	}
}

// flip inverts every step-th byte after the first 100 (past the headers).
func flip(b []byte, step int) []byte {
	b = bytes.Clone(b)
	for i := 100; i < len(b); i += step {
		b[i] ^= 0xff
	}
	return b
}
