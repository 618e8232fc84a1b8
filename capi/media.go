//go:build !nomedia

package main

import (
	"github.com/spdl-go/spdl-go/core/media/av"

	// The media ops register themselves.
	_ "github.com/spdl-go/spdl-go/core/media/audio"
	_ "github.com/spdl-go/spdl-go/core/media/img"
	_ "github.com/spdl-go/spdl-go/core/media/video"
)

// probeMedia describes a media file (path) or in-memory file (data,
// named path in errors).
func probeMedia(path string, data []byte) (any, error) {
	src := av.Source{Path: path}
	if data != nil {
		src = av.Source{Data: data, Name: path}
	}
	return av.Probe(src)
}
