package storage_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/storage/storagetest"
)

// TestReadsFromGCS is TestReadsFromS3 against a Google Cloud Storage
// emulator (fake-gcs-server), reached through STORAGE_EMULATOR_HOST as the
// client's documentation says: whole objects, a range, a 9 MB stream, a
// listing past a page, a missing object and a missing bucket.
func TestReadsFromGCS(t *testing.T) {
	root := t.TempDir()
	files := storeFiles(t, root, 1100) // more than a page of the object list
	srv := storagetest.StartGCS(t, root)
	t.Setenv("STORAGE_EMULATOR_HOST", srv.Host)
	c := mustClient(t, storage.Options{Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond})
	ctx := context.Background()
	checkStore(t, c, "gs://bucket/", files, 1100)
	if n, err := c.Size(ctx, "gs://bucket/big.bin"); err != nil || n != 9<<20 {
		t.Errorf("Size: %d, %v", n, err)
	}
	f, err := c.OpenFile(ctx, "gs://bucket/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 100)
	if n, err := f.ReadAt(p, 5<<20); n != 100 || err != nil || !bytes.Equal(p, files["big.bin"][5<<20:5<<20+100]) {
		t.Errorf("ReadAt: %d, %v", n, err)
	}
	if _, err := c.List(ctx, "gs://nobucket/x"); err == nil || !strings.Contains(err.Error(), "gs://nobucket/x: HTTP 404") {
		t.Errorf("List of a missing bucket: %v", err)
	}
	if _, err := c.ReadAll(ctx, "gs://bucket-only"); err == nil || !strings.Contains(err.Error(), "want gs://bucket/object") {
		t.Errorf("a name without an object: %v", err)
	}
}

// TestGCSThrottled puts a proxy in front of the emulator that answers the
// first requests with 503, as GCS does under load: reads are retried (one
// layer, spdl-go's) and succeed; with too few retries the error names the
// URL and the status.
func TestGCSThrottled(t *testing.T) {
	root := t.TempDir()
	want := blob(4000)
	os.MkdirAll(filepath.Join(root, "bucket"), 0o755)
	os.WriteFile(filepath.Join(root, "bucket", "obj.bin"), want, 0o644)
	srv := storagetest.StartGCS(t, root)
	target, _ := url.Parse("http://" + srv.Host)
	// fake-gcs-server reads a Host other than its own as a bucket name
	// (virtual-hosted addressing): the proxy passes its own on.
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }}
	proxyURL, throttle := throttler(t, proxy, "application/json",
		`{"error": {"code": 503, "message": "We encountered an internal error. Please try again."}}`)
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(proxyURL, "http://"))
	ctx := context.Background()
	throttle.Store(2)
	c := mustClient(t, storage.Options{Retries: 3, Backoff: 5 * time.Millisecond})
	if got, err := c.ReadAll(ctx, "gs://bucket/obj.bin"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAll after two 503s: %d bytes, %v", len(got), err)
	}
	if n := throttle.Load(); n != -1 {
		t.Errorf("throttle counter %d: the client retried on its own, or not through the proxy", n)
	}
	throttle.Store(5)
	c = mustClient(t, storage.Options{Retries: 1, Backoff: 5 * time.Millisecond})
	_, err := c.ReadAll(ctx, "gs://bucket/obj.bin")
	var se *storage.Error
	if !errors.As(err, &se) || se.Status != 503 || se.Attempts != 2 || !strings.HasPrefix(err.Error(), "gs://bucket/obj.bin: HTTP 503") {
		t.Errorf("read while throttled: %v", err)
	}
}

// TestGCSBadCredentials: a credentials file that does not exist fails each
// read at once with the client's reason, naming the URL.
func TestGCSBadCredentials(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	os.Unsetenv("STORAGE_EMULATOR_HOST")
	missing := filepath.Join(t.TempDir(), "nope.json")
	for _, o := range []storage.GCSOptions{{CredentialsFile: missing}} {
		c := mustClient(t, storage.Options{GCS: o})
		start := time.Now()
		_, err := c.ReadAll(context.Background(), "gs://bucket/obj.bin")
		if err == nil || !strings.HasPrefix(err.Error(), "gs://bucket/obj.bin: ") || !strings.Contains(err.Error(), "nope.json") {
			t.Errorf("%+v: %v", o, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("failing took %v", d)
		}
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", missing)
	c := mustClient(t, storage.Options{})
	if _, err := c.List(context.Background(), "gs://bucket/"); err == nil || !strings.Contains(err.Error(), "nope.json") {
		t.Errorf("GOOGLE_APPLICATION_CREDENTIALS naming a missing file: %v", err)
	}
}
