package audio_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
)

// rateOf is the rate a clip generated at rate decodes at in format f.
func rateOf(f format, rate int) int {
	if f.rate != 0 {
		return f.rate
	}
	return rate
}

func TestDecodeFormats(t *testing.T) {
	checkLeaks(t)
	dir := t.TempDir()
	for _, f := range formats {
		for _, freqs := range [][]int{{440}, {440, 880}} {
			t.Run(f.ext+"/"+itoa(len(freqs))+"ch", func(t *testing.T) {
				path := f.tone(t, dir, 16000, 1, freqs...)
				rate := rateOf(f, 16000)
				for _, src := range []av.Source{{Path: path}, {Data: mustRead(t, path), Name: path}} {
					d := decode(t, src, audio.Options{})
					if len(d.ch) != len(freqs) {
						t.Fatalf("%v: %d channels, want %d", src, len(d.ch), len(freqs))
					}
					// Lossy codecs pad to whole frames.
					if n := d.samples(); n < rate*98/100 || n > rate*103/100 {
						t.Errorf("%v: %d samples, want about %d", src, n, rate)
					}
					for c, want := range freqs {
						if got := frequency(d.ch[c], rate); !near(got, float64(want), 0.02) {
							t.Errorf("%v channel %d: frequency %.1f Hz, want %d", src, c, got, want)
						}
					}
				}
			})
		}
	}
}

func TestResample(t *testing.T) {
	checkLeaks(t)
	dir := t.TempDir()
	cases := []struct {
		f        format
		from, to int
	}{
		{formats[0], 16000, 8000},
		{formats[1], 16000, 8000},
		{formats[2], 16000, 8000},
		{formats[0], 16000, 44100},
		{formats[4], 16000, 16000}, // Opus decodes at 48 kHz
	}
	for _, tc := range cases {
		t.Run(tc.f.ext+"/"+itoa(tc.to), func(t *testing.T) {
			path := tc.f.tone(t, dir, tc.from, 1, 440)
			full := decode(t, av.Source{Path: path}, audio.Options{})
			d := decode(t, av.Source{Path: path}, audio.Options{SampleRate: tc.to})
			want := int(math.Round(float64(full.samples()) * float64(tc.to) / float64(rateOf(tc.f, tc.from))))
			if n := d.samples(); n < want-1 || n > want+1 {
				t.Errorf("%d samples at %d Hz, want %d", n, tc.to, want)
			}
			if got := frequency(d.ch[0], tc.to); !near(got, 440, 0.02) {
				t.Errorf("frequency %.1f Hz, want 440", got)
			}
		})
	}
}

// TestResampleLimit checks that a crafted sample rate cannot stall a
// worker: the resampler's filter grows with the ratio of the rates.
func TestResampleLimit(t *testing.T) {
	checkLeaks(t)
	src := av.Source{Data: wav(134225728, sine(440, 134225728, 800, 0.5)), Name: "fast.wav"}
	if _, err := audio.Decode(context.Background(), src, audio.Options{SampleRate: 22050}); err == nil || !strings.Contains(err.Error(), "resampling that far is not supported") {
		t.Fatalf("err = %v, want a refusal", err)
	}
	// 768 kHz to 8 kHz (96:1) is fine.
	d := decode(t, av.Source{Data: wav(768000, sine(440, 768000, 76800, 0.5))}, audio.Options{SampleRate: 8000})
	if d.samples() != 800 || !near(frequency(d.ch[0], 8000), 440, 0.02) {
		t.Fatalf("%d samples at %.1f Hz, want 800 at 440", d.samples(), frequency(d.ch[0], 8000))
	}
}

func TestRemix(t *testing.T) {
	checkLeaks(t)
	dir := t.TempDir()
	wavf := formats[0]
	mono := wavf.tone(t, dir, 16000, 0.5, 440)
	stereo := wavf.tone(t, dir, 16000, 0.5, 440, 880)

	t.Run("mono to stereo duplicates", func(t *testing.T) {
		m := decode(t, av.Source{Path: mono}, audio.Options{})
		s := decode(t, av.Source{Path: mono}, audio.Options{NumChannels: 2})
		if len(s.ch) != 2 || s.samples() != m.samples() {
			t.Fatalf("got %d channels of %d samples", len(s.ch), s.samples())
		}
		for c := range 2 {
			if r := rms(s.ch[c], m.ch[0]); r > 1e-6 {
				t.Errorf("channel %d differs from the mono input (rms %g)", c, r)
			}
		}
	})
	t.Run("stereo to mono averages", func(t *testing.T) {
		s := decode(t, av.Source{Path: stereo}, audio.Options{})
		m := decode(t, av.Source{Path: stereo}, audio.Options{NumChannels: 1})
		if len(m.ch) != 1 || m.samples() != s.samples() {
			t.Fatalf("got %d channels of %d samples", len(m.ch), m.samples())
		}
		avg := make([]float32, s.samples())
		for i := range avg {
			avg[i] = (s.ch[0][i] + s.ch[1][i]) / 2
		}
		if r := rms(m.ch[0], avg); r > 1e-6 {
			t.Errorf("mono is not the average of the channels (rms %g)", r)
		}
	})
	t.Run("5.1 to stereo", func(t *testing.T) {
		needFFmpeg(t, "flac")
		p := ffmpeg(t, dir, "six.flac", "-f", "lavfi", "-i", sineSpec(440, 16000, 0.5), "-af", "aformat=channel_layouts=5.1")
		d := decode(t, av.Source{Path: p}, audio.Options{})
		if len(d.ch) != 6 {
			t.Fatalf("%d channels, want 6", len(d.ch))
		}
		d = decode(t, av.Source{Path: p}, audio.Options{NumChannels: 2, SampleRate: 8000})
		if len(d.ch) != 2 || d.samples() != 4000 {
			t.Fatalf("got %d channels of %d samples, want 2 of 4000", len(d.ch), d.samples())
		}
		if got := frequency(d.ch[1], 8000); !near(got, 440, 0.02) {
			t.Errorf("frequency %.1f Hz, want 440", got)
		}
	})
}

// changing writes 1 s of a 440 Hz tone that turns into 1000 Hz at 0.5 s.
func changing(t *testing.T, dir string, f format) string {
	needFFmpeg(t, f.encoder)
	return ffmpeg(t, dir, "change."+f.ext, "-f", "lavfi", "-i",
		"aevalsrc=0.5*sin(2*PI*if(lt(t\\,0.5)\\,440\\,1000)*t):s=16000:d=1", "-c:a", f.encoder)
}

func TestStartDuration(t *testing.T) {
	checkLeaks(t)
	dir := t.TempDir()
	cases := []struct {
		name            string
		start, duration float64
		wantSecs        float64
		freq            int
	}{
		{"first half", 0, 0.5, 0.5, 440},
		{"second half", 0.5, 0, 0.5, 1000},
		{"inside first", 0.1, 0.3, 0.3, 440},
		{"inside second", 0.6, 0.3, 0.3, 1000},
		{"duration past the end", 0.75, 2, 0.25, 1000},
	}
	for _, f := range formats {
		t.Run(f.ext, func(t *testing.T) {
			path := changing(t, dir, f)
			rate := rateOf(f, 16000)
			for _, tc := range cases {
				d := decode(t, av.Source{Path: path}, audio.Options{Start: tc.start, Duration: tc.duration})
				want := int(tc.wantSecs * float64(rate))
				slack := 0
				if tc.duration == 0 || tc.start+tc.duration > 1 {
					slack = rate / 20 // lossy codecs pad the end
				}
				if n := d.samples(); n < want || n > want+slack {
					t.Errorf("%s: %d samples, want %d", tc.name, n, want)
				}
				// Skip the edges, where lossy codecs smear the change.
				mid := d.ch[0][rate/50 : min(want, d.samples())-rate/50]
				if got := frequency(mid, rate); !near(got, float64(tc.freq), 0.02) {
					t.Errorf("%s: frequency %.1f Hz, want %d", tc.name, got, tc.freq)
				}
			}
		})
	}
}

// TestSeek checks that a start far enough in to seek gives the same
// samples as decoding everything and slicing.
func TestSeek(t *testing.T) {
	checkLeaks(t)
	dir := t.TempDir()
	for _, f := range formats {
		t.Run(f.ext, func(t *testing.T) {
			path := f.tone(t, dir, 16000, 4, 440, 660)
			for _, o := range []audio.Options{
				{Start: 1.3, Duration: 0.5},
				{Start: 2.5},
				{Start: 3.2, Duration: 0.4, SampleRate: 8000, NumChannels: 1},
				{Start: 0.9, NumSamples: 1000},
				{Start: 2.05, Duration: 0.3, SampleRate: 44100},
			} {
				seeked, missed := audio.SeekStats()
				full := decode(t, av.Source{Path: path}, audio.Options{SampleRate: o.SampleRate, NumChannels: o.NumChannels})
				part := decode(t, av.Source{Path: path}, o)
				s2, m2 := audio.SeekStats()
				if s2 == seeked || m2 != missed {
					t.Errorf("%+v: seeks %d, fallbacks %d; want one seek that lands before start", o, s2-seeked, m2-missed)
				}
				rate := o.SampleRate
				if rate == 0 {
					rate = rateOf(f, 16000)
				}
				off := int(math.Round(o.Start * float64(rate)))
				n := full.samples() - off
				if o.Duration > 0 {
					n = int(math.Round(o.Duration * float64(rate)))
				}
				if o.NumSamples > 0 {
					n = o.NumSamples
				}
				if part.samples() != n {
					t.Fatalf("%+v: %d samples, want %d", o, part.samples(), n)
				}
				for c := range part.ch {
					if r := rms(part.ch[c], full.ch[c][off:off+n]); r > 1e-4 {
						t.Errorf("%+v channel %d: differs from the full decode by rms %g", o, c, r)
					}
				}
			}
		})
	}
}

func TestNumSamples(t *testing.T) {
	checkLeaks(t)
	path := formats[1].tone(t, t.TempDir(), 16000, 1, 440)
	full := decode(t, av.Source{Path: path}, audio.Options{})
	cases := []struct {
		name string
		o    audio.Options
		keep int // samples from the full decode, at o.Start; the rest are zeros
	}{
		{"crop", audio.Options{NumSamples: 8000}, 8000},
		{"exact", audio.Options{NumSamples: 16000}, 16000},
		{"pad", audio.Options{NumSamples: 20000}, 16000},
		{"start and pad", audio.Options{Start: 0.75, NumSamples: 8000}, 4000},
		{"duration then pad", audio.Options{Start: 0.25, Duration: 0.25, NumSamples: 8000}, 4000},
		{"duration cropped", audio.Options{Duration: 0.75, NumSamples: 100}, 100},
		{"start past the end", audio.Options{Start: 3, NumSamples: 10}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decode(t, av.Source{Path: path}, tc.o)
			if len(d.ch) != 1 || d.samples() != tc.o.NumSamples {
				t.Fatalf("got %d channels of %d samples, want 1 of %d", len(d.ch), d.samples(), tc.o.NumSamples)
			}
			off := int(tc.o.Start * 16000)
			for i, v := range d.ch[0] {
				want := float32(0)
				if i < tc.keep {
					want = full.ch[0][off+i]
				}
				if v != want {
					t.Fatalf("sample %d = %v, want %v", i, v, want)
				}
			}
		})
	}
	t.Run("start past the end without num_samples", func(t *testing.T) {
		d := decode(t, av.Source{Path: path}, audio.Options{Start: 3})
		if len(d.ch) != 1 || d.samples() != 0 {
			t.Fatalf("got %d channels of %d samples, want 1 of 0", len(d.ch), d.samples())
		}
	})
}

func TestBadInput(t *testing.T) {
	checkLeaks(t)
	needFFmpeg(t, "")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flac := mustRead(t, formats[1].tone(t, dir, 16000, 1, 440))
	// A WAV whose format tag names no codec FFmpeg knows.
	unknown := wav(8000, sine(440, 8000, 800, 0.5))
	unknown[20], unknown[21] = 0x34, 0x12
	cases := []struct {
		name string
		src  av.Source
		want string // in the error, after the file's name; alternatives split by |
	}{
		{"missing file", av.Source{Path: filepath.Join(dir, "nope.wav")}, "no such file"},
		{"empty file", av.Source{Path: write("empty.wav", nil)}, "empty file"},
		{"zero bytes", av.Source{Data: []byte{}, Name: "zero.wav"}, "empty input"},
		{"text", av.Source{Path: write("notes.txt", []byte(strings.Repeat("just some text\n", 50)))}, "not a media file|no audio stream"},
		{"text bytes", av.Source{Data: []byte(strings.Repeat("just some text\n", 50)), Name: "notes"}, "not a media file|no audio stream"},
		{"png", av.Source{Path: ffmpeg(t, dir, "red.png", "-f", "lavfi", "-i", "color=red:s=8x8", "-frames:v", "1")}, "no audio stream"},
		{"video only", av.Source{Path: ffmpeg(t, dir, "video.avi", "-f", "lavfi", "-i", "testsrc=s=32x32:d=0.2", "-c:v", "mjpeg")}, "no audio stream"},
		{"unknown codec", av.Source{Path: write("unknown.wav", unknown)}, "no decoder"},
		{"header only", av.Source{Path: write("head.flac", flac[:42])}, "not a media file"},
		{"flac cut mid-frame", av.Source{Path: write("cut.flac", flac[:len(flac)-10])}, "Invalid data"},
		{"wav cut mid-sample", av.Source{Path: write("cut.wav", wav(8000, sine(440, 8000, 800, 0.5))[:101])}, "Invalid data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Errors after the output is allocated (num_samples) must free it.
			for _, o := range []audio.Options{{}, {SampleRate: 8000, NumSamples: 100000}, {Start: 0.6, NumSamples: 100000}} {
				out, err := audio.Decode(context.Background(), tc.src, o)
				if err == nil {
					out.Release()
					t.Fatalf("%+v: decoded %v from bad input", o, out)
				}
				var ae *av.Error
				if !errors.As(err, &ae) || ae.Source != tc.src.String() || !containsAny(err.Error(), tc.want) {
					t.Fatalf("%+v: err = %v; want an *av.Error about %q saying %q", o, err, tc.src, tc.want)
				}
			}
		})
	}
}

func containsAny(s, alts string) bool {
	for _, a := range strings.Split(alts, "|") {
		if strings.Contains(s, a) {
			return true
		}
	}
	return false
}

// TestTruncated cuts every format at several places. FFmpeg reports a cut
// that breaks a frame or a sample; a cut at a frame boundary (common for
// MP3, WAV and Ogg) decodes to what is there. Either way: no crash, no
// leak, and less audio than the whole file when half of it is gone.
func TestTruncated(t *testing.T) {
	checkLeaks(t)
	dir := t.TempDir()
	for _, f := range formats {
		t.Run(f.ext, func(t *testing.T) {
			path := f.tone(t, dir, 16000, 1, 440)
			b := mustRead(t, path)
			whole := decode(t, av.Source{Path: path}, audio.Options{}).samples()
			errs := 0
			for _, n := range []int{1, 10, 100, 1000, len(b) / 3, len(b) / 2, len(b) - 100, len(b) - 1} {
				cut := filepath.Join(dir, "cut."+f.ext)
				if err := os.WriteFile(cut, b[:n], 0o644); err != nil {
					t.Fatal(err)
				}
				for _, src := range []av.Source{{Path: cut}, {Data: b[:n], Name: "cut"}} {
					out, err := audio.Decode(context.Background(), src, audio.Options{})
					if err != nil {
						var ae *av.Error
						if !errors.As(err, &ae) || ae.Source != src.String() {
							t.Errorf("%d bytes: err = %v, want an *av.Error naming %q", n, err, src)
						}
						errs++
						continue
					}
					if got := out.Shape()[1]; got >= int64(whole) && n <= len(b)/2 {
						t.Errorf("%d of %d bytes decoded to %d samples, the whole file to %d", n, len(b), got, whole)
					}
					out.Release()
				}
			}
			t.Logf("%d of 16 cuts reported as errors", errs)
		})
	}
}

func TestCancel(t *testing.T) {
	checkLeaks(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, err := audio.Decode(ctx, av.Source{Data: wav(8000, sine(440, 8000, 8000, 0.5))}, audio.Options{})
	if !errors.Is(err, context.Canceled) {
		out.Release()
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestConcurrent(t *testing.T) {
	checkLeaks(t)
	b := wav(16000, sine(440, 16000, 16000, 0.5), sine(880, 16000, 16000, 0.5))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			o := audio.Options{SampleRate: 8000 * (1 + i%2), NumChannels: 1 + i%2, Start: 0.1}
			out, err := audio.Decode(context.Background(), av.Source{Data: b}, o)
			if err != nil {
				errs <- err
				return
			}
			defer out.Release()
			if sh := out.Shape(); sh[0] != int64(o.NumChannels) || sh[1] != int64(o.SampleRate*9/10) {
				errs <- errors.New("wrong shape " + out.String())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
