#include "convert.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>

struct spdl_audio {
	SwrContext *swr;
	/* The input the converter was built for. */
	AVChannelLayout in_layout;
	int in_fmt, in_rate;
	/* The output. */
	int want_rate, want_channels;
	int filter_size; /* libswresample's filter_size; 0 keeps its default */
	AVChannelLayout out_layout;
	int out_rate, nch;
	int64_t max_bytes;
	/* The sink: ext (the caller's, channel stride cap) or owned planes. */
	float *ext;
	float *planes[SPDL_AUDIO_MAX_CHANNELS];
	int64_t cap, len, skip, limit;
	int full;
	/* Where output goes while samples are still being skipped. */
	float *scratch[SPDL_AUDIO_MAX_CHANNELS];
	int64_t scratch_cap;
	/* swr was initialised for in_* and out_* without error: it may be
	 * cached for another converter. */
	int swr_ok;
};

spdl_audio *spdl_audio_new(int out_rate, int out_channels, int filter_size, int64_t max_bytes) {
	spdl_audio *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->filter_size = filter_size;
	a->want_rate = out_rate;
	a->want_channels = out_channels;
	a->max_bytes = max_bytes;
	a->limit = -1;
	return a;
}

/* A cache of idle resamplers, by configuration. swr_init builds the
 * filter bank anew (160 phases of about 90 taps for 44.1 -> 16 kHz: sines
 * and Bessel functions, about 150 us, as long as converting a second of
 * audio), unless the context already holds one for the same rates; it
 * resets everything else (buffered input, filter position, matrices), so
 * a cached context, re-initialised, converts exactly as a new one. */
#define SWR_CACHE 16

typedef struct {
	SwrContext *swr;
	AVChannelLayout in_layout, out_layout;
	int in_fmt, in_rate, out_rate, filter_size;
} swr_entry;

static pthread_mutex_t swr_mu = PTHREAD_MUTEX_INITIALIZER;
static swr_entry swr_cache[SWR_CACHE];
static int swr_cached;

/* swr_take returns a cached resampler for this configuration (not yet
 * re-initialised), or NULL. */
static SwrContext *swr_take(const AVChannelLayout *in, int in_fmt, int in_rate, const AVChannelLayout *out, int out_rate,
                            int filter_size) {
	SwrContext *s = NULL;
	pthread_mutex_lock(&swr_mu);
	for (int i = swr_cached - 1; i >= 0; i--) {
		swr_entry *e = &swr_cache[i];
		if (e->in_fmt == in_fmt && e->in_rate == in_rate && e->out_rate == out_rate && e->filter_size == filter_size &&
		    av_channel_layout_compare(&e->in_layout, in) == 0 && av_channel_layout_compare(&e->out_layout, out) == 0) {
			s = e->swr;
			av_channel_layout_uninit(&e->in_layout);
			av_channel_layout_uninit(&e->out_layout);
			*e = swr_cache[--swr_cached];
			memset(&swr_cache[swr_cached], 0, sizeof(swr_entry));
			break;
		}
	}
	pthread_mutex_unlock(&swr_mu);
	return s;
}

/* swr_give caches the converter's resampler, built for its current input,
 * evicting the oldest when the cache is full; a->swr is NULL after. */
static void swr_give(spdl_audio *a) {
	SwrContext *s = a->swr;
	a->swr = NULL;
	if (!s)
		return;
	swr_entry e = {.swr = s, .in_fmt = a->in_fmt, .in_rate = a->in_rate, .out_rate = a->out_rate, .filter_size = a->filter_size};
	if (av_channel_layout_copy(&e.in_layout, &a->in_layout) < 0 ||
	    av_channel_layout_copy(&e.out_layout, &a->out_layout) < 0) {
		av_channel_layout_uninit(&e.in_layout);
		av_channel_layout_uninit(&e.out_layout);
		swr_free(&s);
		return;
	}
	pthread_mutex_lock(&swr_mu);
	if (swr_cached == SWR_CACHE) {
		/* The oldest goes: configurations seen lately come back. */
		swr_entry old = swr_cache[0];
		memmove(&swr_cache[0], &swr_cache[1], (SWR_CACHE - 1) * sizeof(swr_entry));
		swr_cache[SWR_CACHE - 1] = e;
		pthread_mutex_unlock(&swr_mu);
		swr_free(&old.swr);
		av_channel_layout_uninit(&old.in_layout);
		av_channel_layout_uninit(&old.out_layout);
		return;
	}
	swr_cache[swr_cached++] = e;
	pthread_mutex_unlock(&swr_mu);
}

void spdl_audio_cache_clear(void) {
	pthread_mutex_lock(&swr_mu);
	while (swr_cached > 0) {
		swr_entry *e = &swr_cache[--swr_cached];
		swr_free(&e->swr);
		av_channel_layout_uninit(&e->in_layout);
		av_channel_layout_uninit(&e->out_layout);
	}
	pthread_mutex_unlock(&swr_mu);
}

int spdl_audio_cache_len(void) {
	pthread_mutex_lock(&swr_mu);
	int n = swr_cached;
	pthread_mutex_unlock(&swr_mu);
	return n;
}

void spdl_audio_free(spdl_audio *a) {
	if (!a)
		return;
	if (a->swr_ok)
		swr_give(a);
	swr_free(&a->swr);
	av_channel_layout_uninit(&a->in_layout);
	av_channel_layout_uninit(&a->out_layout);
	for (int c = 0; c < SPDL_AUDIO_MAX_CHANNELS; c++) {
		free(a->planes[c]);
		free(a->scratch[c]);
	}
	free(a);
}

int64_t spdl_frame_ts(const AVFrame *f) {
	return f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
}

/* input_layout is the frame's layout, with an unspecified order replaced by
 * the default order for its channel count (so that mixing can be built). */
static int input_layout(AVChannelLayout *dst, const AVFrame *f) {
	int n = f->ch_layout.nb_channels;
	if (n <= 0 || n > SPDL_AUDIO_MAX_CHANNELS)
		return SPDL_AUDIO_ECHANNELS;
	if (f->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC) {
		av_channel_layout_default(dst, n);
		return 0;
	}
	return av_channel_layout_copy(dst, &f->ch_layout);
}

int spdl_audio_setup(spdl_audio *a, const AVFrame *f) {
	if (a->nch)
		return 0;
	if (f->sample_rate <= 0)
		return AVERROR_INVALIDDATA;
	if (a->want_channels > 0) {
		if (a->want_channels > SPDL_AUDIO_MAX_CHANNELS)
			return SPDL_AUDIO_ECHANNELS;
		av_channel_layout_default(&a->out_layout, a->want_channels);
	} else {
		int rc = input_layout(&a->out_layout, f);
		if (rc < 0)
			return rc;
	}
	a->nch = a->out_layout.nb_channels;
	a->out_rate = a->want_rate > 0 ? a->want_rate : f->sample_rate;
	return 0;
}

int spdl_audio_rate(const spdl_audio *a) { return a->out_rate; }
int spdl_audio_channels(const spdl_audio *a) { return a->nch; }
int spdl_audio_full(const spdl_audio *a) { return a->full; }
int64_t spdl_audio_len(const spdl_audio *a) { return a->len; }

/* grow makes room for need samples per channel in the owned planes. */
static int grow(float **planes, int nch, int64_t *cap, int64_t need, int64_t max_bytes) {
	if (need <= *cap)
		return 0;
	if (need > max_bytes / 4 / nch)
		return SPDL_AUDIO_ETOOBIG;
	int64_t n = *cap * 2;
	if (n < need)
		n = need;
	if (n < 1024)
		n = 1024;
	if (n > max_bytes / 4 / nch)
		n = max_bytes / 4 / nch;
	for (int c = 0; c < nch; c++) {
		float *p = realloc(planes[c], (size_t)n * sizeof(float));
		if (!p)
			return AVERROR(ENOMEM);
		planes[c] = p;
	}
	*cap = n;
	return 0;
}

int spdl_audio_set_sink(spdl_audio *a, float *ext, int64_t cap, int64_t hint, int64_t skip, int64_t limit) {
	if (!a->nch)
		return AVERROR(EINVAL);
	a->skip = skip > 0 ? skip : 0;
	a->limit = limit;
	if (ext) {
		a->ext = ext;
		a->cap = cap;
		for (int c = 0; c < a->nch; c++)
			a->planes[c] = NULL;
		if (a->limit < 0 || a->limit > cap)
			a->limit = cap;
	} else if (hint > 0) {
		int rc = grow(a->planes, a->nch, &a->cap, hint, a->max_bytes);
		if (rc < 0)
			return rc;
	}
	a->full = a->limit == 0;
	return 0;
}

static float *plane(spdl_audio *a, int c) {
	return a->ext ? a->ext + (int64_t)c * a->cap : a->planes[c];
}

/* clamp keeps samples in [-1, 1] (lossy decoders overshoot slightly) and
 * turns NaN into 0. */
static void clamp(float *p, int64_t n) {
	for (int64_t i = 0; i < n; i++) {
		float v = p[i];
		v = v > 1.0f ? 1.0f : v;
		v = v < -1.0f ? -1.0f : v;
		p[i] = v == v ? v : 0.0f;
	}
}

/* room is how many more samples per channel the sink may take, growing the
 * owned planes to hold want of them. want is the resampler's upper bound:
 * near max_bytes it is cut to what is left (the resampler keeps the rest),
 * and only output that finds nothing left is too big. */
static int room(spdl_audio *a, int64_t want, int64_t *n) {
	int64_t r = want;
	if (a->limit >= 0 && a->limit - a->len < r)
		r = a->limit - a->len;
	if (!a->ext) {
		int64_t most = a->max_bytes / 4 / a->nch;
		if (r > most - a->len) {
			if (most - a->len <= 0)
				return SPDL_AUDIO_ETOOBIG;
			r = most - a->len;
		}
		int rc = grow(a->planes, a->nch, &a->cap, a->len + r, a->max_bytes);
		if (rc < 0)
			return rc;
	}
	*n = r;
	return 0;
}

/* convert runs the resampler on n_in samples (in == NULL: drain) and
 * appends what it returns to the sink. It returns the number of samples
 * the resampler produced (kept or skipped). */
static int convert(spdl_audio *a, const uint8_t **in, int n_in) {
	int out_max = swr_get_out_samples(a->swr, n_in);
	if (out_max < 0)
		return out_max;
	if (a->skip > 0) {
		int rc = grow(a->scratch, a->nch, &a->scratch_cap, out_max, a->max_bytes);
		if (rc < 0)
			return rc;
		int n = swr_convert(a->swr, (uint8_t **)a->scratch, out_max, in, n_in);
		if (n < 0)
			return n;
		int64_t d = n < a->skip ? n : a->skip;
		a->skip -= d;
		/* These samples exist already: all that the limit keeps must fit. */
		int64_t keep = n - d;
		if (a->limit >= 0 && a->limit - a->len < keep)
			keep = a->limit - a->len;
		if (!a->ext && keep > a->max_bytes / 4 / a->nch - a->len)
			return SPDL_AUDIO_ETOOBIG;
		int64_t k;
		if ((rc = room(a, keep, &k)) < 0)
			return rc;
		for (int c = 0; c < a->nch; c++) {
			float *dst = plane(a, c) + a->len;
			memcpy(dst, a->scratch[c] + d, (size_t)k * sizeof(float));
			clamp(dst, k);
		}
		a->len += k;
		a->full = a->limit >= 0 && a->len >= a->limit;
		return n;
	}
	int64_t k;
	int rc = room(a, out_max, &k);
	if (rc < 0)
		return rc;
	uint8_t *dst[SPDL_AUDIO_MAX_CHANNELS];
	for (int c = 0; c < a->nch; c++)
		dst[c] = (uint8_t *)(plane(a, c) + a->len);
	int n = swr_convert(a->swr, dst, (int)k, in, n_in);
	if (n < 0)
		return n;
	for (int c = 0; c < a->nch; c++)
		clamp((float *)dst[c], n);
	a->len += n;
	a->full = a->limit >= 0 && a->len >= a->limit;
	return n;
}

static int drain(spdl_audio *a) {
	while (a->swr && !a->full) {
		int n = convert(a, NULL, 0);
		if (n <= 0)
			return n;
	}
	return 0;
}

/* configure (re)builds the resampler when the input's format, rate or
 * layout differs from what it was built for, draining the old one first. */
static int configure(spdl_audio *a, const AVFrame *f) {
	AVChannelLayout in = {0};
	int rc = input_layout(&in, f);
	if (rc < 0)
		return rc;
	if (f->sample_rate <= 0 || (int64_t)f->sample_rate > (int64_t)a->out_rate * SPDL_AUDIO_MAX_DOWNSAMPLING) {
		av_channel_layout_uninit(&in);
		return f->sample_rate <= 0 ? AVERROR_INVALIDDATA : SPDL_AUDIO_ERATIO;
	}
	if (a->swr && f->format == a->in_fmt && f->sample_rate == a->in_rate &&
	    av_channel_layout_compare(&in, &a->in_layout) == 0) {
		av_channel_layout_uninit(&in);
		return 0;
	}
	if ((rc = drain(a)) < 0) {
		av_channel_layout_uninit(&in);
		return rc;
	}
	if (a->swr_ok)
		swr_give(a);
	swr_free(&a->swr);
	a->swr_ok = 0;
	av_channel_layout_uninit(&a->in_layout);
	a->in_layout = in;
	a->in_fmt = f->format;
	a->in_rate = f->sample_rate;
	if ((a->swr = swr_take(&a->in_layout, a->in_fmt, a->in_rate, &a->out_layout, a->out_rate, a->filter_size))) {
		/* Same options as below (swr_init keeps them, and the matrix
		 * set with swr_set_matrix); this resets its state. */
		if ((rc = swr_init(a->swr)) < 0)
			return rc;
		a->swr_ok = 1;
		return 0;
	}
	rc = swr_alloc_set_opts2(&a->swr, &a->out_layout, AV_SAMPLE_FMT_FLTP, a->out_rate,
	                         &a->in_layout, f->format, f->sample_rate, 0, NULL);
	if (rc < 0)
		return rc;
	/* Normalize the standard mixing matrices so that no output channel sums
	 * to more than 1: stereo to mono is then the average of the two. */
	if ((rc = av_opt_set_double(a->swr, "rematrix_maxval", 1.0, 0)) < 0)
		return rc;
	if (a->filter_size > 0 && (rc = av_opt_set_int(a->swr, "filter_size", a->filter_size, 0)) < 0)
		return rc;
	if (in.nb_channels == 1 && a->nch > 1) {
		/* Mono fills every output channel at full level (the standard matrix
		 * would put it in the center channel, or at -3 dB in each side). */
		double m[SPDL_AUDIO_MAX_CHANNELS];
		for (int c = 0; c < a->nch; c++)
			m[c] = 1.0;
		if ((rc = swr_set_matrix(a->swr, m, 1)) < 0)
			return rc;
	}
	if ((rc = swr_init(a->swr)) < 0)
		return rc;
	a->swr_ok = 1;
	return 0;
}

int spdl_audio_push(spdl_audio *a, const AVFrame *f, int offset) {
	if (a->full)
		return 0;
	if (!a->nch || offset < 0)
		return AVERROR(EINVAL);
	int rc = configure(a, f);
	if (rc < 0)
		return rc;
	if (a->full || f->nb_samples <= offset)
		return 0;
	const uint8_t *in[SPDL_AUDIO_MAX_CHANNELS];
	int nch = f->ch_layout.nb_channels;
	int planar = av_sample_fmt_is_planar(f->format);
	int64_t step = (int64_t)offset * av_get_bytes_per_sample(f->format) * (planar ? 1 : nch);
	for (int p = 0; p < (planar ? nch : 1); p++)
		in[p] = f->extended_data[p] + step;
	rc = convert(a, in, f->nb_samples - offset);
	return rc < 0 ? rc : 0;
}

int spdl_audio_flush(spdl_audio *a) { return drain(a); }

void spdl_audio_finish(spdl_audio *a, float *dst) {
	for (int c = 0; c < a->nch; c++) {
		if (a->ext)
			memset(a->ext + (int64_t)c * a->cap + a->len, 0, (size_t)(a->cap - a->len) * sizeof(float));
		else if (a->len > 0)
			memcpy(dst + (int64_t)c * a->len, a->planes[c], (size_t)a->len * sizeof(float));
	}
}
