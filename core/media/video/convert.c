#include "convert.h"

#include <stdlib.h>
#include <string.h>
#include <libavutil/pixdesc.h>
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>

struct spdl_video {
	struct SwsContext *sws;
	int dst_fmt;
	int flags;
	/* The geometry and colour details that sws was last tuned for:
	 * sws_getCachedContext makes a new context when the geometry changes. */
	int tuned;
	int w, h, fmt, dst_w, dst_h;
	int colorspace;
	int range;
	/* Scratch image for conversions that cannot write straight. */
	uint8_t *scratch;
	size_t scratch_size;
};

spdl_video *spdl_video_new(int dst_fmt, int flags) {
	spdl_video *v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	v->dst_fmt = dst_fmt;
	v->flags = flags;
	return v;
}

void spdl_video_free(spdl_video *v) {
	if (!v)
		return;
	sws_freeContext(v->sws);
	free(v->scratch);
	free(v);
}

/* tune tells swscale the frame's YUV matrix and range; swscale otherwise
 * assumes BT.601 and limited range (full range for the yuvj formats). */
static void tune(spdl_video *v, const AVFrame *f) {
	const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(f->format);
	if (!d || (d->flags & AV_PIX_FMT_FLAG_RGB))
		return;
	if (v->tuned && v->colorspace == (int)f->colorspace && v->range == (int)f->color_range)
		return;
	int *inv, *table, src_range, dst_range, brightness, contrast, saturation;
	const int *in_table, *out_table;
	if (sws_getColorspaceDetails(v->sws, &inv, &src_range, &table, &dst_range, &brightness, &contrast, &saturation) >= 0) {
		in_table = inv, out_table = table;
	} else {
		/* Older libswscale refuses for gray output: use its defaults. */
		in_table = out_table = sws_getCoefficients(SWS_CS_DEFAULT);
		src_range = f->format == AV_PIX_FMT_YUVJ420P || f->format == AV_PIX_FMT_YUVJ422P ||
		            f->format == AV_PIX_FMT_YUVJ444P || f->format == AV_PIX_FMT_YUVJ440P ||
		            f->format == AV_PIX_FMT_YUVJ411P;
		brightness = 0, contrast = saturation = 1 << 16;
	}
	if (f->colorspace != AVCOL_SPC_UNSPECIFIED && f->colorspace != AVCOL_SPC_RGB)
		in_table = sws_getCoefficients(f->colorspace);
	if (f->color_range == AVCOL_RANGE_JPEG)
		src_range = 1;
	else if (f->color_range == AVCOL_RANGE_MPEG)
		src_range = 0;
	/* RGB is full range; so is the gray we output (the luma of that RGB). */
	sws_setColorspaceDetails(v->sws, in_table, src_range, out_table, 1, brightness, contrast, saturation);
	v->tuned = 1;
	v->colorspace = f->colorspace;
	v->range = f->color_range;
}

static int scale(spdl_video *v, const AVFrame *f, uint8_t *dst, int dst_w, int dst_h, int linesize) {
	if (!v->sws || f->width != v->w || f->height != v->h || f->format != v->fmt || dst_w != v->dst_w || dst_h != v->dst_h) {
		v->tuned = 0;
		v->w = f->width, v->h = f->height, v->fmt = f->format, v->dst_w = dst_w, v->dst_h = dst_h;
	}
	v->sws = sws_getCachedContext(v->sws, f->width, f->height, f->format, dst_w, dst_h, v->dst_fmt, v->flags, NULL, NULL, NULL);
	if (!v->sws)
		return AVERROR(ENOMEM);
	tune(v, f);
	uint8_t *planes[4] = {dst, NULL, NULL, NULL};
	int linesizes[4] = {linesize, 0, 0, 0};
	int h = sws_scale(v->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, planes, linesizes);
	if (h < 0)
		return h;
	if (h != dst_h)
		return AVERROR_BUG;
	return 0;
}

int spdl_video_convert(spdl_video *v, const AVFrame *f, uint8_t *dst, int dst_w, int dst_h, int channels, size_t room) {
	if (f->width <= 0 || f->height <= 0 || dst_w <= 0 || dst_h <= 0 || channels <= 0)
		return AVERROR(EINVAL);
	if (f->format < 0 || !sws_isSupportedInput(f->format))
		return SPDL_VIDEO_EFORMAT;
	size_t row = (size_t)dst_w * channels, size = row * dst_h;
	if (row > INT32_MAX / 2)
		return AVERROR(EINVAL);
	if (room >= SPDL_VIDEO_GUARD) {
		uint8_t saved[SPDL_VIDEO_GUARD];
		memcpy(saved, dst + size, sizeof(saved));
		int ret = scale(v, f, dst, dst_w, dst_h, (int)row);
		memcpy(dst + size, saved, sizeof(saved));
		return ret;
	}
	size_t stride = (row + 63) & ~(size_t)63;
	size_t need = stride * dst_h + SPDL_VIDEO_GUARD;
	if (v->scratch_size < need) {
		free(v->scratch);
		v->scratch_size = 0;
		if (!(v->scratch = malloc(need)))
			return AVERROR(ENOMEM);
		v->scratch_size = need;
	}
	int ret = scale(v, f, v->scratch, dst_w, dst_h, (int)stride);
	if (ret < 0)
		return ret;
	for (int y = 0; y < dst_h; y++)
		memcpy(dst + y * row, v->scratch + y * stride, row);
	return 0;
}

int64_t spdl_video_frame_ts(const AVFrame *f) {
	return f->best_effort_timestamp;
}

void spdl_video_rotate(const uint8_t *src, int w, int h, int channels, int degrees, uint8_t *dst) {
	size_t c = (size_t)channels;
	for (int y = 0; y < h; y++) {
		const uint8_t *row = src + (size_t)y * w * c;
		for (int x = 0; x < w; x++) {
			size_t o;
			switch (degrees) {
			case 90: /* (x, y) goes to column h-1-y of row x, in rows of h */
				o = ((size_t)x * h + (h - 1 - y)) * c;
				break;
			case 270: /* to column y of row w-1-x */
				o = ((size_t)(w - 1 - x) * h + y) * c;
				break;
			default: /* 180 */
				o = ((size_t)(h - 1 - y) * w + (w - 1 - x)) * c;
				break;
			}
			memcpy(dst + o, row + x * c, c);
		}
	}
}
