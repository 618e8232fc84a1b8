#include "ffdecode.h"

#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "kernels.h"
#include "pngconv.h"

static int sws_convert(const AVFrame *f, uint8_t *dst, int dst_stride, int dfmt);

void spdl_ff_quiet(void) {
  const char *v = getenv("SPDL_GO_FFMPEG_LOG");
  if (v == NULL || v[0] == '\0') av_log_set_level(AV_LOG_QUIET);
}

const char *spdl_ff_probe(const uint8_t *data, int size, const char **long_name) {
  *long_name = NULL;
  if (size > (1 << 20)) size = 1 << 20;  // what libavformat itself probes at most
  uint8_t *buf = calloc((size_t)size + AVPROBE_PADDING_SIZE, 1);
  if (buf == NULL) return NULL;
  memcpy(buf, data, (size_t)size);
  AVProbeData pd = {.filename = "", .buf = buf, .buf_size = size, .mime_type = NULL};
  int score = 0;
  const AVInputFormat *f = av_probe_input_format3(&pd, 1, &score);
  free(buf);
  if (f == NULL || score < AVPROBE_SCORE_EXTENSION / 2) return NULL;
  *long_name = f->long_name;
  return f->name;
}

int spdl_ff_decode(const char *decoder, const uint8_t *data, int size, int64_t max_pixels,
                   AVFrame **out) {
  *out = NULL;
  const AVCodec *codec = avcodec_find_decoder_by_name(decoder);
  if (codec == NULL || codec->type != AVMEDIA_TYPE_VIDEO) return AVERROR_DECODER_NOT_FOUND;
  AVCodecContext *cc = avcodec_alloc_context3(codec);
  AVPacket *pkt = av_packet_alloc();
  AVFrame *f = av_frame_alloc();
  int ret = AVERROR(ENOMEM);
  if (cc == NULL || pkt == NULL || f == NULL) goto done;
  cc->thread_count = 1;
  cc->max_pixels = max_pixels;
  if ((ret = avcodec_open2(cc, codec, NULL)) < 0) goto done;
  if ((ret = av_new_packet(pkt, size)) < 0) goto done;  // zeroed padding
  memcpy(pkt->data, data, (size_t)size);
  pkt->flags |= AV_PKT_FLAG_KEY;
  if ((ret = avcodec_send_packet(cc, pkt)) < 0) goto done;
  ret = avcodec_receive_frame(cc, f);
  if (ret == AVERROR(EAGAIN)) {
    if ((ret = avcodec_send_packet(cc, NULL)) < 0) goto done;
    ret = avcodec_receive_frame(cc, f);
  }
  if (ret == AVERROR_EOF) ret = AVERROR_INVALIDDATA;  // the decoder made no picture
  if (ret < 0) goto done;
  if (f->width <= 0 || f->height <= 0 || f->data[0] == NULL) {
    ret = AVERROR_INVALIDDATA;
    goto done;
  }
  *out = f;
  f = NULL;
done:
  av_frame_free(&f);
  av_packet_free(&pkt);
  avcodec_free_context(&cc);
  return ret;
}

// packed_layout maps the frame formats converted without swscale.
static int packed_layout(int fmt) {
  switch (fmt) {
    case AV_PIX_FMT_RGB24:
      return SPDL_PK_RGB;
    case AV_PIX_FMT_BGR24:
      return SPDL_PK_BGR;
    case AV_PIX_FMT_GRAY8:
      return SPDL_PK_GRAY;
    case AV_PIX_FMT_RGBA:
    case AV_PIX_FMT_RGB0:
      return SPDL_PK_RGBA;
    case AV_PIX_FMT_BGRA:
    case AV_PIX_FMT_BGR0:
      return SPDL_PK_BGRA;
    case AV_PIX_FMT_ARGB:
    case AV_PIX_FMT_0RGB:
      return SPDL_PK_ARGB;
    case AV_PIX_FMT_ABGR:
    case AV_PIX_FMT_0BGR:
      return SPDL_PK_ABGR;
    case AV_PIX_FMT_YA8:
      return SPDL_PK_GRAYA;
    case AV_PIX_FMT_PAL8:
      return SPDL_PK_PAL8;
  }
  return -1;
}

// unjpeg maps the deprecated full-range YUVJ formats to their YUV twins.
static int unjpeg(int fmt, int *full) {
  switch (fmt) {
    case AV_PIX_FMT_YUVJ420P:
      *full = 1;
      return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P:
      *full = 1;
      return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P:
      *full = 1;
      return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P:
      *full = 1;
      return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P:
      *full = 1;
      return AV_PIX_FMT_YUV411P;
  }
  return fmt;
}

// wide_layout maps 16-bit packed formats to the 8-bit layout they narrow
// to, with their sample count per pixel and byte order.
static int wide_layout(int fmt, int *samples, int *big) {
  *big = 0;
  switch (fmt) {
    case AV_PIX_FMT_RGB48BE:
      *big = 1;  // fall through
    case AV_PIX_FMT_RGB48LE:
      *samples = 3;
      return SPDL_PK_RGB;
    case AV_PIX_FMT_RGBA64BE:
      *big = 1;  // fall through
    case AV_PIX_FMT_RGBA64LE:
      *samples = 4;
      return SPDL_PK_RGBA;
    case AV_PIX_FMT_GRAY16BE:
      *big = 1;  // fall through
    case AV_PIX_FMT_GRAY16LE:
      *samples = 1;
      return SPDL_PK_GRAY;
    case AV_PIX_FMT_YA16BE:
      *big = 1;  // fall through
    case AV_PIX_FMT_YA16LE:
      *samples = 2;
      return SPDL_PK_GRAYA;
  }
  return -1;
}

// convert_wide narrows 16-bit samples to 8 bits (rounding v * 255 / 65535)
// row by row, then converts the row as its 8-bit layout.
static int convert_wide(const AVFrame *f, int layout, int samples, int big, uint8_t *dst,
                        int dst_stride, int dfmt) {
  int64_t n = (int64_t)f->width * samples;
  uint8_t *row = malloc((size_t)n);
  if (row == NULL) return AVERROR(ENOMEM);
  for (int y = 0; y < f->height; y++) {
    const uint8_t *s = f->data[0] + (int64_t)y * f->linesize[0];
    for (int64_t i = 0; i < n; i++) {
      uint32_t v = big ? (uint32_t)(s[2 * i] << 8 | s[2 * i + 1]) : (uint32_t)(s[2 * i + 1] << 8 | s[2 * i]);
      row[i] = (uint8_t)((v * 255 + 32767) / 65535);
    }
    spdl_convert_packed(row, n, layout, NULL, dst + (int64_t)y * dst_stride, dst_stride, dfmt, 1,
                        f->width);
  }
  free(row);
  return 0;
}

int spdl_ff_convert(const AVFrame *f, uint8_t *dst, int dst_stride, int dfmt, int ddepth) {
  int samples, big, wide = wide_layout(f->format, &samples, &big);
  int layout = wide >= 0 ? wide : packed_layout(f->format);
  if (dfmt == SPDL_PK_RGBA || ddepth == 16) {
    // Alpha or 16-bit out: the exact converter of pngconv.c.
    if (layout >= 0) {
      const uint32_t *pal = layout == SPDL_PK_PAL8 ? (const uint32_t *)f->data[1] : NULL;
      int wdepth = wide >= 0 ? 16 : 8;
      if (spdl_px_convert(f->data[0], f->linesize[0], layout, wdepth, big, pal, dst, dst_stride,
                          dfmt, ddepth, f->height, f->width) != 0)
        return AVERROR(EINVAL);
      return 0;
    }
    // swscale makes the 8-bit picture; 16-bit out widens it in place.
    int ret = sws_convert(f, dst, dst_stride, dfmt);
    if (ret == 0 && ddepth == 16)
      spdl_px_widen(dst, dst_stride, f->height, (int64_t)f->width * (dfmt == SPDL_PK_GRAY ? 1 : dfmt == SPDL_PK_RGBA ? 4 : 3));
    return ret;
  }
  if (wide >= 0) return convert_wide(f, wide, samples, big, dst, dst_stride, dfmt);
  if (layout >= 0) {
    const uint32_t *pal = layout == SPDL_PK_PAL8 ? (const uint32_t *)f->data[1] : NULL;
    if (spdl_convert_packed(f->data[0], f->linesize[0], layout, pal, dst, dst_stride, dfmt,
                            f->height, f->width) != 0)
      return AVERROR(EINVAL);
    return 0;
  }
  return sws_convert(f, dst, dst_stride, dfmt);
}

// sws_convert converts any frame libswscale takes to 8-bit packed dfmt.
static int sws_convert(const AVFrame *f, uint8_t *dst, int dst_stride, int dfmt) {
  int full = f->color_range == AVCOL_RANGE_JPEG;
  int src_fmt = unjpeg(f->format, &full);
  if (av_pix_fmt_desc_get(src_fmt) == NULL || !sws_isSupportedInput(src_fmt))
    return AVERROR_PATCHWELCOME;
  int dst_fmt = dfmt == SPDL_PK_RGB    ? AV_PIX_FMT_RGB24
                : dfmt == SPDL_PK_BGR  ? AV_PIX_FMT_BGR24
                : dfmt == SPDL_PK_RGBA ? AV_PIX_FMT_RGBA
                                       : AV_PIX_FMT_GRAY8;
  struct SwsContext *sws =
      sws_getContext(f->width, f->height, src_fmt, f->width, f->height, dst_fmt,
                     SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
  if (sws == NULL) return AVERROR(ENOMEM);
  int cs = f->colorspace;
  if (cs == AVCOL_SPC_UNSPECIFIED || cs == AVCOL_SPC_RGB || cs >= AVCOL_SPC_NB) cs = SWS_CS_DEFAULT;
  sws_setColorspaceDetails(sws, sws_getCoefficients(cs), full, sws_getCoefficients(SWS_CS_DEFAULT),
                           1, 0, 1 << 16, 1 << 16);
  uint8_t *dd[4] = {dst, NULL, NULL, NULL};
  int dl[4] = {dst_stride, 0, 0, 0};
  int ret = sws_scale(sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dd, dl);
  sws_freeContext(sws);
  return ret == f->height ? 0 : AVERROR(EINVAL);
}

int spdl_ff_is_packed(const AVFrame *f, int dfmt) {
  if (f->linesize[0] <= 0) return 0;  // bottom-up rows: convert instead
  switch (f->format) {
    case AV_PIX_FMT_RGB24:
      return dfmt == SPDL_PK_RGB;
    case AV_PIX_FMT_BGR24:
      return dfmt == SPDL_PK_BGR;
    case AV_PIX_FMT_GRAY8:
      return dfmt == SPDL_PK_GRAY;
    case AV_PIX_FMT_RGBA:
      return dfmt == SPDL_PK_RGBA;
  }
  return 0;
}

int spdl_ff_is_gray(const AVFrame *f) {
  switch (f->format) {
    case AV_PIX_FMT_GRAY8:
    case AV_PIX_FMT_GRAY16BE:
    case AV_PIX_FMT_GRAY16LE:
    case AV_PIX_FMT_YA8:
    case AV_PIX_FMT_YA16BE:
    case AV_PIX_FMT_YA16LE:
      return 1;
  }
  return 0;
}
