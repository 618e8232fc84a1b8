// Package av opens media with FFmpeg (through go-astiav) from a path or from
// bytes in memory, and decodes one stream frame by frame. The image, audio
// and video ops build on it. Every FFmpeg object it allocates is freed by
// Close, on every path; errors name the media they are about.
package av

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/asticode/go-astiav"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// Source is where media comes from: a file path, or bytes in memory (Name
// then says what to call them in errors, e.g. the path they were read from).
type Source struct {
	Path string
	Data []byte
	Name string
}

func (s Source) String() string {
	switch {
	case s.Name != "":
		return s.Name
	case s.Path != "":
		return s.Path
	default:
		return fmt.Sprintf("<%d bytes>", len(s.Data))
	}
}

// Error is a failure to open or decode one piece of media.
type Error struct {
	Source string // the file, or what the bytes are called
	Op     string // "open", "decode video", ...
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("%s %q: %v", e.Op, e.Source, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Errorf makes an *Error about src.
func Errorf(src Source, op, format string, args ...any) error {
	return &Error{Source: src.String(), Op: op, Err: fmt.Errorf(format, args...)}
}

func wrap(src Source, op string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Source: src.String(), Op: op, Err: err}
}

var logOnce sync.Once

// quietLogs keeps FFmpeg from printing to the user's stderr for every
// corrupt file: the error each call returns says what went wrong.
// SPDL_GO_FFMPEG_LOG=1 restores FFmpeg's own messages for debugging.
func quietLogs() {
	logOnce.Do(func() {
		if os.Getenv("SPDL_GO_FFMPEG_LOG") == "" {
			astiav.SetLogLevel(astiav.LogLevelQuiet)
		}
	})
}

// OpenOptions tune Open.
type OpenOptions struct {
	// Format forces the container format (e.g. "image2pipe", "mp3"); empty probes.
	Format string
	// SkipStreamInfo skips avformat_find_stream_info, which reads ahead to
	// fill in stream parameters; image decoding does not need it.
	SkipStreamInfo bool
	// VideoOnly says the caller reads only the first video stream and needs
	// from the container just its size, frame rate, frame count and
	// decoding delay: where an MP4 header gives all of them,
	// avformat_find_stream_info (which decodes a frame or more) is skipped.
	VideoOnly bool
}

// Input is an opened container. It is not safe for concurrent use.
type Input struct {
	FC  *astiav.FormatContext
	src Source
	io  *astiav.IOContext
	rd  *bytesReader
	// probed says avformat_find_stream_info ran.
	probed bool
}

// Open opens src. The caller must Close the Input.
func Open(src Source, opts OpenOptions) (in *Input, err error) {
	quietLogs()
	if src.Path == "" && src.Data == nil {
		return nil, Errorf(src, "open", "neither a path nor bytes were given")
	}
	if src.Path == "" && len(src.Data) == 0 {
		return nil, Errorf(src, "open", "empty input (0 bytes)")
	}
	if src.Path != "" && src.Data == nil {
		st, err := os.Stat(src.Path)
		if err != nil {
			return nil, wrap(src, "open", err)
		}
		if st.Size() == 0 {
			return nil, Errorf(src, "open", "empty file (0 bytes)")
		}
	}
	fc := astiav.AllocFormatContext()
	if fc == nil {
		return nil, Errorf(src, "open", "out of memory allocating a format context")
	}
	in = &Input{FC: fc, src: src}
	defer func() {
		if err != nil {
			in.Close()
			in = nil
		}
	}()
	url := src.Path
	if src.Data != nil {
		in.rd = &bytesReader{b: src.Data}
		if in.io, err = astiav.AllocIOContext(64<<10, false, in.rd.read, in.rd.seek, nil); err != nil {
			return in, wrap(src, "open", err)
		}
		fc.SetPb(in.io)
		url = ""
	}
	var format *astiav.InputFormat
	if opts.Format != "" {
		if format = astiav.FindInputFormat(opts.Format); format == nil {
			return in, Errorf(src, "open", "FFmpeg has no input format %q", opts.Format)
		}
	}
	var dict *astiav.Dictionary
	if !opts.SkipStreamInfo && isWAV(src) {
		// FFmpeg's WAV demuxer asks for its PCM to be probed for other
		// codecs (S/PDIF, MP3) hidden in it; the probe holds packets back
		// and re-reads them until `probesize` bytes (5 MB) have been read,
		// which made reading a WAV cost 10-15 ms whatever part of it was
		// wanted. A tiny probesize ends that probe at the first packet;
		// the header's PCM parameters stand.
		dict = astiav.NewDictionary()
		defer dict.Free()
		if err = dict.Set("probesize", "32", astiav.NewDictionaryFlags()); err != nil {
			return in, wrap(src, "open", err)
		}
	}
	if err = fc.OpenInput(url, format, dict); err != nil {
		// avformat_open_input frees the context on failure.
		in.FC = nil
		return in, wrap(src, "open", fmt.Errorf("not a media file FFmpeg can read: %w", err))
	}
	if !opts.SkipStreamInfo && !headerComplete(fc) && !(opts.VideoOnly && videoHeaderComplete(fc)) {
		if err = fc.FindStreamInfo(nil); err != nil {
			return in, wrap(src, "open", fmt.Errorf("reading stream info: %w", err))
		}
		in.probed = true
	}
	return in, nil
}

// isWAV reports whether src starts like a RIFF/RF64/BW64 WAVE file.
func isWAV(src Source) bool {
	head := src.Data
	if head == nil {
		f, err := os.Open(src.Path)
		if err != nil {
			return false // Open reports it
		}
		var b [12]byte
		n, _ := io.ReadFull(f, b[:])
		f.Close()
		head = b[:n]
	}
	if len(head) < 12 || string(head[8:12]) != "WAVE" {
		return false
	}
	switch string(head[:4]) {
	case "RIFF", "RF64", "BW64":
		return true
	}
	return false
}

// headerComplete reports whether the container's header already gives
// every stream's parameters, so that avformat_find_stream_info (which
// reads ahead and, for PCM WAV, costs 10-15 ms per file whatever its
// length) can be skipped. Only for audio formats whose header is
// authoritative: the sample rate, channels and length are in it.
func headerComplete(fc *astiav.FormatContext) bool {
	f := fc.InputFormat()
	if f == nil {
		return false
	}
	switch f.Name() {
	case "wav", "flac", "aiff", "w64":
	default:
		return false
	}
	ss := fc.Streams()
	if len(ss) == 0 {
		return false
	}
	for _, st := range ss {
		cp := st.CodecParameters()
		if cp.MediaType() != astiav.MediaTypeAudio || cp.CodecID() == astiav.CodecIDNone ||
			cp.SampleRate() <= 0 || cp.ChannelLayout().NbChannels() <= 0 {
			return false
		}
	}
	return true
}

// videoHeaderComplete reports whether an MP4/MOV header already gives what
// decoding its first video stream needs, so that avformat_find_stream_info
// need not decode frames to find it (about 4% of the time of decoding 8
// frames from a 3 s clip). The sample table gives the frame count, the
// time-to-sample table the frame rate, and the codec's configuration
// record the size. The decoding delay (how many frames the decoder holds
// back to reorder) is what the skipped decode would otherwise guess: for
// H.264, FFmpeg's MOV demuxer derives it from the composition offsets, and
// a stream where that gave 0 keeps the full probe, since a decoder that
// learns of B-frames late drops frames. HEVC carries the delay in its
// parameter sets and VP9 never reorders its output; other codecs keep the probe.
func videoHeaderComplete(fc *astiav.FormatContext) bool {
	if f := fc.InputFormat(); f == nil || f.Name() != "mov,mp4,m4a,3gp,3g2,mj2" {
		return false
	}
	for _, st := range fc.Streams() {
		cp := st.CodecParameters()
		if cp.MediaType() != astiav.MediaTypeVideo || AttachedPicture(st) {
			continue
		}
		r := st.AvgFrameRate()
		if cp.Width() <= 0 || cp.Height() <= 0 || st.NbFrames() <= 0 || r.Num() <= 0 || r.Den() <= 0 {
			return false
		}
		switch cp.CodecID() {
		case astiav.CodecIDH264:
			return len(cp.ExtraData()) > 0 && videoDelay(st) > 0
		case astiav.CodecIDHevc:
			return len(cp.ExtraData()) > 0
		case astiav.CodecIDVp9:
			return true
		}
		return false
	}
	return false
}

// Probed reports whether Open ran avformat_find_stream_info.
func (in *Input) Probed() bool { return in.probed }

// Source is what the input was opened from.
func (in *Input) Source() Source { return in.src }

// Close frees the input and everything it owns. Safe to call twice.
func (in *Input) Close() {
	if in.FC != nil {
		in.FC.CloseInput()
		in.FC.Free()
		in.FC = nil
	}
	if in.io != nil {
		in.io.Free()
		in.io = nil
	}
}

// Stream returns the first stream of the given type. For video, pictures
// attached to the file (an MP3's or M4A's cover art, which FFmpeg shows as
// a one-frame video stream) do not count.
func (in *Input) Stream(mt astiav.MediaType) (*astiav.Stream, error) {
	covers := 0
	for _, s := range in.FC.Streams() {
		if s.CodecParameters().MediaType() != mt {
			continue
		}
		if mt == astiav.MediaTypeVideo && AttachedPicture(s) {
			covers++
			continue
		}
		return s, nil
	}
	if covers > 0 {
		return nil, Errorf(in.src, "open", "no %s stream: its only picture is attached cover art (an audio file?)", mt)
	}
	return nil, Errorf(in.src, "open", "no %s stream", mt)
}

// bytesReader serves Data to FFmpeg's custom I/O.
type bytesReader struct {
	b   []byte
	pos int64
}

func (r *bytesReader) read(p []byte) (int, error) {
	if r.pos >= int64(len(r.b)) {
		return 0, astiav.ErrEof // go-astiav passes astiav errors through; io.EOF would become AVERROR_UNKNOWN
	}
	n := copy(p, r.b[r.pos:])
	r.pos += int64(n)
	return n, nil
}

// FFmpeg's AVSEEK_SIZE ("tell me the size", not a seek) and AVSEEK_FORCE.
const (
	avseekSize  = 0x10000
	avseekForce = 0x20000
)

func (r *bytesReader) seek(offset int64, whence int) (int64, error) {
	if whence&avseekSize != 0 {
		return int64(len(r.b)), nil
	}
	var pos int64
	switch whence &^ avseekForce {
	case io.SeekStart:
		pos = offset
	case io.SeekCurrent:
		pos = r.pos + offset
	case io.SeekEnd:
		pos = int64(len(r.b)) + offset
	default:
		return -1, fmt.Errorf("bad whence %d", whence)
	}
	if pos < 0 {
		return -1, errors.New("seek before start")
	}
	r.pos = pos
	return pos, nil
}

// SourceOf reads an op's input as media: bytes (the encoded file) or a
// string (its path). ok is false for anything else.
func SourceOf(v any) (src Source, ok bool) {
	switch x := v.(type) {
	case []byte:
		return Source{Data: x}, true
	case string:
		return Source{Path: x}, true
	}
	return Source{}, false
}

// DecodeField is the body of a decode op: it runs decode on the media in
// field of item (bytes or a path) and puts the tensor back. Ownership is
// ops.Field.Apply's. name is the op's, kind what it decodes ("audio").
func DecodeField(ctx context.Context, field ops.Field, item any, name, kind string,
	decode func(context.Context, Source) (*tensor.Tensor, error)) (any, error) {
	return field.Apply(item, func(in any) (any, error) {
		src, ok := SourceOf(in)
		if !ok {
			value.Release(in)
			return nil, fmt.Errorf("%s: expected encoded %s (bytes) or a file path (str), got %s", name, kind, value.Describe(in))
		}
		t, err := decode(ctx, src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return t, nil
	})
}
