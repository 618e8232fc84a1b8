package av

import (
	"testing"

	"github.com/asticode/go-astiav"
)

// TestFFIPointers checks that the C pointers ffi.go reads out of go-astiav's
// objects are theirs: fields read through them match go-astiav's getters.
func TestFFIPointers(t *testing.T) {
	in, err := Open(Source{Path: "testdata/clip.mp4"}, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for i, s := range in.FC.Streams() {
		if got := int(streamIndexC(s)); got != s.Index() || got != i {
			t.Fatalf("stream %d: index through the C pointer is %d, go-astiav says %d", i, got, s.Index())
		}
	}
	st, err := in.Stream(astiav.MediaTypeVideo)
	if err != nil {
		t.Fatal(err)
	}
	d, err := in.OpenDecoder(st, DecoderOptions{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := int(threadCountC(d.CC)); got != d.CC.ThreadCount() {
		t.Fatalf("thread count through the C pointer is %d, go-astiav says %d", got, d.CC.ThreadCount())
	}
	if AttachedPicture(st) {
		t.Error("a video stream is reported as an attached picture")
	}
	if ks := KeyframeTimestamps(st); len(ks) == 0 {
		t.Error("no keyframes in an MP4's index")
	}
}
