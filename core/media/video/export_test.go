package video

// ConvertOne is convertOne, for the tests of package video_test.
var ConvertOne = convertOne

// DecodeCounting is Decode that also returns how many frames were decoded.
var DecodeCounting = decode

// Straight returns o set to decode straight through, skipping nothing
// (the reference the fast path is compared with).
func Straight(o Options) Options {
	o.straight = true
	return o
}
