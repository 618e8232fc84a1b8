package audio_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// FuzzDecodeAudio feeds arbitrary bytes to Decode, seeded from the tiny
// clips in testdata/. It must never crash, hang or leak, and whatever it
// returns must be a (channels, samples) tensor in [-1, 1].
func FuzzDecodeAudio(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.*")
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(0))
		f.Add(b, uint8(0x5a))
	}
	f.Fuzz(func(t *testing.T, b []byte, sel uint8) {
		// sel picks options, so that resampling, remixing, seeking and
		// padding are fuzzed too.
		// Crafted headers can ask for hours of audio; keep each item
		// small (64 MiB).
		o := audio.Options{MaxSamples: 16 << 20}
		if sel&1 != 0 {
			o.SampleRate = []int{8000, 16000, 22050, 44100}[sel>>1&3]
		}
		if sel&8 != 0 {
			o.NumChannels = 1 + int(sel>>4&1)
		}
		if sel&0x20 != 0 {
			o.Start = 0.05 * float64(sel>>6)
		}
		if sel&0x40 != 0 {
			o.NumSamples = 500
		}
		if sel&0x80 != 0 {
			o.Duration = 0.1
		}
		out, err := audio.Decode(context.Background(), av.Source{Data: b, Name: "fuzz"}, o)
		if err != nil {
			if n := tensor.MemStats().LiveTensors; n != 0 {
				t.Fatalf("%d tensors alive after a failed Decode", n)
			}
			return
		}
		defer func() {
			if n := tensor.MemStats().LiveTensors; n != 0 {
				t.Fatalf("%d tensors alive after releasing the output", n)
			}
		}()
		defer out.Release()
		d := copyOut(t, out) // checks the dtype, shape and range
		if o.NumSamples > 0 && d.samples() != o.NumSamples {
			t.Fatalf("%d samples with num_samples %d", d.samples(), o.NumSamples)
		}
	})
}
