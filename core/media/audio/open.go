package audio

import (
	"bytes"
	"io"
	"os"

	"github.com/spdl-go/spdl-go/core/media/av"
)

// fastOpen can be turned off by tests, to compare the fast paths with the
// general one (FFmpeg's format probe, then avformat_find_stream_info
// unless av finds the header complete).
var fastOpen = true

// openOptions picks how to open src from its first bytes. A FLAC or WAV
// signature names its demuxer, which skips FFmpeg's format probe (every
// demuxer's probe run over the first 2 KB: about 50 us per file). FLAC also
// skips avformat_find_stream_info: FFmpeg's FLAC demuxer leaves the
// channel count to be found by decoding a frame (about 150 us per file),
// but the decoder reads it, with everything else it needs, from the
// STREAMINFO block that the demuxer passes on as extradata. Anything else
// is probed as before.
func openOptions(src av.Source) av.OpenOptions {
	if !fastOpen {
		return av.OpenOptions{}
	}
	head := src.Data
	if head == nil && src.Path != "" {
		f, err := os.Open(src.Path)
		if err != nil {
			return av.OpenOptions{} // av.Open names the error
		}
		var b [12]byte
		n, _ := io.ReadFull(f, b[:])
		f.Close()
		head = b[:n]
	}
	switch {
	case len(head) >= 8 && bytes.HasPrefix(head, []byte("fLaC")) && head[4]&0x7f == 0:
		// STREAMINFO must be the first metadata block (type 0); anything
		// else is left to the probe and its error messages.
		return av.OpenOptions{Format: "flac", SkipStreamInfo: true}
	case len(head) >= 12 && string(head[8:12]) == "WAVE" &&
		(string(head[:4]) == "RIFF" || string(head[:4]) == "RF64" || string(head[:4]) == "BW64"):
		return av.OpenOptions{Format: "wav"}
	}
	return av.OpenOptions{}
}
