package video

/*
#include "convert.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/asticode/go-astiav"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// Decode decodes the frames of src that opts select into a new uint8
// tensor of shape (frames, height, width, channels), which the caller
// releases. Errors name src. Every FFmpeg object is freed before it
// returns, on every path. It checks ctx between frames.
func Decode(ctx context.Context, src av.Source, opts Options) (*tensor.Tensor, error) {
	t, _, err := decode(ctx, src, opts)
	return t, err
}

// decode is Decode that also says how many frames the decoder returned
// (tests check that seeking skips work).
func decode(ctx context.Context, src av.Source, opts Options) (*tensor.Tensor, int64, error) {
	t, st, err := decodeStats(ctx, src, opts)
	return t, st.decoded, err
}

// stats are what one Decode call did, for the op's counters.
type stats struct {
	decoded int64 // frames the codec returned
	frames  int64 // frames in the video, as far as known (0 if not)
}

func decodeStats(ctx context.Context, src av.Source, opts Options) (*tensor.Tensor, stats, error) {
	if err := opts.Validate(); err != nil {
		return nil, stats{}, av.Errorf(src, "decode video", "%v", err)
	}
	d, err := newDecoder(src, &opts)
	if err != nil {
		return nil, stats{}, err
	}
	defer d.close()
	t, err := d.run(ctx)
	return t, stats{decoded: d.seq, frames: d.n}, err
}

// How far a frame count is to be trusted.
type countKind int

const (
	countUnknown   countKind = iota
	countFormat              // the whole file's duration times the frame rate: a hint
	countStream              // the video stream's duration times the frame rate
	countContainer           // the container's frame count, or packets counted
)

// decoder is one Decode call: an open input and decoder, where decoding
// stands, and the converter into the output.
type decoder struct {
	src av.Source
	o   *Options

	in  *av.Input
	dec *av.Decoder
	st  *astiav.Stream

	rate   float64 // r, frames per second; 0 when unknown
	tb     float64 // seconds per time-base tick; 0 when unknown
	s0     int64   // the stream's start timestamp, in ticks
	n      int64   // frame count; see nKind
	nKind  countKind
	noSeek bool // timestamps are missing: count frames from the start instead
	// onlyFromStart: the stream ended early after a seek; decode from the start.
	onlyFromStart bool

	// Where decoding stands.
	fromStart bool  // decoding began at the stream start (opened, not seeked)
	consumed  bool  // packets were read since the input was opened
	afterSeek bool  // a seek happened and no frame has come out since
	attempt   int   // how many times the current target was re-seeked
	overshoot int64 // how many frames past its target the last seek landed
	lastK     int64 // index of the last frame next returned
	kValid    bool  // lastK is since the last seek or open
	seq       int64 // frames decoded, to recognize one frame placed twice
	needKey   bool  // a seek happened: frames before the first keyframe out are leading frames, dropped
	prev      *astiav.Frame
	prevSeq   int64
	havePrev  bool

	// Decoding only what the selected frames need (decodeSlots).
	plan     bool    // skip non-reference frames no slot needs
	wanted   []int64 // the selected frame indices, sorted, distinct
	recent   [32]int64
	nRecent  int   // packet indices seen (recent holds the last 32)
	skipped  int64 // packets the codec was allowed to drop
	broken   bool  // packets showed timestamps that make skipping unsafe
	keys     []int64
	keyLag   int64 // most ticks a keyframe packet's pts was after its dts
	lastJump int64 // the frame pastKeyframe last jumped to

	// Output.
	conv     *C.spdl_video
	channels int
	oh, ow   int    // fixed by the first frame placed
	rot      int    // degrees clockwise to turn frames (ApplyRotation)
	sw, sh   int    // the size frames are scaled to, before turning
	turn     []byte // a scaled frame before it is turned
}

func newDecoder(src av.Source, o *Options) (d *decoder, err error) {
	d = &decoder{src: src, o: o, lastJump: -1}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	if err = d.open(); err != nil {
		return d, err
	}
	st := d.st
	for _, r := range []astiav.Rational{st.AvgFrameRate(), st.RFrameRate()} {
		if r.Num() > 0 && r.Den() > 0 && r.Float64() <= 1000 {
			d.rate = r.Float64()
			break
		}
	}
	if tb := st.TimeBase(); tb.Num() > 0 && tb.Den() > 0 {
		d.tb = tb.Float64()
	}
	if s := st.StartTime(); s != astiav.NoPtsValue {
		d.s0 = s
	}
	d.estimateCount()
	if o.ApplyRotation {
		d.rot = av.Rotation(st)
	}
	d.prev = astiav.AllocFrame()
	channels, pixFmt, flags := o.format()
	d.channels = channels
	d.conv = C.spdl_video_new(pixFmt, flags)
	if d.prev == nil || d.conv == nil {
		return d, av.Errorf(src, "decode video", "out of memory")
	}
	return d, nil
}

// open opens the input and its first video stream's decoder, positioned at
// the start.
func (d *decoder) open() error {
	in, err := av.Open(d.src, av.OpenOptions{VideoOnly: !d.o.fullProbe})
	if err != nil {
		return err
	}
	d.in = in
	if d.st, err = in.Stream(astiav.MediaTypeVideo); err != nil {
		var e *av.Error
		if errors.As(err, &e) && strings.Contains(e.Err.Error(), "cover art") {
			return av.Errorf(d.src, "decode video", "%v", e.Err)
		}
		return av.Errorf(d.src, "decode video", "no video stream (an audio-only file?)")
	}
	par := d.st.CodecParameters()
	if w, h := int64(par.Width()), int64(par.Height()); w*h > d.o.maxPixels() {
		return av.Errorf(d.src, "decode video", "frames are %dx%d, more than max_pixels (%d) allows", w, h, d.o.maxPixels())
	}
	if d.dec, err = in.OpenDecoder(d.st, av.DecoderOptions{Threads: d.o.Threads, Lookahead: lookahead}); err != nil {
		return err
	}
	if d.plan {
		d.dec.Skip = d.skippable
	}
	d.keys = av.KeyframeTimestamps(d.st)
	slices.Sort(d.keys)
	d.fromStart, d.consumed, d.afterSeek = true, false, false
	d.forget()
	return nil
}

func (d *decoder) closeInput() {
	if d.dec != nil {
		d.dec.Close()
		d.dec = nil
	}
	if d.in != nil {
		d.in.Close()
		d.in = nil
	}
	d.st = nil // it belonged to the input
}

func (d *decoder) close() {
	d.closeInput()
	if d.prev != nil {
		d.prev.Free()
		d.prev = nil
	}
	if d.conv != nil {
		C.spdl_video_free(d.conv)
		d.conv = nil
	}
}

// reopen goes back to the start of the stream the one way that works for
// every container: opening it again.
func (d *decoder) reopen() error {
	d.closeInput()
	return d.open()
}

// forget drops what was known about the frames before a seek.
func (d *decoder) forget() {
	if d.prev != nil {
		d.prev.Unref()
	}
	d.havePrev, d.kValid, d.lastK = false, false, -1
	d.nRecent = 0 // packets read again after a seek are not repeats
}

// maxCount is the most frames a count is believed: a day at 10,000 fps.
// Larger counts come from corrupt headers.
const maxCount = 1 << 30

// estimateCount sets n from the container, trusting the video stream's
// own frame count or duration over the whole file's duration.
func (d *decoder) estimateCount() {
	d.estimate()
	if d.n <= 0 || d.n > maxCount {
		d.n, d.nKind = 0, countUnknown
	}
}

func (d *decoder) estimate() {
	if n := d.st.NbFrames(); n > 0 {
		d.n, d.nKind = n, countContainer
		return
	}
	if d.rate == 0 {
		return
	}
	if dur := d.st.Duration(); dur > 0 && dur != astiav.NoPtsValue && d.tb > 0 {
		d.n, d.nKind = int64(math.Round(float64(dur)*d.tb*d.rate)), countStream
		return
	}
	// Matroska keeps each stream's duration in a tag.
	if md := d.st.Metadata(); md != nil {
		if e := md.Get("DURATION", nil, 0); e != nil {
			if s, ok := parseClock(e.Value()); ok && s > 0 {
				d.n, d.nKind = int64(math.Round(s*d.rate)), countStream
				return
			}
		}
	}
	if dur := d.in.FC.Duration(); dur > 0 {
		d.n, d.nKind = int64(math.Round(float64(dur)/float64(astiav.TimeBase)*d.rate)), countFormat
	}
}

// parseClock parses "HH:MM:SS.fraction".
func parseClock(s string) (float64, bool) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 3 {
		return 0, false
	}
	var total float64
	for _, p := range parts {
		x, err := strconv.ParseFloat(p, 64)
		if err != nil || x < 0 {
			return 0, false
		}
		total = total*60 + x
	}
	return total, true
}

// countFrames counts the stream's frames by reading its packets without
// decoding them, then goes back to the start. The count is the highest
// frame index a packet's timestamp maps to, plus one (the number of
// packets where timestamps are missing).
func (d *decoder) countFrames(ctx context.Context) error {
	pkt := astiav.AllocPacket()
	if pkt == nil {
		return av.Errorf(d.src, "decode video", "out of memory")
	}
	defer pkt.Free()
	d.consumed = true
	var packets, maxK int64 = 0, -1
	for i := 0; ; i++ {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		err := d.in.FC.ReadFrame(pkt)
		if errors.Is(err, astiav.ErrEof) || errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return av.Errorf(d.src, "decode video", "reading packets to count frames: %w", err)
		}
		if pkt.StreamIndex() == d.st.Index() {
			packets++
			if pts := pkt.Pts(); pts != astiav.NoPtsValue && d.tb > 0 && d.rate > 0 {
				maxK = max(maxK, d.index(pts))
			}
		}
		pkt.Unref()
	}
	d.n, d.nKind = packets, countContainer
	if maxK >= 0 {
		d.n = maxK + 1
	}
	if d.n > maxCount {
		return av.Errorf(d.src, "decode video", "the video's timestamps say it has %d frames: corrupt", d.n)
	}
	return d.reopen()
}

// index maps a timestamp to a frame index.
func (d *decoder) index(ts int64) int64 {
	k := math.Round(float64(ts-d.s0) * d.tb * d.rate)
	return int64(max(min(k, 1<<62), -1<<62))
}

// seekTo positions the decoder at the keyframe before frame k. A seek can
// land past k: demuxers such as MP4's pick the last keyframe whose decoding
// time is before the target, which with B-frames can be shown after it, and
// an open-GOP keyframe's leading frames cannot be decoded after a seek. Each
// retry (attempt 1 to 6, after landing `overshoot` frames past k) aims
// earlier by that overshoot plus 4, 8, ... 128 frames; then it goes back to
// the start.
func (d *decoder) seekTo(k int64, attempt int) error {
	d.attempt, d.lastJump = attempt, k
	t := -1.0 // seconds from the stream start to seek to; <= 0: go to the start
	if !d.noSeek && !d.onlyFromStart && d.rate > 0 && d.tb > 0 && attempt <= 6 {
		t = float64(k) / d.rate
		if attempt > 0 {
			t -= float64(d.overshoot+int64(2)<<attempt) / d.rate
		}
	}
	if t <= 0 {
		if d.fromStart && !d.consumed {
			return nil
		}
		return d.reopen()
	}
	ts := d.s0 + int64(math.Floor(min(t/d.tb, 1<<62)))
	if err := d.in.FC.SeekFrame(d.st.Index(), ts, astiav.NewSeekFlags(astiav.SeekFlagBackward)); err != nil {
		return d.reopen()
	}
	if err := d.dec.Flush(); err != nil {
		return err
	}
	d.fromStart, d.afterSeek, d.needKey = false, true, true
	d.forget()
	return nil
}

// next decodes the next frame at or after the decoder's position and
// returns it (owned by the decoder, valid until the next call) with its
// index. want is the first frame the caller needs: landing past it after a
// seek seeks again, further back. At the end it returns io.EOF.
func (d *decoder) next(ctx context.Context, want int64) (*astiav.Frame, int64, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		d.consumed = true
		f, err := d.dec.Next()
		if errors.Is(err, io.EOF) && d.afterSeek {
			// The seek landed at or past the end: try further back.
			d.overshoot = 1
			if err := d.seekTo(want, d.attempt+1); err != nil {
				return nil, 0, err
			}
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		d.seq++
		if d.broken {
			return nil, 0, errReplan
		}
		if d.needKey {
			if !f.KeyFrame() {
				// A leading frame of an open GOP, shown before the
				// keyframe the seek landed on: it may reference frames
				// before the seek point, which were not decoded.
				continue
			}
			d.needKey = false
		}
		ts := int64(C.spdl_video_frame_ts((*C.AVFrame)(f.UnsafePointer())))
		var k int64
		if ts == astiav.NoPtsValue || d.rate == 0 || d.tb == 0 || d.noSeek {
			if d.skipped > 0 {
				return nil, 0, errReplan
			}
			if !d.fromStart {
				// Without timestamps a frame after a seek has no known
				// index: count from the start instead.
				d.noSeek = true
				if err := d.reopen(); err != nil {
					return nil, 0, err
				}
				continue
			}
			d.noSeek = d.noSeek || ts == astiav.NoPtsValue
			k = d.lastK + 1
		} else {
			k = d.index(ts)
			if d.kValid && k <= d.lastK {
				if d.skipped > 0 {
					// Indices here depend on every frame before, and
					// some were skipped: decode again without skipping.
					return nil, 0, errReplan
				}
				k = d.lastK + 1
			}
		}
		if d.afterSeek {
			d.afterSeek = false
			if k > want {
				d.overshoot = k - want
				if err := d.seekTo(want, d.attempt+1); err != nil {
					return nil, 0, err
				}
				continue
			}
		}
		if k < 0 {
			continue // shown before the stream starts
		}
		d.lastK, d.kValid = k, true
		return f, k, nil
	}
}

// keep makes f (the frame next returned) the previous frame.
func (d *decoder) keep(f *astiav.Frame) {
	d.prev.Unref()
	d.prev.MoveRef(f)
	d.prevSeq, d.havePrev = d.seq, true
}

// span is the selected frames [first, end); end < 0 means to the end.
func (d *decoder) span() (first, end int64, err error) {
	o := d.o
	end = -1
	if o.Start == 0 && o.Duration == 0 {
		return 0, -1, nil
	}
	if d.rate == 0 {
		return 0, 0, av.Errorf(d.src, "decode video", "the video stream has no frame rate, so start and duration cannot be mapped to frames")
	}
	const eps = 1e-6
	first = int64(math.Ceil(o.Start*d.rate - eps))
	if o.Duration > 0 {
		end = int64(math.Ceil((o.Start+o.Duration)*d.rate - eps))
	}
	return first, end, nil
}

func (d *decoder) run(ctx context.Context) (*tensor.Tensor, error) {
	o := d.o
	if o.Indices != nil {
		return d.decodePlanned(ctx, o.Indices, true)
	}
	first, end, err := d.span()
	if err != nil {
		return nil, err
	}
	if o.FPS == 0 && o.NumFrames == 0 {
		return d.decodeAll(ctx, first, end)
	}
	if o.FPS > 0 && d.rate == 0 {
		return nil, av.Errorf(d.src, "decode video", "the video stream has no frame rate, so it cannot be sampled at %g fps; use num_frames or indices", o.FPS)
	}
	// Sampling needs the frame count.
	if d.nKind < countStream {
		if err := d.countFrames(ctx); err != nil {
			return nil, err
		}
	}
	if end < 0 || end > d.n {
		end = d.n
	}
	if end <= first {
		return nil, av.Errorf(d.src, "decode video", "no frames between %gs and %s: the video has %d frames%s",
			o.Start, spanEnd(o), d.n, d.length(d.n))
	}
	var ks []int64
	if o.NumFrames > 0 {
		ks = uniform(first, end, o.NumFrames)
	} else {
		for j := int64(0); ; j++ {
			t := o.Start + float64(j)/o.FPS
			if o.Duration > 0 && t >= o.Start+o.Duration-1e-9 {
				break
			}
			k := max(first, int64(math.Floor(t*d.rate+1e-6)))
			if k >= end {
				break
			}
			if len(ks) == o.maxFrames() {
				return nil, av.Errorf(d.src, "decode video", "fps %g gives more than max_frames (%d) frames; raise max_frames or give a duration", o.FPS, o.maxFrames())
			}
			ks = append(ks, k)
		}
	}
	return d.decodePlanned(ctx, ks, false)
}

// length describes n frames in seconds, if the frame rate is known.
func (d *decoder) length(n int64) string {
	if d.rate == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.4gs at %.4g fps)", float64(n)/d.rate, d.rate)
}

func spanEnd(o *Options) string {
	if o.Duration > 0 {
		return fmt.Sprintf("%gs", o.Start+o.Duration)
	}
	return "the end"
}

// uniform returns n frame indices evenly spaced over [first, end):
// first + round(i*(m-1)/(n-1)) with m = end-first, halves rounding up.
func uniform(first, end int64, n int) []int64 {
	ks := make([]int64, n)
	m := end - first
	if n == 1 {
		ks[0] = first
		return ks
	}
	den := int64(n - 1)
	for i := range ks {
		ks[i] = first + (2*int64(i)*(m-1)+den)/(2*den)
	}
	return ks
}

// slack is how many frames short of the container's count a video may end
// before that counts as truncation (edit lists and decoders drop a few).
func slack(n int64) int64 { return max(2, n/50) }

// decodeSlots decodes the frames ks (one per output slot, in any order)
// forward in one pass. strict makes an index past the end an error;
// otherwise (sampling from an estimated count) the last frame fills in
// when the video ends within slack of its expected length.
func (d *decoder) decodeSlots(ctx context.Context, ks []int64, strict bool) (*tensor.Tensor, error) {
	var out *tensor.Tensor
	done := false
	defer func() {
		if !done {
			out.Release()
		}
	}()
	order := make([]int, len(ks))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(min(max(ks[a]-ks[b], -1), 1)) })
	if err := d.seekTo(ks[order[0]], 0); err != nil {
		return nil, err
	}
	lastSeq, lastSlot := int64(-1), -1
	place := func(f *astiav.Frame, seq int64, slot int) error {
		if out == nil {
			if err := d.geometry(f); err != nil {
				return err
			}
			if err := d.checkOutput(int64(len(ks))); err != nil {
				return err
			}
			var err error
			if out, err = tensor.New(tensor.UInt8, int64(len(ks)), int64(d.oh), int64(d.ow), int64(d.channels)); err != nil {
				return av.Errorf(d.src, "decode video", "%w", err)
			}
		}
		size := d.oh * d.ow * d.channels
		dst := unsafe.Add(out.Data(), slot*size)
		if seq == lastSeq {
			copy(unsafe.Slice((*byte)(dst), size), unsafe.Slice((*byte)(unsafe.Add(out.Data(), lastSlot*size)), size))
		} else if err := d.convert(f, dst, out.NBytes()-(slot+1)*size); err != nil {
			return err
		}
		lastSeq, lastSlot = seq, slot
		return nil
	}
	pos := 0
	for pos < len(order) {
		if d.pastKeyframe(ks[order[pos]]) {
			// The next frame needed is past a keyframe not yet sent to
			// the codec: jump to it rather than decode what lies between.
			if err := d.seekTo(ks[order[pos]], 0); err != nil {
				return nil, err
			}
		}
		f, k, err := d.next(ctx, ks[order[pos]])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		for ; pos < len(order) && ks[order[pos]] <= k; pos++ {
			// Frames no timestamp maps to show the frame before.
			src, seq := f, d.seq
			if ks[order[pos]] < k && d.havePrev {
				src, seq = d.prev, d.prevSeq
			}
			if err := place(src, seq, order[pos]); err != nil {
				return nil, err
			}
		}
		d.keep(f)
	}
	if pos == len(order) {
		done = true
		return out, nil
	}
	if d.broken {
		return nil, errReplan
	}
	if !d.fromStart && !d.onlyFromStart {
		// After a seek into an open GOP, H.264 decoders can lose the
		// last frames of the stream: see whether a decode from the
		// start finds the frame.
		d.onlyFromStart = true
		return nil, errReplan
	}
	// The video ended before frame ks[order[pos]].
	if !d.havePrev {
		return nil, av.Errorf(d.src, "decode video", "no frame could be decoded (frame %d wanted): the video stream is empty or corrupt", ks[order[pos]])
	}
	got := d.lastK + 1
	hint := ""
	if d.nKind >= countStream && d.n > got {
		hint = fmt.Sprintf(" (its container says %d: truncated or corrupt?)", d.n)
	}
	if strict {
		return nil, av.Errorf(d.src, "decode video", "frame index %d is past the end: the video has %d frames%s", ks[order[pos]], got, hint)
	}
	if got < d.n-slack(d.n) {
		return nil, av.Errorf(d.src, "decode video", "the video ended after %d frames but its container says %d: the file is truncated or corrupt", got, d.n)
	}
	for ; pos < len(order); pos++ {
		if err := place(d.prev, d.prevSeq, order[pos]); err != nil {
			return nil, err
		}
	}
	done = true
	return out, nil
}

// decodeAll decodes every frame of [first, end) (end < 0: to the end).
// Frames go into chunks sized by the expected count (one chunk, returned
// as is, when the count is right), then are stacked.
func (d *decoder) decodeAll(ctx context.Context, first, end int64) (*tensor.Tensor, error) {
	var chunks []*tensor.Tensor
	defer func() {
		for _, c := range chunks {
			c.Release()
		}
	}()
	// The first chunk holds the expected count if the container is to be
	// trusted, else at most 64 frames; each next chunk doubles.
	maxFrames := int64(d.o.maxFrames())
	var want int64
	switch {
	case d.nKind >= countStream && d.n > first:
		want = d.n - first
		if end >= 0 {
			want = min(want, end-first)
		}
	case end >= 0:
		want = min(end-first, 64)
	default:
		want = 64
	}
	want = min(max(want, 1), maxFrames)
	if err := d.seekTo(first, 0); err != nil {
		return nil, err
	}
	var count, room int64
	decoded := false
	for {
		f, k, err := d.next(ctx, first)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		decoded = true
		if k < first {
			continue
		}
		if end >= 0 && k >= end {
			break
		}
		if count == maxFrames {
			return nil, av.Errorf(d.src, "decode video", "more than max_frames (%d) frames; raise max_frames, or select frames with num_frames, fps, indices or duration", maxFrames)
		}
		if room == 0 {
			if len(chunks) == 0 {
				if err := d.geometry(f); err != nil {
					return nil, err
				}
				// A count the stream declares is believed (a video that
				// ends well short of it is an error anyway).
				if d.nKind >= countStream {
					if err := d.checkOutput(want); err != nil {
						return nil, err
					}
				}
			} else {
				want = min(2*want, maxFrames-count)
			}
			// No chunk goes past max_output_bytes.
			fit := d.o.maxOutputBytes()/d.frameBytes() - count
			if fit <= 0 {
				return nil, d.checkOutput(count + 1)
			}
			want = min(want, fit)
			c, err := tensor.New(tensor.UInt8, want, int64(d.oh), int64(d.ow), int64(d.channels))
			if err != nil {
				return nil, av.Errorf(d.src, "decode video", "%w", err)
			}
			chunks = append(chunks, c)
			room = want
		}
		c := chunks[len(chunks)-1]
		size := d.oh * d.ow * d.channels
		i := c.Shape()[0] - room
		if err := d.convert(f, unsafe.Add(c.Data(), int(i)*size), c.NBytes()-int(i+1)*size); err != nil {
			return nil, err
		}
		room--
		count++
	}
	if count == 0 {
		if !decoded {
			return nil, av.Errorf(d.src, "decode video", "no frame could be decoded: the video stream is empty or corrupt")
		}
		return nil, av.Errorf(d.src, "decode video", "no frames between %gs and %s: the video has %d frames%s", d.o.Start, spanEnd(d.o), d.lastK+1, d.length(d.lastK+1))
	}
	if end < 0 && d.nKind >= countStream && count < d.n-first-slack(d.n) {
		return nil, av.Errorf(d.src, "decode video", "the video ended after %d frames but its container says %d: the file is truncated or corrupt", first+count, d.n)
	}
	if len(chunks) == 1 && room == 0 {
		out := chunks[0]
		chunks = nil
		return out, nil
	}
	out, err := tensor.New(tensor.UInt8, count, int64(d.oh), int64(d.ow), int64(d.channels))
	if err != nil {
		return nil, av.Errorf(d.src, "decode video", "%w", err)
	}
	dst := unsafe.Slice((*byte)(out.Data()), out.NBytes())
	off := 0
	for _, c := range chunks {
		n := min(c.NBytes(), len(dst)-off)
		off += copy(dst[off:], unsafe.Slice((*byte)(c.Data()), n))
	}
	return out, nil
}

// frameBytes is the size of one output frame.
func (d *decoder) frameBytes() int64 { return int64(d.oh) * int64(d.ow) * int64(d.channels) }

// checkOutput refuses an output of n frames over max_output_bytes.
func (d *decoder) checkOutput(n int64) error {
	if b := n * d.frameBytes(); b > d.o.maxOutputBytes() {
		return av.Errorf(d.src, "decode video", "video output too large: %d frames of %dx%dx%d = %d bytes is over max_output_bytes (%d); select fewer frames (num_frames, fps, indices, duration), resize (size, short_side), or raise max_output_bytes",
			n, d.ow, d.oh, d.channels, b, d.o.maxOutputBytes())
	}
	return nil
}

// geometry fixes the output size from the first frame placed.
func (d *decoder) geometry(f *astiav.Frame) error {
	w, h := f.Width(), f.Height()
	if err := d.checkFrame(f); err != nil {
		return err
	}
	o := d.o
	if o.ApplySAR {
		sar := f.SampleAspectRatio()
		if sar.Num() <= 0 || sar.Den() <= 0 {
			sar = av.SampleAspectRatio(d.st)
		}
		if sar.Num() > 0 && sar.Den() > 0 && sar.Num() != sar.Den() {
			sw := math.Round(float64(w) * float64(sar.Num()) / float64(sar.Den()))
			if sw > float64(o.maxPixels()) {
				return av.Errorf(d.src, "decode video", "a sample aspect ratio of %d:%d makes %dx%d frames %.0f wide: corrupt", sar.Num(), sar.Den(), w, h, sw)
			}
			w = max(1, int(sw))
		}
	}
	if d.rot == 90 || d.rot == 270 {
		w, h = h, w
	}
	switch {
	case o.Height > 0:
		d.oh, d.ow = o.Height, o.Width
	case o.ShortSide > 0 && w <= h:
		d.ow, d.oh = o.ShortSide, max(1, int(math.Round(float64(h)*float64(o.ShortSide)/float64(w))))
	case o.ShortSide > 0:
		d.oh, d.ow = o.ShortSide, max(1, int(math.Round(float64(w)*float64(o.ShortSide)/float64(h))))
	default:
		d.oh, d.ow = h, w
	}
	if px := int64(d.oh) * int64(d.ow); px > o.maxPixels() {
		return av.Errorf(d.src, "decode video", "resized frames would be %dx%d, more than max_pixels (%d) allows", d.ow, d.oh, o.maxPixels())
	}
	d.sw, d.sh = d.ow, d.oh
	if d.rot == 90 || d.rot == 270 {
		d.sw, d.sh = d.oh, d.ow
	}
	return nil
}

func (d *decoder) checkFrame(f *astiav.Frame) error {
	w, h := int64(f.Width()), int64(f.Height())
	if w <= 0 || h <= 0 {
		return av.Errorf(d.src, "decode video", "the decoder returned a %dx%d frame", w, h)
	}
	if w*h > d.o.maxPixels() {
		return av.Errorf(d.src, "decode video", "a frame is %dx%d, more than max_pixels (%d) allows", w, h, d.o.maxPixels())
	}
	return nil
}

// convert writes f, converted and resized, at dst (oh*ow*channels bytes),
// which has room more bytes after it that belong to the caller (other
// frames' slots, not yet or already written: they are left as they were).
func (d *decoder) convert(f *astiav.Frame, dst unsafe.Pointer, room int) error {
	if err := d.checkFrame(f); err != nil {
		return err
	}
	var rc C.int
	if d.rot == 0 {
		rc = C.spdl_video_convert(d.conv, (*C.AVFrame)(f.UnsafePointer()), (*C.uint8_t)(dst), C.int(d.ow), C.int(d.oh), C.int(d.channels), C.size_t(room))
	} else {
		// Scale into a buffer of its own (room 0: exactly its bytes),
		// then turn into dst.
		n := d.sw * d.sh * d.channels
		if len(d.turn) < n {
			d.turn = make([]byte, n)
		}
		buf := unsafe.Pointer(&d.turn[0])
		rc = C.spdl_video_convert(d.conv, (*C.AVFrame)(f.UnsafePointer()), (*C.uint8_t)(buf), C.int(d.sw), C.int(d.sh), C.int(d.channels), 0)
		if rc == 0 {
			C.spdl_video_rotate((*C.uint8_t)(buf), C.int(d.sw), C.int(d.sh), C.int(d.channels), C.int(d.rot), (*C.uint8_t)(dst))
		}
	}
	switch {
	case rc == 0:
		return nil
	case rc == C.SPDL_VIDEO_EFORMAT:
		return av.Errorf(d.src, "decode video", "libswscale cannot convert pixel format %q", f.PixelFormat().Name())
	default:
		return av.Errorf(d.src, "decode video", "converting a %dx%d %s frame: %w", f.Width(), f.Height(), f.PixelFormat().Name(), astiav.Error(rc))
	}
}

// convertOne converts f into dst (w*h*channels bytes, then room bytes
// that must be left alone) with a converter of its own; tests use it to
// check that conversion writes exactly its image.
func convertOne(f *astiav.Frame, o Options, w, h int, dst unsafe.Pointer, room int) error {
	channels, pixFmt, flags := o.format()
	d := &decoder{src: av.Source{Name: "frame"}, o: &o, channels: channels, ow: w, oh: h}
	if d.conv = C.spdl_video_new(pixFmt, flags); d.conv == nil {
		return errors.New("out of memory")
	}
	defer C.spdl_video_free(d.conv)
	return d.convert(f, dst, room)
}

// errReplan says that frames were skipped on a plan the stream's
// timestamps turned out not to support: decode again without skipping.
var errReplan = errors.New("video: timestamps do not allow skipping frames")

// lookahead is how many packets the decoder reads ahead, so that skippable
// can see the frames that follow one (B-frames come a few packets after
// the frame shown after them).
const lookahead = 16

// decodePlanned is decodeSlots, decoding only the frames the slots need:
// it skips non-reference frames no slot shows and jumps over keyframes to
// the next frame needed. If the timestamps contradict the plan (repeated,
// missing or backwards), it starts again and decodes every frame.
func (d *decoder) decodePlanned(ctx context.Context, ks []int64, strict bool) (*tensor.Tensor, error) {
	d.wanted = slices.Compact(slices.Sorted(slices.Values(ks)))
	d.plan = !d.o.straight && !d.noSeek && d.rate > 0 && d.tb > 0
	if d.plan {
		d.dec.Skip = d.skippable
	}
	// Each retry turns off something (skipping, seeking), so there are at
	// most two.
	for {
		t, err := d.decodeSlots(ctx, ks, strict)
		if !errors.Is(err, errReplan) {
			return t, err
		}
		d.plan, d.broken, d.skipped = false, false, 0
		if err := d.reopen(); err != nil {
			return nil, err
		}
	}
}

// skippable is the decoder's Skip hook: a packet's frame may be dropped
// (if the codec finds nothing references it) when no slot shows it. Slot
// k shows the frame with the largest index <= k, so frame i is not needed
// when no slot falls in [i, next), next being the index of the frame
// shown after it, found among the packets around it; when it cannot be
// found, or two packets share an index, the frame is kept.
func (d *decoder) skippable(pkt *astiav.Packet, ahead []*astiav.Packet) bool {
	pts := pkt.Pts()
	if pts == astiav.NoPtsValue {
		d.noteBroken()
		return false
	}
	if pkt.Flags().Has(astiav.PacketFlagKey) && pkt.Dts() != astiav.NoPtsValue {
		d.keyLag = max(d.keyLag, pts-pkt.Dts())
	}
	k := d.index(pts)
	next := int64(math.MaxInt64)
	dup := false
	look := func(j int64) {
		if j == k {
			dup = true
		} else if j > k && j < next {
			next = j
		}
	}
	for i := range min(d.nRecent, len(d.recent)) {
		look(d.recent[i])
	}
	for _, a := range ahead {
		if p := a.Pts(); p != astiav.NoPtsValue {
			look(d.index(p))
		}
	}
	d.recent[d.nRecent%len(d.recent)] = k
	d.nRecent++
	if dup {
		d.noteBroken()
		return false
	}
	if next == math.MaxInt64 {
		return false
	}
	i, _ := slices.BinarySearch(d.wanted, k)
	if i < len(d.wanted) && d.wanted[i] < next {
		return false
	}
	d.skipped++
	return true
}

// noteBroken stops skipping; if frames were skipped already, the frame
// indices computed since may be wrong, and decoding starts over.
func (d *decoder) noteBroken() {
	if d.skipped > 0 {
		d.broken = true
	}
	d.plan = false
	if d.dec != nil {
		d.dec.Skip = nil
	}
}

// pastKeyframe reports whether a keyframe that the codec has not been sent
// yet comes at or before frame want, by the container's index (its
// timestamps are decoding times in MP4, so the largest lag seen between a
// keyframe's decoding and presentation time is added).
func (d *decoder) pastKeyframe(want int64) bool {
	if !d.plan || !d.kValid || len(d.keys) == 0 || want <= d.lastK+1 || want == d.lastJump {
		return false
	}
	fed := d.dec.FedDTS()
	if fed == astiav.NoPtsValue {
		return false
	}
	i, found := slices.BinarySearch(d.keys, fed)
	if found {
		i++
	}
	if i == len(d.keys) || d.index(d.keys[i]+d.keyLag) > want {
		return false
	}
	return true
}
