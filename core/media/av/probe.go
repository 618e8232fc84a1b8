package av

import (
	"github.com/asticode/go-astiav"
)

// Info describes a piece of media without decoding it.
type Info struct {
	Format   string       `json:"format"`
	Duration float64      `json:"duration"` // seconds; 0 when unknown
	BitRate  int64        `json:"bit_rate"`
	Streams  []StreamInfo `json:"streams"`
}

// StreamInfo describes one stream.
type StreamInfo struct {
	Index      int     `json:"index"`
	Type       string  `json:"type"` // "video", "audio", "subtitle", "data", ...
	Codec      string  `json:"codec"`
	Duration   float64 `json:"duration"` // seconds; 0 when unknown
	Width      int     `json:"width,omitempty"`
	Height     int     `json:"height,omitempty"`
	FrameRate  float64 `json:"frame_rate,omitempty"`
	Frames     int64   `json:"frames,omitempty"` // from the container; 0 when it does not say
	SampleRate int     `json:"sample_rate,omitempty"`
	Channels   int     `json:"channels,omitempty"`
}

// Probe reads the container's headers (and as little as needed to fill in
// stream parameters) without decoding.
func Probe(src Source) (*Info, error) {
	in, err := Open(src, OpenOptions{})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	info := &Info{BitRate: in.FC.BitRate()}
	if f := in.FC.InputFormat(); f != nil {
		info.Format = f.Name()
	}
	if d := in.FC.Duration(); d > 0 {
		info.Duration = float64(d) / float64(astiav.TimeBase)
	}
	for _, s := range in.FC.Streams() {
		par := s.CodecParameters()
		si := StreamInfo{Index: s.Index(), Type: par.MediaType().String(), Codec: par.CodecID().Name()}
		if d := s.Duration(); d > 0 {
			si.Duration = float64(d) * s.TimeBase().Float64()
		}
		switch par.MediaType() {
		case astiav.MediaTypeVideo:
			si.Width, si.Height = par.Width(), par.Height()
			if r := s.AvgFrameRate(); r.Den() != 0 {
				si.FrameRate = r.Float64()
			}
			si.Frames = s.NbFrames()
		case astiav.MediaTypeAudio:
			si.SampleRate = par.SampleRate()
			si.Channels = par.Channels()
		}
		info.Streams = append(info.Streams, si)
		// Without avformat_find_stream_info (skipped when the header is
		// complete) the container's duration and bit rate stay unset.
		info.Duration = max(info.Duration, si.Duration)
		if info.BitRate == 0 {
			info.BitRate = par.BitRate()
		}
	}
	return info, nil
}
