package video_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
)

// BenchmarkDatasetClips decodes every .mp4 under $SPDL_VIDEO_BENCH_DIR (for
// example the clips benchmarks/datasets.py makes) as bench_video.py does:
// 8 evenly spaced frames at 112x112, one clip at a time with
// $SPDL_VIDEO_BENCH_THREADS decoder threads (default 1). It reports the
// share of the clips' frames the decoder decoded.
func BenchmarkDatasetClips(b *testing.B) {
	dir := os.Getenv("SPDL_VIDEO_BENCH_DIR")
	if dir == "" {
		b.Skip("set SPDL_VIDEO_BENCH_DIR to a folder of .mp4 clips")
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*", "*.mp4"))
	if len(paths) == 0 {
		b.Skipf("no clips under %s", dir)
	}
	var clips [][]byte
	for _, p := range paths {
		clips = append(clips, mustRead(b, p))
	}
	o := video.Options{NumFrames: 8, Height: 112, Width: 112, Threads: 1}
	if n, err := strconv.Atoi(os.Getenv("SPDL_VIDEO_BENCH_THREADS")); err == nil {
		o.Threads = n
	}
	var decoded, total int64
	for b.Loop() {
		for i, data := range clips {
			x, n, err := video.DecodeCounting(context.Background(), av.Source{Data: data, Name: paths[i]}, o)
			if err != nil {
				b.Fatal(err)
			}
			x.Release()
			decoded += n
		}
	}
	for _, data := range clips {
		info, err := av.Probe(av.Source{Data: data})
		if err != nil {
			b.Fatal(err)
		}
		total += info.Streams[0].Frames
	}
	b.ReportMetric(float64(b.N*len(clips))/b.Elapsed().Seconds(), "clips/s")
	b.ReportMetric(float64(decoded)/float64(int64(b.N)*total), "decoded/frames")
}
