package formats

import (
	"encoding/binary"
	"math"
)

// WAV is the parsed header of a RIFF WAVE file and a view of its samples.
type WAV struct {
	// Format is 1 for integer PCM, 3 for IEEE float (the subformat of a
	// WAVE_FORMAT_EXTENSIBLE header).
	Format        int
	Channels      int
	SampleRate    int
	BitsPerSample int
	// Data is the interleaved samples, a whole number of frames, aliasing
	// the input.
	Data []byte
}

// Frames is the number of samples per channel in Data.
func (w *WAV) Frames() int64 { return int64(len(w.Data) / w.frameSize()) }

func (w *WAV) frameSize() int { return w.Channels * w.BitsPerSample / 8 }

// DType is the element type of the samples as numpy names it, as SPDL's
// load_wav: 8-bit PCM is unsigned, wider PCM signed, float is float.
func (w *WAV) DType() string {
	switch {
	case w.Format == 3 && w.BitsPerSample == 32:
		return "float32"
	case w.Format == 3:
		return "float64"
	case w.BitsPerSample == 8:
		return "uint8"
	case w.BitsPerSample == 16:
		return "int16"
	}
	return "int32"
}

// ParseWAV reads a RIFF WAVE file: its fmt chunk and the extent of its data
// chunk. Supported: PCM of 8, 16 or 32 bits, IEEE float of 32 or 64 bits
// (plain or WAVE_FORMAT_EXTENSIBLE). A data chunk that declares more bytes
// than the file holds is refused as truncated, except the 0xFFFFFFFF size
// that streaming writers leave (then the data runs to the end of the file).
func ParseWAV(b []byte) (*WAV, error) {
	if len(b) == 0 {
		return nil, errorf("wav: empty input (0 bytes)")
	}
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return nil, errorf("wav: not a RIFF WAVE file")
	}
	var w *WAV
	pos := 12
	for {
		if pos+8 > len(b) {
			if w == nil {
				return nil, errorf("wav: truncated: no fmt chunk")
			}
			return nil, errorf("wav: truncated: no data chunk")
		}
		id := string(b[pos : pos+4])
		size := uint64(binary.LittleEndian.Uint32(b[pos+4:]))
		body := pos + 8
		switch id {
		case "fmt ":
			if size > uint64(len(b)-body) {
				return nil, errorf("wav: truncated fmt chunk")
			}
			f, err := parseFmt(b[body : body+int(size)])
			if err != nil {
				return nil, err
			}
			w = f
		case "data":
			if w == nil {
				return nil, errorf("wav: data chunk before the fmt chunk")
			}
			avail := uint64(len(b) - body)
			if size == math.MaxUint32 {
				size = avail
			} else if size > avail {
				return nil, errorf("wav: truncated: the data chunk declares %d bytes, %d are present", size, avail)
			}
			fs := uint64(w.frameSize())
			w.Data = b[body : body+int(size-size%fs)]
			return w, nil
		}
		next := uint64(body) + size + size&1 // chunks are padded to even sizes
		if next > uint64(len(b)) {
			return nil, errorf("wav: truncated %q chunk", id)
		}
		pos = int(next)
	}
}

func parseFmt(c []byte) (*WAV, error) {
	if len(c) < 16 {
		return nil, errorf("wav: fmt chunk of %d bytes is too short", len(c))
	}
	w := &WAV{
		Format:        int(binary.LittleEndian.Uint16(c[0:])),
		Channels:      int(binary.LittleEndian.Uint16(c[2:])),
		SampleRate:    int(binary.LittleEndian.Uint32(c[4:])),
		BitsPerSample: int(binary.LittleEndian.Uint16(c[14:])),
	}
	if w.Format == 0xFFFE { // WAVE_FORMAT_EXTENSIBLE: the subformat GUID starts with the format code
		if len(c) < 40 {
			return nil, errorf("wav: extensible fmt chunk of %d bytes is too short", len(c))
		}
		w.Format = int(binary.LittleEndian.Uint16(c[24:]))
	}
	switch {
	case w.Channels == 0:
		return nil, errorf("wav: 0 channels")
	case w.SampleRate == 0:
		return nil, errorf("wav: sample rate 0")
	case w.Format == 1 && (w.BitsPerSample == 8 || w.BitsPerSample == 16 || w.BitsPerSample == 32):
	case w.Format == 3 && (w.BitsPerSample == 32 || w.BitsPerSample == 64):
	case w.Format == 1 || w.Format == 3:
		return nil, errorf("wav: unsupported sample size of %d bits (format %d); load_audio reads it", w.BitsPerSample, w.Format)
	default:
		return nil, errorf("wav: unsupported format code %#x (PCM and IEEE float are supported; load_audio reads others)", w.Format)
	}
	return w, nil
}

// Window narrows w.Data to the frames from offset seconds for duration
// seconds (duration < 0: to the end), as SPDL's load_wav does: both must
// be finite, the offset >= 0 and inside the audio.
func (w *WAV) Window(offset, duration float64) error {
	if math.IsNaN(offset) || math.IsInf(offset, 0) || offset < 0 {
		return errorf("wav: time offset must be a finite number of seconds >= 0, got %v", offset)
	}
	if math.IsNaN(duration) || math.IsInf(duration, 0) {
		return errorf("wav: duration must be a finite number of seconds, got %v", duration)
	}
	frames := w.Frames()
	start := int64(offset * float64(w.SampleRate))
	if start > frames || (start == frames && frames > 0 && offset > 0) {
		return errorf("wav: time offset %v s is past the end of the audio (%v s)", offset, float64(frames)/float64(w.SampleRate))
	}
	end := frames
	if duration >= 0 {
		if n := int64(duration * float64(w.SampleRate)); start+n < end {
			end = start + n
		}
	}
	fs := int64(w.frameSize())
	w.Data = w.Data[start*fs : end*fs]
	return nil
}
