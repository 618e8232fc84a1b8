package img

import (
	"errors"
	"fmt"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// DecodeOptions configure Decode. The zero value decodes to RGB at full
// size, refusing images over DefaultMaxPixels.
type DecodeOptions struct {
	Mode Mode
	// DType is the sample type: tensor.UInt8 (the zero value means it too)
	// or tensor.UInt16, which keeps all 16 bits of 16-bit PNG, TIFF and
	// PNM images and widens 8-bit ones (v * 257), so that one dataset
	// batches into one dtype. uint16 takes a centre crop but no resize.
	DType     tensor.DType
	MaxPixels int64 // 0 means DefaultMaxPixels
	Resize    ResizeOptions
	Crop      CropOptions
	// Rand draws the window of a RandomResizedCrop.
	Rand *Rand
	// ffmpegOnly sends JPEGs through FFmpeg too (for comparisons).
	ffmpegOnly bool
	// wholeJPEG decodes JPEGs at full (DCT-scaled) size even for a crop
	// (for comparisons).
	wholeJPEG bool
}

// Validate checks the options without decoding anything.
func (o *DecodeOptions) Validate() error {
	if o.Mode < RGB || o.Mode > RGBA {
		return fmt.Errorf("unknown mode %d", o.Mode)
	}
	if o.DType != (tensor.DType{}) && o.DType != tensor.UInt8 && o.DType != tensor.UInt16 {
		return fmt.Errorf("dtype %v is not uint8 or uint16", o.DType)
	}
	if o.wide() && (o.Resize.Enabled() || o.Crop.Kind == CropRandomResized) {
		// The resampling kernels are 8-bit; a silent narrowing would lose
		// what uint16 was asked for.
		return errors.New("dtype uint16 cannot be resized (the resize kernels are 8-bit): decode at full size or with crop=\"center\", and resize in floating point")
	}
	if o.MaxPixels < 0 {
		return fmt.Errorf("max_pixels %d must be positive", o.MaxPixels)
	}
	if err := o.Resize.validate(); err != nil {
		return err
	}
	if err := o.Crop.validate(); err != nil {
		return err
	}
	if o.Crop.Kind == CropRandomResized && o.Resize.Enabled() {
		return errors.New("a random resized crop resizes to its own size; drop the resize")
	}
	return nil
}

// wide reports whether the output is uint16.
func (o *DecodeOptions) wide() bool { return o.DType == tensor.UInt16 }

// depth is the output's bits per sample.
func (o *DecodeOptions) depth() int {
	if o.wide() {
		return 16
	}
	return 8
}

func (o *DecodeOptions) maxPixels() int64 {
	if o.MaxPixels > 0 {
		return o.MaxPixels
	}
	return DefaultMaxPixels
}

// checkSize refuses empty images and decompression bombs.
func (o *DecodeOptions) checkSize(f format, w, h int) error {
	if w <= 0 || h <= 0 {
		return fmt.Errorf("%w: the %s header says %dx%d pixels", ErrCorrupt, f, w, h)
	}
	if int64(w)*int64(h) > o.maxPixels() {
		return fmt.Errorf("%w: %s of %dx%d = %d pixels is over max_pixels (%d)", ErrTooLarge, f, w, h, int64(w)*int64(h), o.maxPixels())
	}
	return nil
}

func (o *DecodeOptions) plan(h, w int) (plan, error) {
	return makePlan(h, w, o.Resize, o.Crop, o.Rand)
}

// DecodeFile reads and decodes the image at path; see Decode.
func DecodeFile(path string, o DecodeOptions) (*tensor.Tensor, error) {
	data, release, err := readFilePooled(path)
	if err != nil {
		return nil, &av.Error{Source: path, Op: "decode", Err: err}
	}
	defer release()
	return Decode(data, path, o)
}

// Decode decodes an encoded image into a new (H, W, C) tensor of o.DType
// (uint8 unless set) in pooled C memory, resized and cropped as o says, in
// one pass that computes only the output pixels. The format comes from the
// magic bytes, never a file name: JPEG goes through libjpeg-turbo (at a
// reduced DCT scale when the output is at most half the size), everything
// else through libavcodec (PNG, WebP, BMP, GIF's first frame, TIFF, PNM,
// and whatever else FFmpeg's image probe recognises). Alpha is kept by
// mode RGBA only.
//
// name is what errors call the data (a path); "" names it "<N bytes>".
// Errors are *av.Error wrapping ErrEmpty, ErrNotImage, ErrUnsupported,
// ErrTruncated, ErrCorrupt or ErrTooLarge (or an option error). Every C
// object is freed on every path; data is not retained.
func Decode(data []byte, name string, o DecodeOptions) (*tensor.Tensor, error) {
	src := av.Source{Data: data, Name: name}
	fail := func(err error) (*tensor.Tensor, error) {
		return nil, &av.Error{Source: src.String(), Op: "decode", Err: err}
	}
	if err := o.Validate(); err != nil {
		return fail(err)
	}
	if len(data) == 0 {
		return fail(ErrEmpty)
	}
	f := sniff(data)
	switch f {
	case fmtJPEG:
		if !o.ffmpegOnly {
			t, err := decodeJPEGAs(data, &o)
			if !errors.Is(err, errUseFFmpeg) {
				if err != nil {
					return fail(err)
				}
				return t, nil
			}
		}
	case fmtHEIF:
		return fail(fmt.Errorf("%w: HEIF/AVIF (brand %q) cannot be decoded by this build", ErrUnsupported, data[8:12]))
	}
	decoder := f.decoder(data)
	if f != fmtUnknown {
		w, h, ok, err := headerDims(f, data)
		if err != nil {
			return fail(err)
		}
		if ok {
			if err := o.checkSize(f, w, h); err != nil {
				return fail(err)
			}
		}
	} else {
		demuxer, long := ffProbe(data)
		switch {
		case demuxer == "":
			return fail(fmt.Errorf("%w: no image format starts with %s", ErrNotImage, quoteStart(data)))
		case decoderForDemuxer(demuxer) == "":
			return fail(fmt.Errorf("%w: the data is %s, not a still image", ErrUnsupported, long))
		}
		decoder = decoderForDemuxer(demuxer)
	}
	t, err := decodeFFmpeg(data, decoder, f, &o)
	if err != nil {
		return fail(err)
	}
	return t, nil
}

// decodeJPEGAs decodes a JPEG with libjpeg-turbo, which makes 8-bit RGB,
// BGR or gray: an RGBA or uint16 output is decoded as RGB (or gray) and
// then converted, over the output pixels only.
func decodeJPEGAs(data []byte, o *DecodeOptions) (*tensor.Tensor, error) {
	if o.Mode != RGBA && !o.wide() {
		return decodeJPEG(data, o)
	}
	o8 := *o
	o8.DType = tensor.UInt8
	if o.Mode == RGBA {
		o8.Mode = RGB
	}
	t, err := decodeJPEG(data, &o8)
	if err != nil {
		return nil, err
	}
	defer t.Release()
	return convertTensor(t, o8.Mode, o.Mode, o.depth())
}

// quoteStart shows the first bytes of data, for "not an image" errors.
func quoteStart(data []byte) string {
	n := min(len(data), 8)
	return fmt.Sprintf("%q", data[:n])
}
