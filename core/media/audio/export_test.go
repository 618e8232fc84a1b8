package audio

// SetMaxOutputBytes sets the bound on one item's decoded audio and
// returns the old one.
func SetMaxOutputBytes(n int64) int64 { return maxOutputBytes.Swap(n) }

// SeekStats returns how often Decode seeked, and how often it fell back
// to decoding from the beginning.
func SeekStats() (seeked, missed int64) { return seeks.Load(), seekMisses.Load() }
