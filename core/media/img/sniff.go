package img

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// format is an image format recognised by its first bytes.
type format int

const (
	fmtUnknown format = iota
	fmtJPEG
	fmtPNG
	fmtGIF
	fmtBMP
	fmtWebP
	fmtTIFF
	fmtPNM
	fmtHEIF
)

func (f format) String() string {
	return [...]string{"unknown", "JPEG", "PNG", "GIF", "BMP", "WebP", "TIFF", "PNM", "HEIF/AVIF"}[f]
}

// sniff recognises the format from the magic bytes (never the file name).
func sniff(b []byte) format {
	switch {
	case len(b) >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff:
		return fmtJPEG
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return fmtPNG
	case bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a")):
		return fmtGIF
	case len(b) >= 14 && b[0] == 'B' && b[1] == 'M':
		return fmtBMP
	case len(b) >= 12 && bytes.HasPrefix(b, []byte("RIFF")) && string(b[8:12]) == "WEBP":
		return fmtWebP
	case bytes.HasPrefix(b, []byte("II*\x00")) || bytes.HasPrefix(b, []byte("MM\x00*")):
		return fmtTIFF
	case len(b) >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6' && isSpace(b[2]):
		return fmtPNM
	case len(b) >= 12 && string(b[4:8]) == "ftyp" && isHEIFBrand(string(b[8:12])):
		return fmtHEIF
	}
	return fmtUnknown
}

func isHEIFBrand(s string) bool {
	switch s {
	case "heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1", "avif", "avis":
		return true
	}
	return false
}

// decoder is the FFmpeg decoder for a recognised format other than JPEG.
func (f format) decoder(b []byte) string {
	switch f {
	case fmtPNG:
		return "png"
	case fmtGIF:
		return "gif"
	case fmtBMP:
		return "bmp"
	case fmtWebP:
		return "webp"
	case fmtTIFF:
		return "tiff"
	case fmtPNM:
		switch b[1] {
		case '1', '4':
			return "pbm"
		case '2', '5':
			return "pgm"
		}
		return "ppm"
	case fmtJPEG:
		return "mjpeg"
	}
	return ""
}

// decoderForDemuxer names the FFmpeg decoder of a still-image demuxer
// that libavformat's probe chose, or "" if the demuxer is not for images.
func decoderForDemuxer(name string) string {
	switch name {
	case "gif":
		return "gif"
	case "j2k_pipe":
		return "jpeg2000"
	case "jpeg_pipe":
		return "mjpeg"
	case "jpegxl_pipe":
		return "libjxl"
	case "svg_pipe":
		return "librsvg"
	}
	if base, ok := strings.CutSuffix(name, "_pipe"); ok {
		return base
	}
	return ""
}

// headerDims reads the width and height from the header of a PNG, GIF,
// BMP, WebP, TIFF or PNM file, without decoding, so that decompression
// bombs are refused before anything is allocated. ok is false for formats
// it does not parse (FFmpeg's max_pixels still guards them). err reports a
// header cut short or malformed.
func headerDims(f format, b []byte) (w, h int, ok bool, err error) {
	le, be := binary.LittleEndian, binary.BigEndian
	short := func(need int) error {
		if len(b) < need {
			return fmt.Errorf("%w: the %s header needs %d bytes, the data has %d", ErrTruncated, f, need, len(b))
		}
		return nil
	}
	switch f {
	case fmtPNG:
		if err := short(24); err != nil {
			return 0, 0, false, err
		}
		if string(b[12:16]) != "IHDR" {
			return 0, 0, false, fmt.Errorf("%w: PNG without an IHDR chunk first", ErrCorrupt)
		}
		return int(be.Uint32(b[16:])), int(be.Uint32(b[20:])), true, pngComplete(b)
	case fmtGIF:
		if err := short(10); err != nil {
			return 0, 0, false, err
		}
		return int(le.Uint16(b[6:])), int(le.Uint16(b[8:])), true, gifComplete(b)
	case fmtBMP:
		if err := short(18); err != nil {
			return 0, 0, false, err
		}
		if le.Uint32(b[14:]) == 12 { // OS/2 BITMAPCOREHEADER
			if err := short(22); err != nil {
				return 0, 0, false, err
			}
			return int(le.Uint16(b[18:])), int(le.Uint16(b[20:])), true, nil
		}
		if err := short(26); err != nil {
			return 0, 0, false, err
		}
		return abs(int(int32(le.Uint32(b[18:])))), abs(int(int32(le.Uint32(b[22:])))), true, nil
	case fmtWebP:
		if err := short(30); err != nil {
			return 0, 0, false, err
		}
		switch string(b[12:16]) {
		case "VP8 ":
			return int(le.Uint16(b[26:]) & 0x3fff), int(le.Uint16(b[28:]) & 0x3fff), true, nil
		case "VP8L":
			v := le.Uint32(b[21:])
			return int(v&0x3fff) + 1, int((v>>14)&0x3fff) + 1, true, nil
		case "VP8X":
			// 24-bit canvas width and height, minus one, at 24 and 27:
			// read as 3 bytes, since a 30-byte file ends right after.
			u24 := func(p []byte) int { return int(p[0]) | int(p[1])<<8 | int(p[2])<<16 }
			return u24(b[24:27]) + 1, u24(b[27:30]) + 1, true, nil
		}
		return 0, 0, false, nil
	case fmtTIFF:
		return tiffDims(b)
	case fmtPNM:
		return pnmDims(b)
	}
	return 0, 0, false, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// pngComplete walks the chunk headers (not their data) and checks that
// the file reaches its IEND chunk: FFmpeg's decoder returns a partly grey
// picture for some truncated files instead of failing.
func pngComplete(b []byte) error {
	off := 8
	for off+8 <= len(b) {
		n := int64(binary.BigEndian.Uint32(b[off:]))
		typ := string(b[off+4 : off+8])
		next := int64(off) + 12 + n
		if typ == "IEND" {
			return nil
		}
		if next > int64(len(b)) {
			return fmt.Errorf("%w: PNG ends inside its %q chunk (%d of %d bytes present)", ErrTruncated, typ, int64(len(b))-int64(off)-8, n)
		}
		off = int(next)
	}
	return fmt.Errorf("%w: PNG ends after %d bytes without its IEND chunk", ErrTruncated, len(b))
}

// gifComplete walks the block structure (headers and sub-block lengths,
// not the pixels) and checks that no block is cut short and that there is
// an image: FFmpeg's decoder returns a partly filled first frame for a
// truncated file instead of failing. A file that ends between blocks
// after its first image (no trailer byte) is accepted, as are bytes
// after the first image that are no block (FFmpeg never reads them).
func gifComplete(b []byte) error {
	const lsd = 13 // signature and logical screen descriptor
	if len(b) < lsd {
		return fmt.Errorf("%w: the GIF header needs %d bytes, the data has %d", ErrTruncated, lsd, len(b))
	}
	table := func(packed byte) int {
		if packed&0x80 == 0 {
			return 0
		}
		return 3 << (packed&7 + 1)
	}
	off := lsd + table(b[10])
	cut := func(what string) error {
		return fmt.Errorf("%w: GIF ends inside its %s (%d bytes)", ErrTruncated, what, len(b))
	}
	// subBlocks skips data sub-blocks up to their zero terminator.
	subBlocks := func(what string) error {
		for {
			if off >= len(b) {
				return cut(what)
			}
			n := int(b[off])
			off += 1 + n
			if n == 0 {
				return nil
			}
		}
	}
	if off > len(b) {
		return cut("global color table")
	}
	images := 0
	for off < len(b) {
		switch b[off] {
		case 0x3b: // trailer
			if images == 0 {
				return fmt.Errorf("%w: GIF has no image before its trailer", ErrCorrupt)
			}
			return nil
		case 0x21: // extension: a label, then sub-blocks
			off += 2
			if err := subBlocks("extension block"); err != nil {
				return err
			}
		case 0x2c: // image descriptor, local color table, LZW code size, data
			if off+10 > len(b) {
				return cut("image descriptor")
			}
			off += 10 + table(b[off+9])
			if off >= len(b) {
				return cut("local color table")
			}
			off++ // LZW minimum code size
			if err := subBlocks(fmt.Sprintf("image %d's data", images+1)); err != nil {
				return err
			}
			images++
		default:
			if images == 0 {
				return fmt.Errorf("%w: GIF block type 0x%02x before any image", ErrCorrupt, b[off])
			}
			return nil
		}
	}
	if images == 0 {
		return fmt.Errorf("%w: GIF ends after %d bytes before any image", ErrTruncated, len(b))
	}
	return nil
}

// tiffDims reads ImageWidth and ImageLength from the first IFD.
func tiffDims(b []byte) (int, int, bool, error) {
	var bo binary.ByteOrder = binary.LittleEndian
	if b[0] == 'M' {
		bo = binary.BigEndian
	}
	if len(b) < 8 {
		return 0, 0, false, fmt.Errorf("%w: TIFF header cut short", ErrTruncated)
	}
	ifd := int64(bo.Uint32(b[4:]))
	if ifd+2 > int64(len(b)) {
		return 0, 0, false, fmt.Errorf("%w: TIFF directory at byte %d is past the end (%d bytes)", ErrTruncated, ifd, len(b))
	}
	n := int64(bo.Uint16(b[ifd:]))
	w, h := -1, -1
	for i := range n {
		e := ifd + 2 + 12*i
		if e+12 > int64(len(b)) {
			return 0, 0, false, fmt.Errorf("%w: TIFF directory cut short", ErrTruncated)
		}
		tag, typ := bo.Uint16(b[e:]), bo.Uint16(b[e+2:])
		var v int
		switch typ {
		case 3: // SHORT
			v = int(bo.Uint16(b[e+8:]))
		case 4: // LONG
			v = int(bo.Uint32(b[e+8:]))
		default:
			continue
		}
		switch tag {
		case 256:
			w = v
		case 257:
			h = v
		}
	}
	if w < 0 || h < 0 {
		return 0, 0, false, nil
	}
	return w, h, true, nil
}

// pnmDims reads a P1-P6 header: magic, width, height, with # comments.
func pnmDims(b []byte) (int, int, bool, error) {
	i := 2
	var v [2]int
	for k := range v {
		for i < len(b) && (isSpace(b[i]) || b[i] == '#') {
			if b[i] == '#' {
				for i < len(b) && b[i] != '\n' {
					i++
				}
				continue
			}
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' && i-start < 10 {
			v[k] = v[k]*10 + int(b[i]-'0')
			i++
		}
		if i == start {
			if i >= len(b) {
				return 0, 0, false, fmt.Errorf("%w: PNM header cut short", ErrTruncated)
			}
			return 0, 0, false, fmt.Errorf("%w: PNM header has no size", ErrCorrupt)
		}
	}
	return v[0], v[1], true, nil
}
