package audio

/*
#include "convert.h"
*/
import "C"

// clearResamplerCache frees the idle resamplers that convert.c keeps for
// reuse and returns how many there were. Tests use it to compare a reused
// resampler's output with a new one's.
func clearResamplerCache() int {
	n := int(C.spdl_audio_cache_len())
	C.spdl_audio_cache_clear()
	return n
}
