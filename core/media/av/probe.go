package av

import (
	"math"

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
	// Rotation is how many degrees clockwise (0, 90, 180 or 270) a video
	// is to be turned for display, from its display matrix (a phone's
	// "rotate" tag); decode_video applies it with apply_rotation.
	Rotation int `json:"rotation,omitempty"`
	// SampleAspectRatio is the shape of a pixel, [num, den] (width over
	// height), when the stream gives one other than 1:1; decode_video
	// stretches the width by it with apply_sar.
	SampleAspectRatio []int `json:"sample_aspect_ratio,omitempty"`
	// AttachedPicture marks a picture attached to the file (cover art),
	// which FFmpeg lists as a one-frame video stream; decode_video
	// ignores it.
	AttachedPicture bool `json:"attached_picture,omitempty"`
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
			si.Rotation = Rotation(s)
			if r := SampleAspectRatio(s); r.Num() > 0 && r.Den() > 0 && r.Num() != r.Den() {
				si.SampleAspectRatio = []int{r.Num(), r.Den()}
			}
			si.AttachedPicture = AttachedPicture(s)
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

// Rotation is how many degrees clockwise (0, 90, 180 or 270) the stream's
// display matrix turns its frames for display; other angles round to the
// nearest quarter turn, and flips are ignored.
func Rotation(s *astiav.Stream) int {
	b := s.SideData(astiav.PacketSideDataTypeDisplaymatrix)
	if len(b) < 36 {
		return 0
	}
	m, err := astiav.NewDisplayMatrixFromBytes(b)
	if err != nil {
		return 0
	}
	a := m.Rotation() // clockwise degrees; NaN for a degenerate matrix
	if math.IsNaN(a) || math.IsInf(a, 0) {
		return 0
	}
	q := int(math.Round(a/90)) % 4
	if q < 0 {
		q += 4
	}
	return q * 90
}

// SampleAspectRatio is the stream's pixel shape (the container's, else the
// codec's); 0/1 when unknown.
func SampleAspectRatio(s *astiav.Stream) astiav.Rational {
	if r := s.SampleAspectRatio(); r.Num() > 0 && r.Den() > 0 {
		return r
	}
	return s.CodecParameters().SampleAspectRatio()
}
