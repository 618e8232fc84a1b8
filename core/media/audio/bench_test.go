package audio_test

import (
	"context"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
)

// BenchmarkDecode decodes 10 s of 16 kHz mono audio per op and reports
// x-realtime: seconds of audio decoded per second of one core.
// "tiny" (0.1 s of WAV) is the fixed cost per item: open, probe, decoder
// and resampler set-up, tensor allocation.
func BenchmarkDecode(b *testing.B) {
	dir := b.TempDir()
	cases := []struct {
		name  string
		f     format
		secs  float64
		o     audio.Options
		audio float64 // seconds of audio decoded per op
	}{
		{"flac", formats[1], 10, audio.Options{}, 10},
		{"mp3", formats[2], 10, audio.Options{}, 10},
		{"flac/to_8k", formats[1], 10, audio.Options{SampleRate: 8000}, 10},
		{"mp3/to_8k", formats[2], 10, audio.Options{SampleRate: 8000}, 10},
		{"mp3/1s_crop_at_5s", formats[2], 10, audio.Options{Start: 5, NumSamples: 16000}, 1},
		{"wav/tiny", formats[0], 0.1, audio.Options{}, 0.1},
		// 4 s of a 10 s WAV: costs 4 s of reading, not a probe of the file
		{"wav/4s_of_10s", formats[0], 10, audio.Options{NumSamples: 64000}, 4},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			path := tc.f.tone(b, dir, 16000, tc.secs, 440)
			data := mustRead(b, path)
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			start := time.Now()
			for b.Loop() {
				out, err := audio.Decode(context.Background(), av.Source{Data: data}, tc.o)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
			b.ReportMetric(tc.audio*float64(b.N)/time.Since(start).Seconds(), "x-realtime")
		})
	}
}
