// Package img decodes images into uint8 (or uint16) (H, W, C) tensors in
// pooled C memory and transforms them, as native ops (registered in init; import
// the package for its side effect to make them available by name):
//
//	decode_image         encoded bytes or a path (str)  -> uint8 or uint16 (H, W, C)
//	resize               uint8 (H, W, C)                -> uint8 (h, w, C)
//	center_crop          uint8 (H, W, C)                -> uint8 (h, w, C)
//	random_resized_crop  uint8 (H, W, C)                -> uint8 (h, w, C)
//	hflip, random_hflip  uint8 (H, W, C)                -> uint8 (H, W, C)
//	normalize            uint8 (H, W, C)                -> float32 (C, H, W) or (H, W, C)
//
// C is 3 for mode "rgb" or "bgr", 1 for "gray" and 4 for "rgba". Every op takes key
// (default "image") and output_key (default: key) and transforms one field
// of an item, keeping the rest (see ops.Field): a plain value, element 0
// of a (data, label, ...) tuple or list, or a dict entry. Each op owns its
// input (on error it releases the whole item) and is safe for concurrent
// use.
//
// # decode_image
//
// Options (Python keyword arguments):
//
//	mode           "rgb" | "bgr" | "gray" | "rgba"    default "rgb"
//	dtype          "uint8" | "uint16"                 default "uint8"
//	max_pixels     int: refuse larger images          default 100_000_000
//	size           [h, w]: resize to exactly this     default None
//	short_side     int: resize so the shorter side is this (the other
//	               keeps the aspect ratio, truncated as torchvision's Resize(int))
//	interpolation  "bilinear" | "area" | "nearest"    default "bilinear"
//	crop           None | "center" | "random_resized" default None
//	crop_size      [h, w] or int (square)             required with crop
//	scale, ratio   [lo, hi] for "random_resized"      default [0.08, 1.0], [3/4, 4/3]
//	seed, rng_key  for "random_resized" (see Randomness)
//	name_key       dict key whose str names bytes in errors  default "path"
//
// The input is bytes (encoded image) or a str path (then read). The format
// comes from the magic bytes, never the file name: JPEG (FF D8 FF) is
// decoded by libjpeg-turbo's TurboJPEG API straight into tensor memory,
// or with a crop by its libjpeg API into a scratch window (one pooled
// decompressor per concurrent call; CMYK, lossless and 12-bit JPEGs go to
// FFmpeg); PNG, WebP, BMP, GIF (first frame), TIFF, PNM and
// whatever else FFmpeg's image probe recognises are decoded by libavcodec
// (the whole file is one packet; no demuxer, no Go callbacks) and
// converted exactly (packed RGB, gray, palette, 16-bit) or by libswscale
// (YUV and others). Alpha is kept by mode "rgba" only: the image's own
// (RGBA, gray+alpha, a palette's or WebP's alpha, 16-bit alpha rounded),
// 255 for images without one (JPEG, RGB, gray); "rgb", "bgr" and "gray"
// drop it (no compositing, as PIL's convert("RGB")). A resize filters
// alpha like the colour channels (no premultiplication, as torchvision on
// tensors; Pillow premultiplies).
//
// The resize and crop options run in the same call, computing only the
// output pixels: resize then crop (torchvision's Resize then CenterCrop)
// resamples just the crop window. With a crop, a JPEG is decoded only over
// the source window that the resampling reads (plus 4 pixels each side),
// with libjpeg's jpeg_crop_scanline (left edge snapped to an iMCU column)
// and jpeg_skip_scanlines, stopping after the window's last row; the
// output is identical to decoding the whole image. A JPEG that does not
// end with its end-of-image marker is decoded whole, so that truncation is
// reported whatever the crop; corruption after the window's last row goes
// unnoticed. Without a crop, and for progressive JPEGs (whose
// coefficients are all decoded first either way: a window was measured no
// faster), the whole image is decoded with TurboJPEG's tjDecompress2. When the output is at most 1/2, 1/4 or
// 1/8 of a JPEG in both dimensions, the JPEG is decoded at that reduced
// DCT size (libjpeg-turbo's scaling) and resized from there. Other DCT
// factors (3/8 ... 7/8) are not used: they decoded slower than a full-size
// decode. Decoding to YUV planes and scaling and converting with libswscale
// was measured too and was slower (see Costs). TJFLAG_FASTDCT is not used.
//
// Decompression bombs: the dimensions are read from the header before
// anything is allocated (JPEG, PNG, GIF, BMP, WebP, TIFF, PNM) and images
// over max_pixels, or with a zero dimension, fail; other formats are held
// to max_pixels by libavcodec's own check before it allocates a frame.
//
// Errors are *av.Error naming the input (the path; for bytes the dict
// entry under name_key if the item has one, else "<N bytes>") and wrap
// one of ErrEmpty, ErrNotImage, ErrUnsupported, ErrTruncated, ErrCorrupt,
// ErrTooLarge with the reason, e.g.
//
//	decode_image: decode "a/b.jpg": truncated image data: JPEG data ends early, while decoding (libjpeg: Premature end of JPEG file)
//	decode_image: decode "x.png": image too large: PNG of 60000x60000 = 3600000000 pixels is over max_pixels (100000000)
//
// A JPEG with recoverable corruption (libjpeg warnings other than
// truncation) decodes, as with PIL. A PNG that does not reach its IEND
// chunk, or a GIF whose blocks are cut short, fails as ErrTruncated
// (FFmpeg alone would return a partly filled picture).
//
// # 16-bit images
//
// dtype "uint8" rounds 16-bit samples (PNG, TIFF, PNM) to 8 bits, v * 255 /
// 65535 (PIL truncates to the high byte instead). dtype "uint16" keeps all
// 16 bits, and widens 8-bit images exactly (v * 257), so that a mixed set
// batches into one dtype; gray from 16-bit colour is the same luma at 16
// bits. uint16 takes crop "center" (pixels are copied) but no resize or
// random resized crop, which fail when the op is made (the resampling
// kernels are 8-bit): resize in floating point after decoding. The
// transform ops take uint8 only.
//
// # PNG
//
// PNG goes through FFmpeg's png decoder. Measured in C on 3-8 MP
// photo-like PNGs (one thread, CPU time, best of 3; FFmpeg 5.1, libpng
// 1.6.39, libspng 0.7.3, Debian's zlib 1.2.13): 8-bit RGB 45 / 69 / 77 ms
// (FFmpeg / libpng / libspng), RGBA 108 / 161 / 177, gray 31 / 27 / 32,
// 16-bit RGB 198 / 300 / 340, 16-bit gray 110 / 112 / 117. FFmpeg's
// filters are SIMD; libpng is faster only on 8-bit gray (by 13%), which
// does not pay for a second PNG decoder. zlib-ng (compat mode, a drop-in
// libz) made FFmpeg's decode 8-20% faster (37, 89, 28.5, 162, 99 ms).
// Inflating the IDAT stream alone (zlib / libdeflate) took 27 / 17 ms of
// the RGB file's 45, 68 / 41 of the RGBA's 108, but only 8.4 / 5.2 of the
// gray's 31 and 37 / 22 of the 16-bit gray's 110: FFmpeg's unfiltering is
// SIMD for 3 and 4 bytes per pixel only. A decoder of our own was
// measured (zlib inflate, specialised scalar unfiltering, conversion per
// row; pixel-identical to Pillow on these files): through decode_image
// with short side 256 + centre crop 224 (CPU ms per image, FFmpeg's
// decoder then it) gray 47.5 / 42.4, 16-bit gray 98 / 87, RGB 98 / 129,
// RGBA 138 / 174, 16-bit RGB 230 / 300: 12% faster on gray only, so it
// was not kept.
//
// JPEGs in mode "rgba" or dtype "uint16" are decoded by libjpeg-turbo as
// RGB (or gray) and then converted, over the output pixels only (after
// any resize and crop).
//
// # Transforms
//
//	resize               size [h, w] or short_side int; interpolation
//	center_crop          size [h, w] or int; fails, naming both sizes, if the image is smaller
//	random_resized_crop  size; scale [0.08, 1.0]; ratio [3/4, 4/3]; interpolation; seed; rng_key
//	hflip                (no options)
//	random_hflip         p (default 0.5); seed; rng_key
//	normalize            mean, std (one value per channel; default ImageNet's
//	                     [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
//	                     layout "chw" (default) | "hwc"
//
// Resampling is separable with precomputed fixed-point weights (Pillow's
// coefficients: antialiased, the filter widens by the scale factor when
// shrinking, so "bilinear" matches Pillow / torchvision antialias=True and
// "area" is area averaging). Weights sum exactly to one: a flat image stays
// exact, and an axis that is not resized is copied exactly. "nearest" picks
// the pixel under each output centre (Pillow's NEAREST). normalize returns
// float32((x/255 - mean) / std) computed in float64, exactly, through a
// per-channel table. random_resized_crop follows torchvision's
// RandomResizedCrop.get_params, including its fallback to a centre crop.
// The kernels are C compiled with -O3; on x86-64 Linux they are also built
// for x86-64-v3 (AVX2, FMA) and chosen at load time.
//
// # Randomness
//
// Random ops draw from a SplitMix64 stream that is a function of the op's
// seed (an int; without one, a random seed per op instance) and:
//
//   - without rng_key: a per-op counter of the items processed. The same
//     seed and the same item order repeat the same draws; successive epochs
//     continue the count and so draw differently. With concurrency > 1 the
//     order in which items reach the op, and so the draws, can vary.
//   - with rng_key="k": the value of the item's dict key "k" (int, float,
//     bool, str or bytes). Draws depend on (seed, op, that value) only,
//     whatever the order or concurrency, and repeat every epoch: put the
//     epoch in the key (or change the seed per epoch) to vary them. Items
//     that are not dicts, or lack the key, fail.
//
// Two random ops with the same seed draw independently (the op name is
// mixed in).
//
// # Costs
//
// Per core, on a shared 2-core AMD EPYC VM (AVX2), for photo-like 500x375
// JPEGs at quality 90 (4:2:0, ~65 KB), in images per CPU-second (go test
// -bench . ./core/media/img; wall-clock rates were the same when the
// machine was idle):
//
//	decode only, full size RGB (libjpeg-turbo)              800-885/s (1.1-1.25 ms)
//	decode + short side 256 + centre crop 224, fused        700-840/s; 0.92-0.94 of decode only
//	                                                        (BenchmarkFusedVsDecodeOnly, interleaved;
//	                                                        0.80-0.82 when it decoded the whole JPEG)
//	the same as decode, then resize, then crop              580-685/s
//	decode + random resized crop 224, fused                 770-855/s
//	decode_image op on a dict item (fused, as above)        640-880/s
//	FFmpeg's mjpeg decoder + libswscale, full size RGB      310-340/s
//	resize 375x500 -> 256x341 bilinear / area / nearest     0.43 / 0.39 / 0.17 ms
//	normalize 224x224x3 -> float32 CHW                      0.08-0.09 ms
//	hflip 224x224x3 / centre crop 224 of 375x500            0.06 ms / 8 µs
//
// Alternatives measured in C on the same images (CPU time per image):
// tjDecompress2 to RGB at scale 8/8 1.36 ms, 7/8 2.41, 6/8 1.93, 5/8
// 1.70, 4/8 1.13 (hence only 1/2, 1/4, 1/8); TJFLAG_FASTDCT 1.01 ms at
// 8/8 (not used: quality). tjDecompressToYUVPlanes 1.22 ms plus
// libswscale yuvj420p -> rgb24 341x256 bilinear 1.28 ms (fast_bilinear
// 0.76 ms) plus 0.16 ms for its context: 2.0-2.7 ms, against 1.36 ms +
// 0.31 ms for the crop-window resize here, so decode_image decodes to RGB
// and resizes with its own kernels.
//
// Each call allocates one or two pooled tensors (about 0.7 µs each) and a
// few hundred bytes of Go memory.
package img
