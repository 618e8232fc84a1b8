package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync/atomic"

	"github.com/spdl-go/spdl-go/core/media/av"
)

// FLAC without the demuxer's parser. FFmpeg's FLAC demuxer hands the
// decoder frames that its parser finds by scoring candidate headers and
// checking CRCs over every byte: about 0.3 ms of a 4 s clip's 3.5 ms. The
// FLAC decoder needs none of that, since it knows where each frame ends
// and takes a packet of many frames one frame per call. So a FLAC file
// decoded from its start gets its frames as one packet read straight from
// the file: all of them, or, when the output has a known end (num_samples
// or duration), enough of them for it with a margin. Whatever goes wrong
// on this path (a corrupt or cut frame, a margin too small) sends Decode
// back to the demuxer's path, which gives the usual result and errors.

// errRaw says the FLAC frames read straight from the file did not decode
// to the whole output: decode again through the demuxer.
var errRaw = errors.New("decoding FLAC frames without the demuxer failed")

// rawFLAC can be turned off by tests, to compare this path with the
// demuxer's.
var rawFLAC = true

// rawUses counts the decodes that took this path; rawFallbacks those that
// then went through the demuxer after all.
var rawUses, rawFallbacks atomic.Int64

const maxFLACBlocks = 1024 // metadata blocks walked before giving up

// flacMargin pads the estimate of the bytes that hold the samples wanted:
// frames compress unevenly, and the resampler reads ahead. (Variables so
// that a test can make the estimate fall short.)
var (
	flacMargin      = 1.25
	flacMarginBytes = int64(64 << 10)
)

// flacSpan is where a FLAC file's frames lie and how many bytes of them
// to read.
type flacSpan struct {
	off, n int64
	whole  bool // n reaches the end of the file
}

// flacFrames finds the frames of the FLAC file src (the bytes after its
// metadata blocks) and how many of them o needs. ok is false when the
// file is not laid out as expected: the demuxer's path then handles it.
func flacFrames(src av.Source, o Options) (span flacSpan, ok bool) {
	var r io.ReaderAt
	var size int64
	if src.Data != nil {
		r, size = bytes.NewReader(src.Data), int64(len(src.Data))
	} else {
		f, err := os.Open(src.Path)
		if err != nil {
			return span, false
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return span, false
		}
		r, size = f, st.Size()
	}
	var b [4 + 4 + 34]byte // "fLaC", STREAMINFO's block header and body
	if _, err := r.ReadAt(b[:], 0); err != nil || string(b[:4]) != "fLaC" || b[4]&0x7f != 0 {
		return span, false
	}
	info := b[8:]
	maxFrame := int64(info[7])<<16 | int64(info[8])<<8 | int64(info[9])
	rate := int64(binary.BigEndian.Uint32(info[10:14]) >> 12)
	total := int64(binary.BigEndian.Uint64(info[10:18]) & (1<<36 - 1))
	off := int64(4)
	for i := 0; ; i++ {
		var h [4]byte
		if i == maxFLACBlocks {
			return span, false
		}
		if _, err := r.ReadAt(h[:], off); err != nil {
			return span, false
		}
		off += 4 + (int64(h[1])<<16 | int64(h[2])<<8 | int64(h[3]))
		if h[0]&0x80 != 0 {
			break
		}
	}
	var sync [2]byte
	if _, err := r.ReadAt(sync[:], off); err != nil || sync[0] != 0xff || sync[1]&0xfe != 0xf8 {
		return span, false
	}
	span = flacSpan{off: off, n: size - off, whole: true}
	if end := o.end(float64(rate)); end > 0 && total > 0 && rate > 0 {
		need := math.Ceil((end+0.1)*float64(rate)) / float64(total) // share of the samples, 0.1 s spare
		est := int64(need*flacMargin*float64(span.n)) + 2*max(maxFrame, flacMarginBytes)
		if est < span.n {
			span.n, span.whole = est, false
		}
	}
	return span, span.n > 0 && span.n <= math.MaxInt32-64
}

// end is the time in seconds where the output ends, if o says (0 when
// it runs to the end of the file); rate is the file's.
func (o Options) end(rate float64) float64 {
	d := o.Duration
	if o.NumSamples > 0 {
		out := float64(o.SampleRate)
		if out == 0 {
			out = rate
		}
		if out <= 0 {
			return 0
		}
		if s := float64(o.NumSamples) / out; d == 0 || s < d {
			d = s
		}
	}
	if d == 0 {
		return 0
	}
	return o.Start + d
}

// readSpan fills b with the span's bytes of src.
func readSpan(src av.Source, span flacSpan, b []byte) error {
	if src.Data != nil {
		copy(b, src.Data[span.off:span.off+int64(len(b))])
		return nil
	}
	f, err := os.Open(src.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.ReadAt(b, span.off); err != nil {
		return fmt.Errorf("reading %d bytes at %d: %w", len(b), span.off, err)
	}
	return nil
}
