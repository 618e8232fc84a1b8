package audio

// SeekStats returns how often Decode seeked, and how often it fell back
// to decoding from the beginning.
func SeekStats() (seeked, missed int64) { return seeks.Load(), seekMisses.Load() }
