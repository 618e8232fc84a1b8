// Package shmtest runs a test with a shared-memory arena, as a worker
// process has one. The arena is process-wide and set once, so the test
// runs in a child test process and the others keep the plain pool.
package shmtest

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/spdl-go/spdl-go/core/tensor"
)

const envVar = "SPDL_SHM_TEST"

// InArena, in the test process, runs the calling top-level test again in a
// child test process, fails t if that fails, and returns -1: the caller
// returns then. In the child it makes a memfd of size bytes, gives it to
// tensor.UseSharedArena and returns it (closed when t ends).
func InArena(t *testing.T, size int64) int {
	t.Helper()
	if os.Getenv(envVar) != t.Name() {
		cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v")
		cmd.Env = append(os.Environ(), envVar+"="+t.Name())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the arena's test process: %v\n%s", err, out)
		}
		return -1
	}
	fd, err := unix.MemfdCreate("spdl-go-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if err := tensor.UseSharedArena(fd, size); err != nil {
		t.Fatal(err)
	}
	return fd
}
