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
