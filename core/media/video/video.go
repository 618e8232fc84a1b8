// Package video decodes video (H.264, HEVC, VP8/VP9, AV1, MPEG-4 part 2:
// whatever the linked FFmpeg decodes) into uint8 tensors of shape
// (frames, height, width, channels), and registers the decode_video op.
//
// It decodes forward and keeps only the frames it was asked for: each
// selected frame is converted by libswscale from the decoder's pixel
// format (and colour matrix and range), resized if asked, straight into its
// slot of the output tensor, so memory stays bounded by the output however
// long the video is. It seeks to the keyframe before the first frame it
// needs, and stops reading after the last.
//
// # Decoding only what the samples need
//
// When frames are selected (indices, fps, num_frames), it decodes only
// what they need, and returns exactly the frames a straight decode would:
//
//   - A packet whose frame no slot shows (slot k shows the frame with the
//     largest index <= k; the frame shown next is found among the 32
//     packets before and 16 after it) is sent with skip_frame at
//     AVDISCARD_NONREF, so the codec drops it if no frame references it
//     (H.264/HEVC non-reference pictures, MPEG-4 B-frames, VP8 frames
//     that update no reference).
//   - When the container's index has a keyframe not yet sent to the codec
//     at or before the next frame needed, it seeks there instead of
//     decoding what lies between. After any seek, frames out before the
//     first keyframe (an open GOP's leading frames, which reference frames
//     before the seek point) are dropped.
//   - Timestamps that contradict the plan (a repeated, missing or
//     backwards one, once frames were skipped) start the decode again
//     without skipping; a stream that ends before a frame needed after a
//     seek (H.264 open GOPs can lose their last frames then) is decoded
//     again from the start.
//
// For 8 frames from each of the 2-4 s clips of benchmarks/bench_video.py
// (GOP 30, B-frames) it decodes 58% of the frames (every frame before);
// from 60 s clips with a keyframe every 2 s, 7-8%. The decode_video op
// counts decoded and total frames in its stats (op_stats: decoded_frames,
// video_frames). Decoder threads (Threads) are left to the caller: with
// a core idle, 2 threads decode one short clip 1.26x faster, but a
// pipeline decoding one clip per core gains nothing from them.
//
// # Rotation, pixel shape and cover art
//
// ApplyRotation turns frames by the stream's display matrix and ApplySAR
// stretches them by the sample aspect ratio (both off by default, as in
// SPDL and torchvision); av.Probe reports both. A picture attached to an
// audio file (an MP3's cover art, a one-frame "video" stream to FFmpeg)
// is never taken for the video: such a file fails with an error saying so.
//
// # Frame indices
//
// Frame k is the frame shown at time k/r from the start of the stream,
// where r is the stream's average frame rate (its nominal rate when the
// container gives no average). A decoded frame with best-effort timestamp
// ts gets index round((ts - stream start) * time_base * r), raised to one
// more than the previous frame's if it would not increase (a broken or
// jittery timestamp never merges two frames). For constant-frame-rate
// video this is exactly the k-th frame in presentation order, which is what
// the tests check for every codec. For variable-frame-rate video it resamples
// to the average rate: an index no frame rounds to gets the frame on screen
// at that time (the one before). Streams without timestamps are counted
// frame by frame, and then never seeked.
//
// The frame count n (needed for num_frames, for fps without duration, and
// to size the output of "all frames") comes from the container's frame
// count, else the video stream's duration times r, else from counting the
// stream's packets without decoding them (a demuxing pass, then a reopen).
// A video that ends well short of its container's count is an error
// (truncated); within 2% (at least 2 frames), sampled slots past the end
// repeat the last frame.
//
// # Costs
//
// On a 2-core AMD EPYC VM, one decoder thread (BenchmarkDecodeVideo, a
// 10 s 320x240 30 fps H.264 clip from memory): opening it and decoding
// frame 0 takes about 3.5 ms; 8 evenly spaced frames resized to 112x112
// took as long as decoding all 300 frames (55 ms on a quiet machine),
// nearly all of it in the H.264 decoder; skipping non-reference frames
// and jumping over keyframes brings that to 27 ms. Conversion writes
// straight into the tensor, except for the tensor's last frame, which
// goes through a scratch buffer (convert.h).
package video

/*
#cgo pkg-config: libswscale libavutil libavcodec
#cgo CFLAGS: -O2 -std=gnu11 -fvisibility=hidden
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>
*/
import "C"

import (
	"fmt"
	"math"
	"slices"
)

// Mode is the output's pixel layout.
type Mode string

const (
	RGB  Mode = "rgb"  // 3 channels, R G B (the zero value means RGB too)
	BGR  Mode = "bgr"  // 3 channels, B G R (OpenCV order)
	Gray Mode = "gray" // 1 channel, the luma of RGB (BT.601 weights), full range
)

// Default limits.
const (
	DefaultMaxFrames = 4096
	DefaultMaxPixels = 50_000_000
	// DefaultMaxOutputBytes is 2 GiB: 340 RGB frames of 1920x1080, or
	// 4096 of 416x416.
	DefaultMaxOutputBytes = 2 << 30
)

const (
	maxSeconds = 1e9     // start and duration: 30 years
	maxIndex   = 1 << 40 // frame indices
)

// Options say which frames to decode and in what shape. The zero value
// decodes every frame at its own size as RGB, with FFmpeg's choice of
// decoder threads.
//
// At most one of Indices, FPS and NumFrames selects frames; with none,
// every frame of the span is decoded.
type Options struct {
	// Indices are the frames to return, in this order; they may repeat
	// and need not be sorted. They count from the start of the stream
	// (see the package doc) and cannot be combined with Start or
	// Duration. An index past the end is an error.
	Indices []int64
	// FPS samples the span at this rate: the frames on screen at times
	// Start, Start+1/FPS, ..., before the span's end. Above the video's
	// rate, frames repeat.
	FPS float64
	// NumFrames returns this many frames evenly spaced over the span's n
	// frames: span frame round(i*(n-1)/(N-1)) for i = 0..N-1 (halves round
	// up), the first frame when N is 1. When n < N, frames repeat.
	NumFrames int
	// Start (seconds) skips the frames shown before it: the op seeks to the
	// keyframe before Start, then decodes and drops frames up to it.
	Start float64
	// Duration (seconds) ends the span at Start+Duration (exclusive); 0
	// decodes to the end of the video.
	Duration float64

	// Mode is the pixel layout; "" is RGB.
	Mode Mode
	// Height and Width resize every frame to exactly this size; 0 keeps
	// the video's. Give both or neither.
	Height, Width int
	// ShortSide resizes so that the shorter side has this many pixels,
	// keeping the aspect ratio (the other side rounds to the nearest
	// pixel). It cannot be combined with Height and Width.
	ShortSide int
	// Interpolation for resizing: "bilinear" (the default, also for ""),
	// "area" (best for large reductions), "bicubic" or "nearest".
	Interpolation string

	// ApplyRotation turns frames as the stream's display matrix says (a
	// phone video's "rotate" tag: 90, 180 or 270 degrees clockwise), as
	// FFmpeg's CLI does by default (-autorotate); Height/Width and
	// ShortSide then apply to the turned frame. Off by default, like SPDL
	// and torchvision, which return frames as coded.
	ApplyRotation bool
	// ApplySAR stretches each frame's width by its sample aspect ratio
	// (non-square pixels, e.g. anamorphic DVD video), giving the display
	// shape: width round(w*num/den) when no size is asked. Off by default.
	ApplySAR bool

	// Threads for the decoder; 0 lets FFmpeg choose (one per core). The op
	// defaults to 1: a pipeline decodes many videos at once.
	Threads int
	// MaxFrames bounds the frames returned (every mode); 0 means
	// DefaultMaxFrames. Decoding all frames of a longer span is an error.
	MaxFrames int
	// MaxPixels bounds width*height of a decoded or resized frame, so that
	// a few bytes claiming a huge picture fail fast; 0 means
	// DefaultMaxPixels.
	MaxPixels int64
	// MaxOutputBytes bounds the output tensor, frames x height x width x
	// channels bytes; 0 means DefaultMaxOutputBytes. It is checked before
	// the output is allocated: for selected frames (indices, fps,
	// num_frames) once the first frame gives the output size; when
	// decoding every frame, against the stream's declared frame count
	// and again before each chunk of the output grows.
	MaxOutputBytes int64

	// straight turns off decoding only what the selected frames need
	// (tests compare the two).
	straight bool
	// fullProbe runs avformat_find_stream_info even where the header
	// makes it unnecessary (tests compare the two).
	fullProbe bool
}

func (o *Options) maxOutputBytes() int64 {
	if o.MaxOutputBytes == 0 {
		return DefaultMaxOutputBytes
	}
	return o.MaxOutputBytes
}

func (o *Options) maxFrames() int {
	if o.MaxFrames == 0 {
		return DefaultMaxFrames
	}
	return o.MaxFrames
}

func (o *Options) maxPixels() int64 {
	if o.MaxPixels == 0 {
		return DefaultMaxPixels
	}
	return o.MaxPixels
}

// channels, pixel format and swscale flags for the options.
func (o *Options) format() (channels int, pixFmt C.int, flags C.int) {
	switch o.Mode {
	case BGR:
		channels, pixFmt = 3, C.AV_PIX_FMT_BGR24
	case Gray:
		channels, pixFmt = 1, C.AV_PIX_FMT_GRAY8
	default:
		channels, pixFmt = 3, C.AV_PIX_FMT_RGB24
	}
	switch o.Interpolation {
	case "area":
		flags = C.SWS_AREA
	case "bicubic":
		flags = C.SWS_BICUBIC
	case "nearest":
		flags = C.SWS_POINT
	default:
		flags = C.SWS_BILINEAR
	}
	return channels, pixFmt, flags
}

// Validate reports options that contradict each other or are out of range.
func (o *Options) Validate() error {
	selectors := 0
	if o.Indices != nil {
		selectors++
	}
	if o.FPS != 0 {
		selectors++
	}
	if o.NumFrames != 0 {
		selectors++
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case selectors > 1:
		return fmt.Errorf("give at most one of indices, fps and num_frames")
	case o.Indices != nil && len(o.Indices) == 0:
		return fmt.Errorf("indices is empty; give at least one frame index (or omit it to decode every frame)")
	case o.Indices != nil && (o.Start != 0 || o.Duration != 0):
		return fmt.Errorf("indices count from the start of the video and cannot be combined with start or duration")
	case !finite(o.FPS) || o.FPS < 0:
		return fmt.Errorf("fps must be > 0, not %v", o.FPS)
	case o.NumFrames < 0:
		return fmt.Errorf("num_frames must be >= 1, not %d", o.NumFrames)
	case !finite(o.Start) || o.Start < 0 || o.Start > maxSeconds:
		return fmt.Errorf("start must be a number of seconds from 0 to %g, not %v", maxSeconds, o.Start)
	case !finite(o.Duration) || o.Duration < 0 || o.Duration > maxSeconds:
		return fmt.Errorf("duration must be a number of seconds > 0 and at most %g, not %v", maxSeconds, o.Duration)
	case o.Mode != "" && o.Mode != RGB && o.Mode != BGR && o.Mode != Gray:
		return fmt.Errorf("mode must be \"rgb\", \"bgr\" or \"gray\", not %q", o.Mode)
	case o.Height < 0 || o.Width < 0 || (o.Height == 0) != (o.Width == 0):
		return fmt.Errorf("size must be [height, width] with both >= 1, not [%d, %d]", o.Height, o.Width)
	case o.ShortSide < 0:
		return fmt.Errorf("short_side must be >= 1, not %d", o.ShortSide)
	case o.ShortSide != 0 && o.Height != 0:
		return fmt.Errorf("give size or short_side, not both")
	case o.Interpolation != "" && !slices.Contains([]string{"bilinear", "area", "bicubic", "nearest"}, o.Interpolation):
		return fmt.Errorf("interpolation must be \"bilinear\", \"area\", \"bicubic\" or \"nearest\", not %q", o.Interpolation)
	case o.Threads < 0:
		return fmt.Errorf("threads must be >= 0 (0 lets FFmpeg choose), not %d", o.Threads)
	case o.MaxFrames < 0:
		return fmt.Errorf("max_frames must be >= 1, not %d", o.MaxFrames)
	case o.MaxPixels < 0:
		return fmt.Errorf("max_pixels must be >= 1, not %d", o.MaxPixels)
	case o.MaxOutputBytes < 0:
		return fmt.Errorf("max_output_bytes must be >= 1, not %d", o.MaxOutputBytes)
	}
	for _, k := range o.Indices {
		if k < 0 {
			return fmt.Errorf("frame index %d is negative; indices count from 0 at the start of the video", k)
		}
		if k >= maxIndex {
			return fmt.Errorf("frame index %d is too large", k)
		}
	}
	if n := len(o.Indices); n > o.maxFrames() {
		return fmt.Errorf("%d indices is more than max_frames (%d); raise max_frames", n, o.maxFrames())
	}
	if o.NumFrames > o.maxFrames() {
		return fmt.Errorf("num_frames %d is more than max_frames (%d); raise max_frames", o.NumFrames, o.maxFrames())
	}
	if px := int64(o.Height) * int64(o.Width); px > o.maxPixels() {
		return fmt.Errorf("size %dx%d is more than max_pixels (%d)", o.Height, o.Width, o.maxPixels())
	}
	return nil
}
