package audio_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/asticode/go-astiav"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
)

// BenchmarkPhases splits the cost of one bench_audio.py clip (10 s of
// 44.1 kHz stereo FLAC or WAV, of which 4 s are decoded to 16 kHz mono)
// into cumulative phases: open (probe and header), +decoder (codec
// open), +demux (reading the packets of 4 s), +decode (decoding them),
// and the whole Decode (adding the resampler, mixing and the tensor).
func BenchmarkPhases(b *testing.B) {
	dir := b.TempDir()
	needFFmpeg(b, "flac")
	src := ffmpeg(b, dir, "clip.wav", "-f", "lavfi", "-i",
		"aevalsrc=0.4*sin(440*2*PI*t)+0.2*sin(1234*2*PI*t*(1+t/10))+0.05*(random(0)-0.5)|0.3*sin(660*2*PI*t)+0.05*(random(1)-0.5):s=44100:d=10",
		"-c:a", "pcm_s16le")
	flac := ffmpeg(b, dir, "clip.flac", "-i", src, "-c:a", "flac")
	const secs = 4.0
	sets := [][]string{{flac}, {src}}
	// SPDL_AUDIO_BENCH_GLOB (e.g. ~/.cache/spdl-go-bench/audio-*/*/*.flac)
	// measures bench_audio.py's own clips instead, cycling through them.
	if g := os.Getenv("SPDL_AUDIO_BENCH_GLOB"); g != "" {
		paths, _ := filepath.Glob(g)
		if len(paths) == 0 {
			b.Fatalf("SPDL_AUDIO_BENCH_GLOB %q matches nothing", g)
		}
		sets = [][]string{paths[:min(len(paths), 100)]}
	}
	for _, paths := range sets {
		ext := filepath.Ext(paths[0])[1:]
		next := 0
		source := func() av.Source {
			next++
			return av.Source{Path: paths[next%len(paths)]}
		}
		b.Run(ext+"/open", func(b *testing.B) {
			defer cpuMetric(b)()
			for b.Loop() {
				s := source()
				in, err := av.Open(s, audio.OpenOptionsFor(s))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := in.Stream(astiav.MediaTypeAudio); err != nil {
					b.Fatal(err)
				}
				in.Close()
			}
		})
		b.Run(ext+"/+decoder", func(b *testing.B) {
			defer cpuMetric(b)()
			for b.Loop() {
				s := source()
				in, err := av.Open(s, audio.OpenOptionsFor(s))
				if err != nil {
					b.Fatal(err)
				}
				st, _ := in.Stream(astiav.MediaTypeAudio)
				d, err := in.OpenDecoder(st, av.DecoderOptions{Threads: 1})
				if err != nil {
					b.Fatal(err)
				}
				d.Close()
				in.Close()
			}
		})
		b.Run(ext+"/+demux", func(b *testing.B) {
			defer cpuMetric(b)()
			pkt := astiav.AllocPacket()
			defer pkt.Free()
			for b.Loop() {
				s := source()
				in, err := av.Open(s, audio.OpenOptionsFor(s))
				if err != nil {
					b.Fatal(err)
				}
				st, _ := in.Stream(astiav.MediaTypeAudio)
				d, err := in.OpenDecoder(st, av.DecoderOptions{Threads: 1})
				if err != nil {
					b.Fatal(err)
				}
				tb := st.TimeBase().Float64()
				for {
					err := in.FC.ReadFrame(pkt)
					if errors.Is(err, astiav.ErrEof) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					t := float64(pkt.Pts()) * tb
					pkt.Unref()
					if t >= secs {
						break
					}
				}
				d.Close()
				in.Close()
			}
		})
		b.Run(ext+"/+decode", func(b *testing.B) {
			defer cpuMetric(b)()
			for b.Loop() {
				s := source()
				in, err := av.Open(s, audio.OpenOptionsFor(s))
				if err != nil {
					b.Fatal(err)
				}
				st, _ := in.Stream(astiav.MediaTypeAudio)
				d, err := in.OpenDecoder(st, av.DecoderOptions{Threads: 1})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for n < int(secs*float64(d.CC.SampleRate())) {
					f, err := d.Next()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					n += f.NbSamples()
				}
				d.Close()
				in.Close()
			}
		})
		b.Run(ext+"/all", func(b *testing.B) {
			defer cpuMetric(b)()
			o := audio.Options{SampleRate: 16000, NumChannels: 1, NumSamples: int(secs * 16000)}
			for b.Loop() {
				out, err := audio.Decode(context.Background(), source(), o)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
		})
	}
}

// cpuMetric reports the process's CPU time per op (cpu-us/op), which
// other processes on a busy machine disturb less than wall time.
func cpuMetric(b *testing.B) func() {
	t0 := cpuTime()
	return func() {
		b.ReportMetric(float64(cpuTime()-t0)/1e3/float64(b.N), "cpu-us/op")
	}
}

func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
