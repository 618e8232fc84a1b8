//go:build !linux

package img_test

import "time"

func cpuTime() time.Duration       { return 0 }
func threadCPUTime() time.Duration { return 0 }
