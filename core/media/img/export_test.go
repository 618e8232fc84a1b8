package img

import "github.com/spdl-go/spdl-go/core/tensor"

// DecodeWithFFmpeg decodes JPEGs with FFmpeg's mjpeg decoder instead of
// libjpeg-turbo, for comparisons.
func DecodeWithFFmpeg(data []byte, name string, o DecodeOptions) (*tensor.Tensor, error) {
	o.ffmpegOnly = true
	return Decode(data, name, o)
}

// DecodeWholeJPEG decodes JPEGs whole before resizing and cropping, even
// where Decode would decode only the window a crop needs.
func DecodeWholeJPEG(data []byte, name string, o DecodeOptions) (*tensor.Tensor, error) {
	o.wholeJPEG = true
	return Decode(data, name, o)
}
