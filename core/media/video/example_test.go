package video_test

import (
	"context"
	"fmt"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
)

// Decode 4 frames evenly spaced over a 24-frame clip, resized.
func ExampleDecode() {
	x, err := video.Decode(context.Background(), av.Source{Path: "testdata/counter.mp4"},
		video.Options{NumFrames: 4, Height: 24, Width: 32, Threads: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer x.Release()
	fmt.Println(x.DType(), x.Shape())
	// Output: uint8 [4 24 32 3]
}
