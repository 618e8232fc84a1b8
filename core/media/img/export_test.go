package img

import "github.com/spdl-go/spdl-go/core/tensor"

// DecodeWithFFmpeg decodes JPEGs with FFmpeg's mjpeg decoder instead of
// libjpeg-turbo, for comparisons.
func DecodeWithFFmpeg(data []byte, name string, o DecodeOptions) (*tensor.Tensor, error) {
	o.ffmpegOnly = true
	return Decode(data, name, o)
}
