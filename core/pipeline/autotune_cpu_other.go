//go:build !unix

package pipeline

import "time"

// processCPU is unknown here: the tuner climbs without a first guess.
func processCPU() (time.Duration, bool) { return 0, false }
