package cuda_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/cuda"
)

// findRuntime looks where CUDA runtimes usually are, including the
// nvidia-cuda-runtime wheel that PyPI's torch installs.
func findRuntime() string {
	if p := os.Getenv("SPDL_GO_CUDART"); p != "" {
		return p
	}
	for _, pat := range []string{
		"/usr/local/cuda/lib64/libcudart.so*",
		"/usr/lib/x86_64-linux-gnu/libcudart.so*",
		"/root/.pyenv/versions/*/lib/python3*/site-packages/nvidia/*/lib/libcudart.so*",
		"/usr/local/lib/python3*/dist-packages/nvidia/*/lib/libcudart.so*",
		"/usr/lib/python3/dist-packages/nvidia/*/lib/libcudart.so*",
	} {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

func TestLoadNamesWhatItTried(t *testing.T) {
	t.Setenv("SPDL_GO_CUDART", "")
	_, err := cuda.Load("/nonexistent/libcudart.so.99")
	if err == nil {
		t.Skip("a CUDA runtime is on the linker's path; the failure message cannot be provoked")
	}
	for _, want := range []string{"/nonexistent/libcudart.so.99", "libcudart.so.12", "SPDL_GO_CUDART"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// Where a runtime is installed, it loads and answers; without a GPU (as on
// CI) the device query fails with a CUDA error, not a crash.
func TestLoadedRuntimeAnswers(t *testing.T) {
	path := findRuntime()
	if path == "" {
		t.Skip("no CUDA runtime library on this machine")
	}
	r, err := cuda.Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	rv, dv, err := r.Version()
	if err != nil || rv < 11000 {
		t.Fatalf("Version = %d, %d, %v", rv, dv, err)
	}
	n, err := r.DeviceCount()
	if err != nil {
		var ce *cuda.Error
		if !errors.Is(err, cuda.ErrNoDevice) || !errors.As(err, &ce) || ce.Code == 0 || ce.Msg == "" {
			t.Fatalf("DeviceCount error %v: want a CUDA error wrapping ErrNoDevice", err)
		}
		t.Logf("runtime %d, driver %d, %s: %v", rv, dv, path, err)
		return
	}
	t.Logf("runtime %d, driver %d: %d device(s)", rv, dv, n)
	if n == 0 {
		return
	}
	// A round trip through pinned memory and the device.
	const size = 1 << 20
	host, err := r.HostAlloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer r.FreeHost(host)
	src := unsafeBytes(host, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dev, err := r.Malloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free(dev)
	s, err := r.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	defer r.StreamDestroy(s)
	back, err := r.HostAlloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer r.FreeHost(back)
	if err := r.MemcpyAsync(dev, uintptr(host), size, cuda.HostToDevice, s); err != nil {
		t.Fatal(err)
	}
	if err := r.MemcpyAsync(uintptr(back), dev, size, cuda.DeviceToHost, s); err != nil {
		t.Fatal(err)
	}
	if err := r.Synchronize(s); err != nil {
		t.Fatal(err)
	}
	got := unsafeBytes(back, size)
	for i := range got {
		if got[i] != byte(i*7) {
			t.Fatalf("byte %d came back as %d", i, got[i])
		}
	}
}
