//go:build unix

package pipeline

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the whole process has used (user + system,
// all threads, cgo and foreign threads included): the tuner's measure of
// how many cores are left idle.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
