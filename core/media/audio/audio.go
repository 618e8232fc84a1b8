// Package audio decodes audio (WAV, FLAC, MP3, Ogg Vorbis, Opus, AAC/M4A:
// whatever the linked FFmpeg decodes) into float32 tensors of shape
// (channels, samples) in [-1, 1], and registers the decode_audio op.
//
// Decoding resamples and remixes with libswresample, which writes planar
// float32 straight into the tensor's C memory when the output length is
// known in advance (num_samples), and otherwise into growable C planes
// that are copied once into the tensor at the end. It reads only up to
// start+duration, so cropping a long file costs what the crop costs.
//
// Start is sample-exact: the samples equal those of a full decode sliced
// at round(start*rate), resampled or not, for WAV, FLAC, MP3, Ogg Vorbis
// and Opus, MP4/M4A and ADTS AAC, MPEG-TS and Matroska FLAC (tested). Where
// a container's timestamps are coarse (WebM Opus: 1 ms, with codec delay)
// a seek can land a few milliseconds off.
//
// FLAC and WAV are opened by their signature (see openOptions): no format
// probe, and for FLAC no avformat_find_stream_info. Resamplers are cached
// by configuration between decodes (convert.c), which spares building the
// filter bank; either way the samples are the same, bit for bit.
//
// Costs (go test -bench . on a 2-core AMD EPYC VM, one core per decode):
// 10 s of 16 kHz mono decodes in about 6 ms from FLAC or MP3 (1500-1650x
// real time), about 8-10 ms when resampled to 8 kHz; a 1 s crop 5 s into
// a 10 s MP3 takes about 2 ms. BenchmarkPhases splits bench_audio.py's
// clip (4 s of 44.1/48 kHz stereo to 16 kHz mono) into phases: for FLAC,
// open 25 us, demux 250-300 us, FLAC decoding about 2.9 ms (FFmpeg's
// decoder: the bulk), resampling about 0.7 ms; for 16-bit WAV, open 65 us,
// demux and PCM decode about 0.45 ms, resampling about 0.8 ms.
package audio

/*
#cgo pkg-config: libswresample libavutil libavcodec
#cgo CFLAGS: -O2 -std=gnu11 -fvisibility=hidden
#include "convert.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"

	"github.com/asticode/go-astiav"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// Options say what part of the audio to decode and in what shape. The
// zero value decodes everything at the file's rate and channel count.
type Options struct {
	// SampleRate resamples to this rate (Hz); 0 keeps the file's. Rates
	// below 1/128 of the file's are refused: the resampling filter grows
	// with the ratio.
	SampleRate int
	// NumChannels remixes to this many channels (at most 64) with
	// libswresample's standard matrices, normalized so that no output
	// exceeds full scale (stereo to mono is the average of the two); mono
	// is copied into every output channel. 0 keeps the file's.
	NumChannels int
	// LowpassFilterWidth is the resampling filter's length as torchaudio
	// counts it: the windowed sinc's zero crossings on each side (twice
	// it is libswresample's filter_size). 0 keeps libswresample's default,
	// 16, which SPDL and the ffmpeg CLI use; torchaudio's default is 6,
	// which costs about half as much to apply and lets a little more
	// aliasing through near the new Nyquist frequency.
	LowpassFilterWidth int
	// Start skips this many seconds: the decoder seeks (for starts past
	// half a second) and then drops samples before Start exactly.
	Start float64
	// Duration keeps at most this many seconds from Start; 0 decodes to
	// the end.
	Duration float64
	// NumSamples, when > 0, makes the output exactly this many samples per
	// channel: longer audio is cropped (decoding stops there), shorter is
	// padded with zeros at the end. This is what batching needs.
	NumSamples int
	// MaxSamples bounds the output's size in samples, channels times
	// samples per channel (float32 each), so that a few bytes claiming
	// hours of audio, or a 1 Hz file resampled to 16 kHz, fail fast
	// instead of taking gigabytes; 0 means DefaultMaxSamples. It is
	// checked before the output is allocated, against num_samples or the
	// length the file declares (its duration after Start, capped by
	// Duration, at the output rate), and again while decoding, which
	// stops as soon as the output would pass it (for files whose length
	// is not known up front, or is wrong).
	MaxSamples int64
}

// DefaultMaxSamples is the largest output (channels times samples per
// channel) decoded unless Options.MaxSamples says otherwise: a little
// over an hour of 48 kHz stereo, 1.6 GB of float32.
const DefaultMaxSamples = 400_000_000

// maxFilterWidth bounds LowpassFilterWidth: past 64 zero crossings a side
// the filter costs much and changes nothing audible.
const maxFilterWidth = 64

func (o Options) maxSamples() int64 {
	if o.MaxSamples > 0 {
		return o.MaxSamples
	}
	return DefaultMaxSamples
}

func (o Options) validate() error {
	switch {
	case o.SampleRate < 0 || o.SampleRate > maxSampleRate:
		return fmt.Errorf("sample_rate must be between 1 and %d Hz, not %d", maxSampleRate, o.SampleRate)
	case o.NumChannels < 0 || o.NumChannels > C.SPDL_AUDIO_MAX_CHANNELS:
		return fmt.Errorf("num_channels must be between 1 and %d, not %d", C.SPDL_AUDIO_MAX_CHANNELS, o.NumChannels)
	case !(o.Start >= 0) || math.IsInf(o.Start, 0):
		return fmt.Errorf("start must be a number of seconds >= 0, not %v", o.Start)
	case !(o.Duration >= 0) || math.IsInf(o.Duration, 0):
		return fmt.Errorf("duration must be a number of seconds > 0, not %v", o.Duration)
	case o.LowpassFilterWidth < 0 || o.LowpassFilterWidth > maxFilterWidth:
		return fmt.Errorf("lowpass_filter_width must be between 1 and %d, not %d", maxFilterWidth, o.LowpassFilterWidth)
	case o.NumSamples < 0:
		return fmt.Errorf("num_samples must be >= 1, not %d", o.NumSamples)
	case o.MaxSamples < 0:
		return fmt.Errorf("max_samples must be >= 1, not %d", o.MaxSamples)
	}
	return nil
}

const (
	maxSampleRate = 1 << 22
	// Seeking costs a container seek and a decoder reopen; for starts this
	// close to the beginning, decoding and dropping is as cheap.
	seekMin = 0.5
	// Seek this far before Start: decoders with inter-frame state (MP3's
	// bit reservoir, Opus and AAC's overlap) need some audio to settle.
	preroll = 0.2
)

// seeks and seekMisses count how often Decode seeked, and how often the
// seek landed after Start and it decoded from the beginning instead.
var seeks, seekMisses atomic.Int64

// errSeekMissed says the seek landed after Start (or nowhere): decode
// from the beginning instead.
var errSeekMissed = errors.New("seek missed")

// Decode decodes the first audio stream of src. The caller releases the
// tensor. Errors are *av.Error values naming src.
func Decode(ctx context.Context, src av.Source, o Options) (*tensor.Tensor, error) {
	if err := o.validate(); err != nil {
		return nil, av.Errorf(src, "decode audio", "%w", err)
	}
	t, err := decode(ctx, src, o, true, fastOpen && rawFLAC)
	if errors.Is(err, errRaw) && ctx.Err() == nil {
		rawFallbacks.Add(1)
		t, err = decode(ctx, src, o, true, false)
	}
	if errors.Is(err, errSeekMissed) {
		seekMisses.Add(1)
		t, err = decode(ctx, src, o, false, false)
	}
	return t, err
}

// decode decodes src, seeking to o.Start if seek says it may, and reading
// a FLAC file's frames without the demuxer if raw says it may (flacraw.go).
func decode(ctx context.Context, src av.Source, o Options, seek, raw bool) (_ *tensor.Tensor, err error) {
	oo := openOptions(src)
	in, err := av.Open(src, oo)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	st, err := in.Stream(astiav.MediaTypeAudio)
	if err != nil {
		return nil, err
	}
	dec, err := in.OpenDecoder(st, av.DecoderOptions{Threads: 1})
	if err != nil {
		return nil, err
	}
	defer dec.Close()

	tb := st.TimeBase().Float64()
	origin := st.StartTime()
	if origin == astiav.NoPtsValue {
		origin = 0
	}
	wantSeek := seek && o.Start > seekMin && tb > 0
	// prefix: the raw frames stop before the end of the file, so running
	// out of them before the output is full means the estimate was short.
	usedRaw, prefix := false, false
	if raw && oo.Format == "flac" && !wantSeek {
		if span, ok := flacFrames(src, o); ok {
			if err := dec.SetRaw(int(span.n), func(b []byte) error { return readSpan(src, span, b) }); err == nil {
				usedRaw, prefix = true, !span.whole
				rawUses.Add(1)
			}
		}
	}
	if usedRaw {
		defer func() {
			if err != nil && ctx.Err() == nil {
				err = fmt.Errorf("%w: %w", errRaw, err)
			}
		}()
	}
	seeked := false
	if wantSeek {
		target := origin + int64((o.Start-preroll)/tb)
		if err := in.FC.SeekFrame(st.Index(), target, astiav.NewSeekFlags(astiav.SeekFlagBackward)); err != nil {
			return nil, errSeekMissed
		}
		if err := dec.Flush(); err != nil {
			return nil, err
		}
		seeked = true
		seeks.Add(1)
	}

	a := C.spdl_audio_new(C.int(o.SampleRate), C.int(o.NumChannels), C.int(2*o.LowpassFilterWidth), C.int64_t(o.maxSamples()*4))
	if a == nil {
		return nil, av.Errorf(src, "decode audio", "out of memory")
	}
	defer C.spdl_audio_free(a)
	// out is the tensor being filled; a failure releases it. (Not the
	// named result: "return nil, err" would clear that before the defer.)
	var out *tensor.Tensor
	defer func() {
		if err != nil {
			out.Release()
		}
	}()
	fail := func(rc C.int) error {
		if rc == C.SPDL_AUDIO_ETOOBIG {
			return av.Errorf(src, "decode audio", "audio too large: the decoded audio would be over max_samples (%d, channels times samples); set duration or num_samples, or raise max_samples", o.maxSamples())
		}
		if rc == C.SPDL_AUDIO_ERATIO {
			return av.Errorf(src, "decode audio", "the sample rate is more than %d times the requested %d Hz; resampling that far is not supported",
				C.SPDL_AUDIO_MAX_DOWNSAMPLING, int(C.spdl_audio_rate(a)))
		}
		return av.Errorf(src, "decode audio", "%s", strerror(rc))
	}

	// setup fixes the output from the first frame, which starts t0
	// seconds into the stream, and says where the output goes.
	ready := false
	setup := func(fp *C.AVFrame, t0 float64) error {
		ready = true
		if rc := C.spdl_audio_setup(a, fp); rc < 0 {
			return fail(rc)
		}
		rate := float64(C.spdl_audio_rate(a))
		nch := int64(C.spdl_audio_channels(a))
		// A seek that landed after Start, or timestamps that put the
		// frame well before the stream's start, send Decode back to the
		// beginning, where no timestamps are needed.
		if seeked && (t0 > o.Start+0.5/rate || t0 < -1) {
			return errSeekMissed
		}
		skip := int64(math.Round((o.Start - t0) * rate))
		limit := int64(-1)
		if o.Duration > 0 {
			limit = int64(math.Round(o.Duration * rate))
		}
		var rc C.int
		if o.NumSamples > 0 {
			if n := nch * int64(o.NumSamples); n > o.maxSamples() {
				return av.Errorf(src, "decode audio", "audio too large: num_samples %d x %d channels = %d samples is over max_samples (%d)", o.NumSamples, nch, n, o.maxSamples())
			}
			var err error
			if out, err = tensor.New(tensor.Float32, nch, int64(o.NumSamples)); err != nil {
				return av.Errorf(src, "decode audio", "%w", err)
			}
			rc = C.spdl_audio_set_sink(a, (*C.float)(out.Data()), C.int64_t(o.NumSamples), 0, C.int64_t(skip), C.int64_t(limit))
		} else {
			// Refuse what the file declares before anything is allocated;
			// the planes' growth enforces the bound for the rest.
			if secs, ok := declared(in, st); ok {
				keep := max(0, secs-o.Start)
				if o.Duration > 0 {
					keep = min(keep, o.Duration)
				}
				if n := keep * rate * float64(nch); n > float64(o.maxSamples()) {
					return av.Errorf(src, "decode audio", "audio too large: %.6gs of %d Hz audio (declared) at %g Hz x %d channels = %.0f samples is over max_samples (%d); set duration or num_samples, or raise max_samples",
						keep, int(fp.sample_rate), rate, nch, n, o.maxSamples())
				}
			}
			hint := min(lengthHint(in, st, rate, o, limit), o.maxSamples()/nch)
			rc = C.spdl_audio_set_sink(a, nil, 0, C.int64_t(hint), C.int64_t(skip), C.int64_t(limit))
		}
		if rc < 0 {
			return fail(rc)
		}
		return nil
	}
	push := func(fp *C.AVFrame, offset int) error {
		if rc := C.spdl_audio_push(a, fp, C.int(offset)); rc < 0 {
			return fail(rc)
		}
		return nil
	}
	// After a seek, where the first frame starts is told by the second:
	// a freshly opened decoder (av's Decoder.Flush reopens it) trims codec
	// delay (MP3, AAC, Opus pre-skip) from the head of its first frame
	// without moving that frame's pts (FFmpeg moves it only when the codec
	// context has a pkt_timebase, which av does not set), so the first
	// frame is held until the second arrives. Without a seek, decoding
	// starts at the stream's start and no timestamps are needed: the
	// first decoded sample is time 0.
	var held *astiav.Frame
	defer func() {
		if held != nil {
			held.Free()
		}
	}()
	seconds := func(fp *C.AVFrame) (float64, bool) {
		ts := int64(C.spdl_frame_ts(fp))
		return float64(ts-origin) * tb, ts != astiav.NoPtsValue
	}
	for n := 0; ; n++ {
		if n%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		f, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		fp := (*C.AVFrame)(f.UnsafePointer())
		if !ready {
			switch {
			case !seeked:
				if err := setup(fp, 0); err != nil {
					return nil, err
				}
			case held == nil:
				if held = astiav.AllocFrame(); held == nil {
					return nil, av.Errorf(src, "decode audio", "out of memory allocating a frame")
				}
				if err := held.Ref(f); err != nil {
					return nil, av.Errorf(src, "decode audio", "%w", err)
				}
				continue
			default:
				hp := (*C.AVFrame)(held.UnsafePointer())
				t0, ok := seconds(fp)
				if ok && hp.sample_rate > 0 {
					t0 -= float64(hp.nb_samples) / float64(hp.sample_rate)
				} else if t0, ok = seconds(hp); !ok {
					return nil, errSeekMissed
				}
				t0, drop := align(t0, int(hp.sample_rate), int(hp.nb_samples), o)
				if err := setup(hp, t0); err != nil {
					return nil, err
				}
				err := push(hp, drop)
				held.Unref()
				if err != nil {
					return nil, err
				}
			}
		}
		if err := push(fp, 0); err != nil {
			return nil, err
		}
		if C.spdl_audio_full(a) != 0 {
			break
		}
	}
	if !ready {
		switch {
		case held != nil: // the only frame after the seek
			hp := (*C.AVFrame)(held.UnsafePointer())
			t0, ok := seconds(hp)
			if !ok {
				return nil, errSeekMissed
			}
			t0, drop := align(t0, int(hp.sample_rate), int(hp.nb_samples), o)
			if err := setup(hp, t0); err != nil {
				return nil, err
			}
			if err := push(hp, drop); err != nil {
				return nil, err
			}
		case seeked:
			// Past the end, or a seek that found nothing: the linear path
			// tells which.
			return nil, errSeekMissed
		default:
			return nil, av.Errorf(src, "decode audio", "the %s stream holds no audio that could be decoded", st.CodecParameters().CodecID().Name())
		}
	}
	if prefix && C.spdl_audio_full(a) == 0 {
		return nil, errRaw
	}
	if rc := C.spdl_audio_flush(a); rc < 0 {
		return nil, fail(rc)
	}
	if out == nil {
		n := int64(C.spdl_audio_len(a))
		var err error
		if out, err = tensor.New(tensor.Float32, int64(C.spdl_audio_channels(a)), n); err != nil {
			return nil, av.Errorf(src, "decode audio", "%w", err)
		}
	}
	C.spdl_audio_finish(a, (*C.float)(out.Data()))
	return out, nil
}

// align picks how many samples to drop from the head of the first frame
// after a seek, which starts t0 seconds into the stream, so that it starts
// on the output's sample grid: the resampler then produces the same
// samples as it does when decoding from the beginning, rather than ones
// shifted by a fraction of a sample. It returns the new start and the
// samples to drop (none when the grids meet only past the frame or past
// Start).
func align(t0 float64, inRate, n int, o Options) (float64, int) {
	if o.SampleRate == 0 || o.SampleRate == inRate || inRate <= 0 {
		return t0, 0
	}
	period := int64(inRate / gcd(inRate, o.SampleRate)) // input samples between shared grid points
	i0 := int64(math.Round(t0 * float64(inRate)))
	d := ((-i0)%period + period) % period
	t := float64(i0+d) / float64(inRate)
	if d >= int64(n) || t > o.Start {
		return t0, 0
	}
	return t, int(d)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// declared is the stream's length in seconds as the container says it
// (the stream's duration, else the file's; FFmpeg estimates it from the
// bit rate where neither is stored).
func declared(in *av.Input, st *astiav.Stream) (float64, bool) {
	if d := st.Duration(); d > 0 && d != astiav.NoPtsValue {
		if secs := float64(d) * st.TimeBase().Float64(); secs > 0 && !math.IsInf(secs, 0) {
			return secs, true
		}
	}
	if d := in.FC.Duration(); d > 0 && d != astiav.NoPtsValue {
		return float64(d) / float64(astiav.TimeBase), true
	}
	return 0, false
}

// lengthHint guesses how many samples per channel the output will hold,
// so that the planes rarely grow; headers can lie, so it stays modest.
func lengthHint(in *av.Input, st *astiav.Stream, rate float64, o Options, limit int64) int64 {
	secs, _ := declared(in, st)
	hint := int64((secs-o.Start)*rate) + 1024
	if limit >= 0 && hint > limit {
		hint = limit
	}
	return max(0, min(hint, 1<<22))
}

func strerror(rc C.int) string {
	switch rc {
	case C.SPDL_AUDIO_ECHANNELS:
		return fmt.Sprintf("a frame has no channels or more than %d", C.SPDL_AUDIO_MAX_CHANNELS)
	}
	var buf [256]C.char
	if C.av_strerror(rc, &buf[0], C.size_t(len(buf))) < 0 {
		return fmt.Sprintf("FFmpeg error %d", int(rc))
	}
	return C.GoString(&buf[0])
}
