package audio_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/internal/memtest"
	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// flacUnknownLength is a FLAC file whose STREAMINFO says "total samples
// unknown", so that its length is found only by decoding it.
func flacUnknownLength(t *testing.T, dir string, secs float64) []byte {
	t.Helper()
	b := mustRead(t, formats[1].tone(t, dir, 16000, secs, 440))
	if string(b[:4]) != "fLaC" || b[4]&0x7f != 0 {
		t.Fatalf("not a FLAC file starting with STREAMINFO: % x", b[:8])
	}
	// The 36-bit total sample count: the low nibble of byte 21, then 22-25.
	b[21] &^= 0x0f
	clear(b[22:26])
	return b
}

// Outputs over max_samples fail, naming the file and the limit, before
// the output is allocated when the length is known (declared or
// num_samples), and as soon as decoding passes the limit otherwise.
func TestMaxSamples(t *testing.T) {
	checkLeaks(t)
	needFFmpeg(t, "flac")
	dir := t.TempDir()
	// A WAV declaring a 1 Hz rate: 2000 samples are 2000 s, which at
	// 16 kHz are 32M samples (128 MB).
	slow := filepath.Join(dir, "slow.wav")
	if err := os.WriteFile(slow, wav(1, sine(0.1, 1, 2000, 0.5)), 0o644); err != nil {
		t.Fatal(err)
	}
	stereo := av.Source{Data: wav(16000, sine(440, 16000, 16000, 0.5), sine(880, 16000, 16000, 0.5)), Name: "stereo.wav"}
	unknown := av.Source{Data: flacUnknownLength(t, dir, 3), Name: "unknown-length.flac"}
	cases := []struct {
		name string
		src  av.Source
		o    audio.Options
		want string // "" when it decodes; else in the error after the name
	}{
		{"1 Hz resampled to 16 kHz", av.Source{Path: slow}, audio.Options{SampleRate: 16000, MaxSamples: 1_000_000}, "2000s of 1 Hz audio (declared) at 16000 Hz x 1 channels = 32000000 samples is over max_samples (1000000)"},
		{"1 Hz with a duration over", av.Source{Path: slow}, audio.Options{SampleRate: 16000, Duration: 100, MaxSamples: 1_000_000}, "100s of 1 Hz audio (declared) at 16000 Hz x 1 channels = 1600000 samples"},
		{"1 Hz with a duration within", av.Source{Path: slow}, audio.Options{SampleRate: 16000, Duration: 50, MaxSamples: 1_000_000}, ""},
		{"1 Hz from start, over", av.Source{Path: slow}, audio.Options{SampleRate: 16000, Start: 1900, MaxSamples: 1_000_000}, "= 1600000 samples"},
		{"1 Hz from start, within", av.Source{Path: slow}, audio.Options{SampleRate: 16000, Start: 1990, MaxSamples: 1_000_000}, ""},
		{"stereo at the limit", stereo, audio.Options{MaxSamples: 32000}, ""},
		{"stereo one over", stereo, audio.Options{MaxSamples: 31999}, "32000 samples is over max_samples (31999)"},
		{"remixed to mono", stereo, audio.Options{NumChannels: 1, MaxSamples: 16000}, ""},
		{"num_samples over", stereo, audio.Options{NumSamples: 20000, MaxSamples: 32000}, "num_samples 20000 x 2 channels = 40000 samples is over max_samples (32000)"},
		{"num_samples within", stereo, audio.Options{NumSamples: 16000, MaxSamples: 32000}, ""},
		// Nothing declares the length: decoding stops at the limit.
		{"length found by decoding", unknown, audio.Options{MaxSamples: 40000}, "the decoded audio would be over max_samples (40000"},
		{"length found by decoding, within", unknown, audio.Options{MaxSamples: 48000}, ""},
		{"default refuses the 1 Hz file at 48 kHz x 8", av.Source{Path: slow}, audio.Options{SampleRate: 48000, NumChannels: 8}, "over max_samples (" + strconv.Itoa(audio.DefaultMaxSamples) + ")"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := audio.Decode(context.Background(), tc.src, tc.o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				out.Release()
				return
			}
			if err == nil {
				shape := out.Shape()
				out.Release()
				t.Fatalf("decoded %v", shape)
			}
			var ae *av.Error
			if !errors.As(err, &ae) || ae.Source != tc.src.String() || !strings.Contains(err.Error(), "audio too large") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want an *av.Error naming %q saying %q", err, tc.src, tc.want)
			}
			t.Log(err)
		})
	}
}

// The case at the real default: a 1 Hz WAV of 30000 samples
// resampled to 16 kHz would be 480M samples (1.9 GB). It must fail from
// the header, without the memory: peak RSS stays within a few MB.
func TestMaxSamplesDefaultAllocatesNothing(t *testing.T) {
	checkLeaks(t)
	src := av.Source{Data: wav(1, sine(0.1, 1, 30000, 0.5)), Name: "bomb.wav"}
	if out, err := audio.Decode(context.Background(), src, audio.Options{SampleRate: 8000, MaxSamples: 1000}); err == nil { // warm up FFmpeg
		out.Release()
	}
	start := time.Now()
	var err error
	grew := memtest.PeakGrowth(t, func() {
		var out *tensor.Tensor
		if out, err = audio.Decode(context.Background(), src, audio.Options{SampleRate: 16000}); err == nil {
			shape := out.Shape()
			out.Release()
			t.Fatalf("decoded %v", shape)
		}
	})
	if !strings.Contains(err.Error(), `"bomb.wav"`) || !strings.Contains(err.Error(), "480000000 samples is over max_samples (400000000)") {
		t.Fatalf("err = %v", err)
	}
	if grew > 64<<20 || time.Since(start) > time.Second {
		t.Fatalf("refusing took %v and %d MB of peak RSS", time.Since(start), grew>>20)
	}
	t.Logf("refused in %v, peak RSS +%d kB: %v", time.Since(start), grew>>10, err)
}

// With a start (the samples before it go through a scratch buffer), the
// bound still holds and output within it is whole.
func TestMaxSamplesWithStart(t *testing.T) {
	checkLeaks(t)
	needFFmpeg(t, "flac")
	src := av.Source{Data: flacUnknownLength(t, t.TempDir(), 3), Name: "unknown-length.flac"}
	full := decode(t, src, audio.Options{})
	for _, tc := range []struct {
		max  int64
		fits bool
	}{{32000, true}, {31999, false}} {
		out, err := audio.Decode(context.Background(), src, audio.Options{Start: 1, MaxSamples: tc.max})
		if !tc.fits {
			if err == nil {
				out.Release()
				t.Fatalf("max_samples %d: decoded 32000 samples", tc.max)
			}
			if !strings.Contains(err.Error(), "over max_samples (31999") {
				t.Fatalf("err = %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		d := copyOut(t, out)
		out.Release()
		if d.samples() != 32000 || rms(d.ch[0], full.ch[0][16000:]) != 0 {
			t.Fatalf("max_samples %d: %d samples, want the last 32000 of the file", tc.max, d.samples())
		}
	}
}
