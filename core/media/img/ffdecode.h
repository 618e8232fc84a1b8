// Still-image decoding with libavcodec: the whole file is one packet, the
// first frame is the image. No libavformat demuxer runs (only its probe, to
// name the codec of an unrecognised file), and no Go callback is involved.
#ifndef SPDL_IMG_FFDECODE_H
#define SPDL_IMG_FFDECODE_H

#include <stdint.h>

#include <libavutil/frame.h>

// spdl_ff_quiet silences FFmpeg's log unless SPDL_GO_FFMPEG_LOG is set
// (the errors returned say what went wrong).
void spdl_ff_quiet(void);

// spdl_ff_probe returns the name of the libavformat demuxer that claims
// data (e.g. "png_pipe", "gif", "wav"), or NULL; *long_name gets its long
// name. Both strings are static.
const char *spdl_ff_probe(const uint8_t *data, int size, const char **long_name);

// spdl_ff_decode decodes the first image in data with the decoder named
// decoder. It sets the codec context's max_pixels, so the decoder refuses
// larger images before allocating them. On success it returns 0 and *out
// is a frame that the caller frees with av_frame_free; on failure it
// returns an AVERROR code and *out is NULL. Everything else is freed
// before it returns, on every path.
int spdl_ff_decode(const char *decoder, const uint8_t *data, int size, int64_t max_pixels,
                   AVFrame **out);

// spdl_ff_convert writes f's pixels as packed dfmt (SPDL_PK_RGB, _BGR,
// _GRAY or _RGBA from kernels.h) with ddepth-bit samples (8, or 16 in
// native order) into dst, rows dst_stride bytes apart. Packed RGB, gray,
// palette and 16-bit frames are converted exactly (spdl_px_convert's rules
// in pngconv.h: 16-bit samples rounded to 8 bits, 8-bit ones widened by
// 257, alpha kept for RGBA and made opaque where the frame has none);
// others (YUV, planar RGB, ...) go through libswscale (full range out; the
// frame's range and matrix in), at 8 bits then widened. dst must have room
// for f->height rows of dst_stride bytes, and dst_stride must be at least
// the row size rounded up to 64 (swscale may write whole vectors).
// Returns 0 or an AVERROR code.
int spdl_ff_convert(const AVFrame *f, uint8_t *dst, int dst_stride, int dfmt, int ddepth);

// spdl_ff_is_packed reports whether f's pixels are already 8-bit packed
// dfmt with top-down rows, so that they can be used without converting.
int spdl_ff_is_packed(const AVFrame *f, int dfmt);

// spdl_ff_is_gray reports whether f is a gray (or gray+alpha) frame that
// spdl_ff_convert converts exactly: its colour output is the gray value
// in every channel.
int spdl_ff_is_gray(const AVFrame *f);

#endif
