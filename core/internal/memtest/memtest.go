// Package memtest helps tests measure memory the Go runtime does not see:
// what the decoders allocate in C.
package memtest

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// PeakGrowth runs f and returns how much the process's peak resident set
// grew meanwhile, in bytes: the peak is reset first (/proc/self/clear_refs),
// so memory used before does not hide what f allocates. It skips the test
// where the peak cannot be read or reset (not Linux).
func PeakGrowth(tb testing.TB, f func()) int64 {
	tb.Helper()
	if runtime.GOOS != "linux" {
		tb.Skip("peak RSS is read from /proc")
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Skipf("cannot reset the peak RSS: %v", err)
	}
	before := PeakRSS(tb)
	f()
	return PeakRSS(tb) - before
}

// PeakRSS is the process's peak resident set (VmHWM) in bytes. A test of
// a size limit reads it before and after: a decoder that allocated its
// output before refusing it shows as growth.
func PeakRSS(tb testing.TB) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM in /proc/self/status")
	return 0
}
