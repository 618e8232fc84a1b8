package audio

import "github.com/spdl-go/spdl-go/core/media/av"

// SeekStats returns how often Decode seeked, and how often it fell back
// to decoding from the beginning.
func SeekStats() (seeked, missed int64) { return seeks.Load(), seekMisses.Load() }

// SetFastOpen turns the signature-based open on or off and returns the
// previous setting.
func SetFastOpen(on bool) bool { old := fastOpen; fastOpen = on; return old }

// OpenOptionsFor is how Decode opens src.
func OpenOptionsFor(src av.Source) av.OpenOptions { return openOptions(src) }

// ClearResamplerCache frees the idle resamplers, so that the next decode
// builds a new one; it returns how many there were.
func ClearResamplerCache() int { return clearResamplerCache() }

// RawStats is how often Decode read a FLAC file's frames without the
// demuxer, and how often that did not decode to the whole output and
// Decode went through the demuxer after all.
func RawStats() (uses, fallbacks int64) { return rawUses.Load(), rawFallbacks.Load() }

// SetRaw turns reading FLAC frames without the demuxer on or off (it
// follows SetFastOpen otherwise) and returns the previous setting.
func SetRaw(on bool) bool { old := rawFLAC; rawFLAC = on; return old }

// SetFLACMargin sets the raw FLAC path's estimate margins (a ratio and
// bytes, flacraw.go) and returns a function that restores them.
func SetFLACMargin(ratio float64, bytes int64) (restore func()) {
	r, b := flacMargin, flacMarginBytes
	flacMargin, flacMarginBytes = ratio, bytes
	return func() { flacMargin, flacMarginBytes = r, b }
}
