package video

// ConvertOne is convertOne, for the tests of package video_test.
var ConvertOne = convertOne

// DecodeCounting is Decode that also returns how many frames were decoded.
var DecodeCounting = decode
