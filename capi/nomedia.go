//go:build nomedia

package main

import "errors"

// A libspdl built with -tags nomedia links no FFmpeg or libjpeg (for
// machines that lack them, such as a GPU machine checking to_device); its
// media ops are not registered.
func probeMedia(string, []byte) (any, error) {
	return nil, errors.New("probe: this libspdl was built without media support (-tags nomedia)")
}
