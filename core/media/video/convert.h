/* Video frame conversion for package video: libswscale converting a decoded
 * frame from its pixel format (and colour space and range) into packed
 * RGB24, BGR24 or GRAY8, resized, straight into a tensor's C memory.
 *
 * Ownership: spdl_video_new returns a converter that the caller frees with
 * spdl_video_free on every path. Frames and destination buffers are
 * borrowed for the duration of a call. Functions return 0 or a negative
 * AVERROR code. */
#ifndef SPDL_VIDEO_CONVERT_H
#define SPDL_VIDEO_CONVERT_H

#include <stdint.h>
#include <libavutil/frame.h>
#include <libavutil/error.h>

/* The frame's pixel format is one libswscale cannot read. */
#define SPDL_VIDEO_EFORMAT FFERRTAG('S', 'P', 'V', 'F')

typedef struct spdl_video spdl_video;

/* dst_fmt is an AVPixelFormat (RGB24, BGR24 or GRAY8); flags are SWS_*
 * interpolation flags. Returns NULL when out of memory. */
spdl_video *spdl_video_new(int dst_fmt, int flags);
void spdl_video_free(spdl_video *v);

/* libswscale's SIMD converters may write up to a vector past the end of
 * each row (45 bytes measured for yuv420p to rgb24 on x86-64). Rows are
 * written in order, so inside an image the next row overwrites that; past
 * the last row it would hit memory that is not the image's. */
#define SPDL_VIDEO_GUARD 1024

/* Converts f into dst: dst_h rows of dst_w pixels of `channels` bytes, with
 * no padding between rows. It changes exactly those bytes. room is how many
 * bytes after the image the caller owns: with at least SPDL_VIDEO_GUARD,
 * swscale writes straight into dst and the bytes past the image are
 * restored afterwards; with less, the image goes through a padded scratch
 * buffer and is copied. */
int spdl_video_convert(spdl_video *v, const AVFrame *f, uint8_t *dst, int dst_w, int dst_h, int channels, size_t room);

/* Turns the packed image src (w x h pixels of `channels` bytes, no row
 * padding) clockwise by degrees (90, 180 or 270) into dst, which holds
 * h x w pixels for 90 and 270 and w x h for 180. */
void spdl_video_rotate(const uint8_t *src, int w, int h, int channels, int degrees, uint8_t *dst);

/* The frame's best-effort presentation timestamp (AV_NOPTS_VALUE if none). */
int64_t spdl_video_frame_ts(const AVFrame *f);

#endif
