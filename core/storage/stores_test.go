package storage_test

import (
	"bytes"
	"context"
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

	"github.com/spdl-go/spdl-go/core/storage"
)

// storeFiles makes the objects the object-store tests read: 1 KB, 5 KB
// under a name that needs escaping, 9 MB, and many one-byte objects under
// many/ (more than a listing page when many > 1000). With root set, it
// also writes them under root/bucket, for servers that serve a directory.
func storeFiles(t *testing.T, root string, many int) map[string][]byte {
	t.Helper()
	files := map[string][]byte{"a.bin": blob(1000), "dir/with space+plus=eq.bin": blob(5000), "big.bin": blob(9 << 20)}
	for i := range many {
		files[fmt.Sprintf("many/%04d.txt", i)] = []byte("x")
	}
	if root != "" {
		for name, b := range files {
			p := filepath.Join(root, "bucket", name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return files
}

// checkStore reads storeFiles' objects back through c under base (e.g.
// "s3://bucket/"): each whole, a range, a streamed Open, a missing object
// (a 404 that names it), and the listings of many/ and of a prefix that
// ends inside a name.
func checkStore(t *testing.T, c *storage.Client, base string, files map[string][]byte, many int) {
	t.Helper()
	ctx := context.Background()
	for name, want := range files {
		got, err := c.ReadAll(ctx, base+name)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ReadAll(%s%s): %d bytes, %v", base, name, len(got), err)
		}
	}
	odd := "dir/with space+plus=eq.bin"
	if b, err := c.ReadRange(ctx, base+odd, 100, 10); err != nil || !bytes.Equal(b, files[odd][100:110]) {
		t.Errorf("ReadRange: %v", err)
	}
	r, err := c.Open(ctx, base+"big.bin")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, files["big.bin"]) {
		t.Errorf("Open: %d bytes, %v", len(got), err)
	}
	r.Close()
	_, err = c.ReadAll(ctx, base+"nope.bin")
	if err == nil || !errors.Is(err, storage.ErrNotFound) || !strings.HasPrefix(err.Error(), base+"nope.bin: HTTP 404") {
		t.Errorf("missing object: %v", err)
	}
	objs, err := c.List(ctx, base+"many/")
	if err != nil || len(objs) != many || objs[0].Name != base+"many/0000.txt" || objs[many-1].Size != 1 {
		t.Errorf("List(many/): %d objects, %v", len(objs), err)
	}
	objs, err = c.List(ctx, base+"dir/with")
	if err != nil || len(objs) != 1 || objs[0].Name != base+odd {
		t.Errorf("List(dir/with): %v, %v", objs, err)
	}
}

// throttler starts a proxy to next that answers the first *n requests
// (n counts down; set it to arm the proxy) with 503, contentType and body
// and the extra headers, as a store under load does; it returns the
// proxy's URL and n.
func throttler(t *testing.T, next http.Handler, contentType, body string, headers ...string) (string, *atomic.Int64) {
	t.Helper()
	n := new(atomic.Int64)
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(-1) >= 0 {
			w.Header().Set("Content-Type", contentType)
			for i := 0; i+1 < len(headers); i += 2 {
				w.Header().Set(headers[i], headers[i+1])
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, body)
			return
		}
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(ps.Close)
	return ps.URL, n
}
