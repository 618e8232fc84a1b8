package main

import (
	"bytes"
	"image"
	"image/png"
)

// encodePNG writes h x w pixels (uint8, or big-endian-to-be uint16 for
// gray16) as PNG with Go's encoder (zlib from compress/flate), which needs
// no FFmpeg encoder: the bundled FFmpeg has only decoders.
func encodePNG(pix []byte, h, w int, o imageOptions) ([]byte, error) {
	rect := image.Rect(0, 0, w, h)
	var img image.Image
	switch o.pixFmt {
	case "gray":
		img = &image.Gray{Pix: pix, Stride: w, Rect: rect}
	case "gray16":
		// image.Gray16 holds big-endian samples; the array is native (little) endian.
		be := make([]byte, len(pix))
		for i := 0; i+1 < len(pix); i += 2 {
			be[i], be[i+1] = pix[i+1], pix[i]
		}
		img = &image.Gray16{Pix: be, Stride: 2 * w, Rect: rect}
	case "rgba":
		img = &image.NRGBA{Pix: pix, Stride: 4 * w, Rect: rect}
	default: // rgb24, bgr24: Go has no 3-byte image type; opaque RGBA encodes as RGB
		rgba := make([]byte, 4*w*h)
		r, b := 0, 2
		if o.pixFmt == "bgr24" {
			r, b = 2, 0
		}
		for i, j := 0, 0; i+2 < len(pix); i, j = i+3, j+4 {
			rgba[j], rgba[j+1], rgba[j+2], rgba[j+3] = pix[i+r], pix[i+1], pix[i+b], 0xff
		}
		img = &image.RGBA{Pix: rgba, Stride: 4 * w, Rect: rect}
	}
	enc := png.Encoder{CompressionLevel: pngLevel(o.level)}
	var buf bytes.Buffer
	if err := enc.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pngLevel maps zlib's 0..9 (-1 default) onto Go's four levels.
func pngLevel(level int) png.CompressionLevel {
	switch {
	case level < 0:
		return png.DefaultCompression
	case level == 0:
		return png.NoCompression
	case level <= 3:
		return png.BestSpeed
	case level <= 6:
		return png.DefaultCompression
	}
	return png.BestCompression
}
