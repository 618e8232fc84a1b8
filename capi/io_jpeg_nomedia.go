//go:build nomedia

package main

import "errors"

// A nomedia build links no libjpeg-turbo; PNG still works.
func encodeJPEG([]byte, int, int, imageOptions) ([]byte, error) {
	return nil, errors.New("encode_image: this libspdl was built without media support (-tags nomedia); JPEG needs libjpeg-turbo")
}
