package audio_test

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
)

// Decode one second of a stereo WAV, from 0.25 s, as 8 kHz mono padded to
// a fixed length for batching.
func ExampleDecode() {
	data := wav(16000, sine(440, 16000, 16000, 0.5), sine(440, 16000, 16000, 0.5))
	out, err := audio.Decode(context.Background(), av.Source{Data: data, Name: "tone.wav"},
		audio.Options{SampleRate: 8000, NumChannels: 1, Start: 0.25, NumSamples: 8000})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer out.Release()
	x := unsafe.Slice((*float32)(out.Data()), out.Numel())
	fmt.Println(out, "frequency:", int(frequency(x[:6000], 8000)+0.5), "Hz; padding:", x[6000:6003])
	// Output: tensor(float32, [1 8000]) frequency: 440 Hz; padding: [0 0 0]
}
