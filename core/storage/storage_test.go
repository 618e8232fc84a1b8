package storage_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/storage/storagetest"
)

func blob(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + i/256)
	}
	return b
}

// A served directory: small, 1 MiB and 20 MiB files.
func servedDir(t *testing.T) (string, map[string][]byte) {
	dir := t.TempDir()
	files := map[string][]byte{"a.bin": blob(1000), "sub/b.bin": blob(1 << 20), "big.bin": blob(20 << 20), "empty.bin": nil}
	for name, b := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

func TestReadsFromNginx(t *testing.T) {
	dir, files := servedDir(t)
	srv := storagetest.StartNginx(t, dir, 4096)
	c := mustClient(t, storage.Options{Timeout: 5 * time.Second})
	ctx := context.Background()
	for name, want := range files {
		for _, url := range []string{srv.URL + "/" + name, filepath.Join(dir, name), "file://" + filepath.Join(dir, name)} {
			got, err := c.ReadAll(ctx, url)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("ReadAll(%s): %d bytes, %v; want %d bytes", url, len(got), err, len(want))
			}
		}
	}
	url := srv.URL + "/sub/b.bin"
	if n, err := c.Size(ctx, url); n != 1<<20 || err != nil {
		t.Errorf("Size = %d, %v", n, err)
	}
	if b, err := c.ReadRange(ctx, url, 1000, 50); err != nil || !bytes.Equal(b, files["sub/b.bin"][1000:1050]) {
		t.Errorf("ReadRange: %v", err)
	}
	f, err := c.OpenFile(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tail := make([]byte, 100)
	if n, err := f.ReadAt(tail, 1<<20-60); n != 60 || err != io.EOF || !bytes.Equal(tail[:60], files["sub/b.bin"][1<<20-60:]) {
		t.Errorf("ReadAt past the end: %d, %v", n, err)
	}
	// Streams in chunks of range requests.
	r, err := c.Open(ctx, srv.URL+"/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, files["big.bin"]) {
		t.Errorf("Open/ReadAll: %d bytes, %v", len(got), err)
	}
}

func TestNginxErrorsNameTheURL(t *testing.T) {
	dir, _ := servedDir(t)
	srv := storagetest.StartNginx(t, dir, 4096)
	c := mustClient(t, storage.Options{Timeout: 2 * time.Second, Backoff: 10 * time.Millisecond})
	url := srv.URL + "/missing.jpg"
	_, err := c.ReadAll(context.Background(), url)
	var se *storage.Error
	if !errors.As(err, &se) || se.Status != 404 || se.Attempts != 1 || !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("err = %v; want a 404 storage.Error after 1 attempt", err)
	}
	if want := url + ": HTTP 404 Not Found: not found"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	// A stopped server: refused connections are retried, then fail.
	srv.Stop()
	start := time.Now()
	_, err = c.ReadAll(context.Background(), srv.URL+"/a.bin")
	if err == nil || !strings.Contains(err.Error(), srv.URL+"/a.bin: ") || !strings.Contains(err.Error(), "connection refused") ||
		!strings.Contains(err.Error(), "(after 4 attempts)") {
		t.Errorf("stopped server: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("retries took %v", time.Since(start))
	}
}

// Timeouts bound waiting, not transfers: a response throttled to 256 KiB/s
// takes seconds but never waits a whole timeout for more data.
func TestSlowResponsesFinish(t *testing.T) {
	dir, files := servedDir(t)
	srv := storagetest.StartNginx(t, dir, 256)
	c := mustClient(t, storage.Options{Timeout: 500 * time.Millisecond, Retries: -1})
	start := time.Now()
	got, err := c.ReadAll(context.Background(), srv.URL+"/slow/sub/b.bin")
	if err != nil || !bytes.Equal(got, files["sub/b.bin"]) {
		t.Fatalf("slow read: %d bytes, %v", len(got), err)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("1 MiB at 256 KiB/s took only %v: not throttled", d)
	}
}

// The retry policy against a server that misbehaves on purpose.
func TestRetries(t *testing.T) {
	payload := blob(100000)
	var calls atomic.Int64
	behaviours := map[string]func(w http.ResponseWriter, r *http.Request, n int64){
		"503 twice": func(w http.ResponseWriter, r *http.Request, n int64) {
			if n <= 2 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			w.Write(payload)
		},
		"always 503": func(w http.ResponseWriter, r *http.Request, n int64) {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		},
		"403": func(w http.ResponseWriter, r *http.Request, n int64) { http.Error(w, "denied", http.StatusForbidden) },
		"reset mid-body once": func(w http.ResponseWriter, r *http.Request, n int64) {
			if n == 1 {
				w.Header().Set("Content-Length", "100000")
				w.WriteHeader(200)
				w.Write(payload[:1000])
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
				return
			}
			w.Write(payload)
		},
		"stall": func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Content-Length", "100000")
			w.WriteHeader(200)
			w.Write(payload[:10])
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		},
		"ignores range": func(w http.ResponseWriter, r *http.Request, n int64) { w.Write(payload) },
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		behaviours[strings.TrimPrefix(r.URL.Path, "/")](w, r, calls.Add(1))
	}))
	defer srv.Close()
	c := mustClient(t, storage.Options{Timeout: 300 * time.Millisecond, Retries: 3, Backoff: 5 * time.Millisecond})
	cases := []struct {
		path    string
		ranged  bool
		calls   int64
		wantErr string
	}{
		{"503 twice", false, 3, ""},
		{"always 503", false, 4, "HTTP 503 Service Unavailable: busy (after 4 attempts)"},
		{"403", false, 1, "HTTP 403 Forbidden: denied"},
		{"reset mid-body once", false, 2, ""},
		{"stall", false, 4, "no data for 300ms: the server stalled (after 4 attempts)"},
		{"ignores range", true, 1, "the server ignored the Range header"},
	}
	for _, c2 := range cases {
		t.Run(c2.path, func(t *testing.T) {
			calls.Store(0)
			url := srv.URL + "/" + strings.ReplaceAll(c2.path, " ", "%20")
			var got []byte
			var err error
			if c2.ranged {
				got, err = c.ReadRange(context.Background(), url, 5, 10)
			} else {
				got, err = c.ReadAll(context.Background(), url)
			}
			if calls.Load() != c2.calls {
				t.Errorf("%d requests, want %d", calls.Load(), c2.calls)
			}
			if c2.wantErr == "" {
				if err != nil || !bytes.Equal(got, payload) {
					t.Errorf("got %d bytes, %v", len(got), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c2.wantErr) || !strings.HasPrefix(err.Error(), url) {
				t.Errorf("err = %v, want %q naming %s", err, c2.wantErr, url)
			}
		})
	}
}

func TestReadsFromS3(t *testing.T) {
	root := t.TempDir()
	files := storeFiles(t, root, 1100) // more than a ListObjectsV2 page
	srv := storagetest.StartS3(t, root)
	s3 := storage.S3Options{Endpoint: srv.Endpoint, Region: srv.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	c := mustClient(t, storage.Options{S3: s3, Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond})
	ctx := context.Background()
	checkStore(t, c, "s3://bucket/", files, 1100)
	if _, err := c.List(ctx, "s3://nobucket/x"); err == nil || !strings.Contains(err.Error(), "s3://nobucket/x: HTTP 404") {
		t.Errorf("List of a missing bucket: %v", err)
	}
	bad := mustClient(t, storage.Options{S3: storage.S3Options{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: "wrong"}})
	_, err := bad.ReadAll(ctx, "s3://bucket/a.bin")
	var se *storage.Error
	if !errors.As(err, &se) || se.Status != 403 || se.Attempts != 1 {
		t.Errorf("wrong secret: %v", err)
	}
	anon := mustClient(t, storage.Options{S3: storage.S3Options{Endpoint: srv.Endpoint, Anonymous: true}})
	if _, err := anon.ReadAll(ctx, "s3://bucket/a.bin"); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Errorf("anonymous read of a private bucket: %v", err)
	}
}

func mustClient(t *testing.T, o storage.Options) *storage.Client {
	t.Helper()
	c, err := storage.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// HTTPS with the server's certificate trusted through CAFile; without it,
// the error names the URL and the certificate problem.
func TestHTTPSWithCAFile(t *testing.T) {
	payload := blob(5000)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	cert := srv.Certificate()
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	url := srv.URL + "/obj"
	got, err := mustClient(t, storage.Options{CAFile: ca}).ReadAll(context.Background(), url)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("with the CA: %d bytes, %v", len(got), err)
	}
	_, err = mustClient(t, storage.Options{Retries: -1}).ReadAll(context.Background(), url)
	if err == nil || !strings.HasPrefix(err.Error(), url) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v", err)
	}
	if _, err := storage.New(storage.Options{CAFile: filepath.Join(t.TempDir(), "none.pem")}); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Errorf("missing CA file: %v", err)
	}
}

// Servers without HEAD or without ranges are streamed with one GET.
func TestOpenFallsBackToOneGET(t *testing.T) {
	payload := blob(300000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/nohead" && r.Method == "HEAD":
			http.Error(w, "no", http.StatusMethodNotAllowed)
		case r.URL.Path == "/noranges":
			w.Header().Set("Content-Length", fmt.Sprint(len(payload)))
			if r.Method == "GET" {
				w.Write(payload) // a 200 with the whole object, whatever the Range
			}
		default:
			http.ServeContent(w, r, "x", time.Time{}, bytes.NewReader(payload))
		}
	}))
	defer srv.Close()
	c := mustClient(t, storage.Options{Timeout: 2 * time.Second})
	for _, path := range []string{"/nohead", "/noranges", "/normal"} {
		r, err := c.Open(context.Background(), srv.URL+path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, payload) {
			t.Errorf("%s: %d bytes, %v", path, len(got), err)
		}
	}
}
