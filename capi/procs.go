package main

import (
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

// One P more than the cores. Native stages spend most of their time in cgo
// calls (decoders), and while every P is in one, Go's sysmon takes a P back
// at each 20 µs tick and wakes a spinning thread, and the call's return
// then waits for a P. A spare P stops that: sysmon leaves a P in a call
// alone while another is idle. Measured on 2 cores (bench_compare.py, 2
// decode workers): workers 84% busy and 1,793 img/s at GOMAXPROCS=2; 98%
// busy and 1,899 img/s at 3. Go code itself is a small share of the work,
// so the extra P costs nothing. A GOMAXPROCS the user set is kept. Setting
// it stops the runtime from following a container's CPU limit if that
// changes while the process runs; Cores keeps the limit seen at start-up.
func init() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(pipeline.Cores + 1)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// gcPercent is GOGC unless the user set it. Tensors and decoders live in C
// memory, so the Go heap holds little that lives (stage queues, stats);
// what it churns through is items in transit, such as the bytes of each
// encoded image from a Python source (130 KB each). At Go's default of
// 100 the collector ran every 30 or so images and took 6% of the CPU of
// decoding them one thread at a time; at 400 its share is a quarter of
// that (decode_image CPU per image from bytes: 1.32-1.35 ms at 100,
// 1.20-1.22 ms at 400), and the heap peaks at five times what lives.
const gcPercent = 400
