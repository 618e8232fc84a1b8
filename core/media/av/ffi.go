package av

/*
#cgo pkg-config: libavformat libavcodec libavutil
#include <libavformat/avformat.h>
#include <libavcodec/avcodec.h>

static void spdl_av_set_skip_frame(AVCodecContext *c, int d) { c->skip_frame = d; }
static int spdl_av_thread_count(const AVCodecContext *c) { return c->thread_count; }
static int spdl_av_disposition(const AVStream *s) { return s->disposition; }
static int spdl_av_stream_index(const AVStream *s) { return s->index; }
static int spdl_av_video_delay(const AVStream *s) { return s->codecpar->video_delay; }

// Fills ts with the timestamps of up to n keyframe index entries; returns how many.
static int spdl_av_keyframes(AVStream *s, int64_t *ts, int n) {
	int c = avformat_index_get_entries_count(s), k = 0;
	for (int i = 0; i < c && k < n; i++) {
		const AVIndexEntry *e = avformat_index_get_entry(s, i);
		if (e && (e->flags & AVINDEX_KEYFRAME) && !(e->flags & AVINDEX_DISCARD_FRAME))
			ts[k++] = e->timestamp;
	}
	return k;
}
*/
import "C"

import (
	"unsafe"

	"github.com/asticode/go-astiav"
)

// go-astiav v0.16.0 has no accessor for a few fields we need (the codec
// context's skip_frame, avcodec_flush_buffers, a stream's disposition and
// index entries). Its CodecContext and Stream hold the C pointer as their
// first field; these read it. TestFFIPointers checks the layout, so that an
// upgrade that changes it fails the tests rather than memory.

func codecContextC(cc *astiav.CodecContext) *C.AVCodecContext {
	return *(**C.AVCodecContext)(unsafe.Pointer(cc))
}

func streamC(s *astiav.Stream) *C.AVStream {
	return *(**C.AVStream)(unsafe.Pointer(s))
}

func packetC(p *astiav.Packet) *C.AVPacket {
	return *(**C.AVPacket)(unsafe.Pointer(p))
}

// payload is p's data as a slice over its C memory (go-astiav's Data
// copies it), valid until p is unreferenced.
func payload(p *astiav.Packet) []byte {
	c := packetC(p)
	if c.data == nil || c.size <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(c.data)), int(c.size))
}

// Discard levels for SetSkipFrame (FFmpeg's enum AVDiscard).
const (
	DiscardDefault = int(C.AVDISCARD_DEFAULT)
	DiscardNonRef  = int(C.AVDISCARD_NONREF)
)

func setSkipFrame(cc *astiav.CodecContext, level int) {
	C.spdl_av_set_skip_frame(codecContextC(cc), C.int(level))
}

func flushBuffers(cc *astiav.CodecContext) { C.avcodec_flush_buffers(codecContextC(cc)) }

// AttachedPicture reports whether s is a picture attached to the file
// (cover art in an MP3 or M4A), not a video.
func AttachedPicture(s *astiav.Stream) bool {
	return C.spdl_av_disposition(streamC(s))&C.AV_DISPOSITION_ATTACHED_PIC != 0
}

// videoDelay is the number of frames s's decoder holds back to reorder, as
// the demuxer (or avformat_find_stream_info) found it.
func videoDelay(s *astiav.Stream) int { return int(C.spdl_av_video_delay(streamC(s))) }

// maxKeyframes bounds what KeyframeTimestamps reads: 2^16 keyframes is
// 36 hours at one a second.
const maxKeyframes = 1 << 16

// KeyframeTimestamps returns the timestamps (in s's time base, decoding
// time for MP4, presentation time for Matroska) of the keyframes the
// container's index lists, in index order; nil when it has no index.
func KeyframeTimestamps(s *astiav.Stream) []int64 {
	sc := streamC(s)
	n := int(C.avformat_index_get_entries_count(sc))
	if n <= 0 {
		return nil
	}
	ts := make([]int64, min(n, maxKeyframes))
	k := int(C.spdl_av_keyframes(sc, (*C.int64_t)(unsafe.Pointer(&ts[0])), C.int(len(ts))))
	return ts[:k]
}

// For TestFFIPointers (cgo is not allowed in test files).
func streamIndexC(s *astiav.Stream) C.int        { return C.spdl_av_stream_index(streamC(s)) }
func threadCountC(cc *astiav.CodecContext) C.int { return C.spdl_av_thread_count(codecContextC(cc)) }
