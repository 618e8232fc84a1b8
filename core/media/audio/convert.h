/* Audio sample conversion for package audio: libswresample writing planar
 * float32 straight into a tensor's C memory (or into growable planes when
 * the length is not known in advance), with precise trimming at the start,
 * a cap on the length, and clamping to [-1, 1].
 *
 * Ownership: spdl_audio_new returns a converter that the caller frees with
 * spdl_audio_free, on every path. Frames are borrowed for the duration of a
 * call. A sink buffer given to spdl_audio_set_sink stays the caller's and
 * must outlive every later call on the converter. Functions return 0 or a
 * negative AVERROR code. */
#ifndef SPDL_AUDIO_CONVERT_H
#define SPDL_AUDIO_CONVERT_H

#include <stdint.h>
#include <libavutil/frame.h>
#include <libavutil/error.h>

#define SPDL_AUDIO_MAX_CHANNELS 64
/* The decoded audio would exceed the converter's byte limit. */
#define SPDL_AUDIO_ETOOBIG FFERRTAG('S', 'P', 'D', 'L')
/* Resampling would shrink the rate more than SPDL_AUDIO_MAX_DOWNSAMPLING
 * times: the filter's length grows with the ratio (a crafted 134 MHz WAV
 * took a minute to set up for 22.05 kHz). */
#define SPDL_AUDIO_ERATIO FFERRTAG('S', 'P', 'D', 'R')
#define SPDL_AUDIO_MAX_DOWNSAMPLING 128
/* A frame has no channels, or more than SPDL_AUDIO_MAX_CHANNELS. */
#define SPDL_AUDIO_ECHANNELS FFERRTAG('S', 'P', 'D', 'C')

typedef struct spdl_audio spdl_audio;

/* out_rate and out_channels of 0 take the first frame's. filter_size is
 * libswresample's (taps at the lower rate: twice the sinc's zero crossings
 * on each side); 0 keeps its default of 32. max_bytes bounds the output
 * (all channels). Returns NULL when out of memory. */
spdl_audio *spdl_audio_new(int out_rate, int out_channels, int filter_size, int64_t max_bytes);
/* Frees the converter; its resampler goes to a small process-wide cache
 * of idle ones, which later converters with the same input and output
 * take instead of building a new one. */
void spdl_audio_free(spdl_audio *a);
/* Frees the cached resamplers (tests: a fresh resampler for each decode). */
void spdl_audio_cache_clear(void);
/* How many resamplers are cached. */
int spdl_audio_cache_len(void);

/* Fixes the output rate and channel layout from the first frame (if the
 * constructor left them to it). Later frames are converted to them. */
int spdl_audio_setup(spdl_audio *a, const AVFrame *first);
int spdl_audio_rate(const spdl_audio *a);
int spdl_audio_channels(const spdl_audio *a);

/* Says where output goes. ext != NULL: channel c is written at
 * ext + c*cap, at most cap samples (the caller's buffer). ext == NULL: into
 * owned planes, initially of hint samples, grown as needed. The first skip
 * output samples are dropped; after that at most limit (< 0: no limit) are
 * kept. Call once, after spdl_audio_setup and before the first push. */
int spdl_audio_set_sink(spdl_audio *a, float *ext, int64_t cap, int64_t hint, int64_t skip, int64_t limit);

/* Converts one decoded frame, less its first offset samples. */
int spdl_audio_push(spdl_audio *a, const AVFrame *f, int offset);
/* Drains the resampler's delay at the end of the stream. */
int spdl_audio_flush(spdl_audio *a);
/* Whether the limit is reached: decoding can stop. */
int spdl_audio_full(const spdl_audio *a);
/* Samples per channel kept so far. */
int64_t spdl_audio_len(const spdl_audio *a);
/* Owned planes: copies channels x len samples into dst. External sink:
 * zero-fills each channel from len to cap. */
void spdl_audio_finish(spdl_audio *a, float *dst);

/* The frame's best-effort timestamp (AV_NOPTS_VALUE when unknown). */
int64_t spdl_frame_ts(const AVFrame *f);

#endif
