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

// FullProbe returns o set to open the input with avformat_find_stream_info
// even where the container's header makes it unnecessary.
func FullProbe(o Options) Options {
	o.fullProbe = true
	return o
}
