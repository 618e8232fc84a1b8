// Package storage reads objects by name: local paths (and file:// URLs),
// http:// and https:// URLs, s3://bucket/key objects of any S3-compatible
// store (through the AWS SDK for Go v2, with its credential chain: s3.go)
// gs://bucket/object objects of Google Cloud Storage (its Go client, with
// Application Default Credentials: gcs.go) and az://container/blob blobs
// of Azure Blob Storage (azblob: azure.go). Remote reads retry with exponential backoff on
// server errors (5xx, 429), resets and timeouts; each attempt has a
// timeout, for the response headers and again between body reads, so a
// server that stalls fails the read instead of hanging it. Errors name the
// URL, and the HTTP status when there was one.
//
// Reads are plain blocking calls: a pipeline stage reading with
// concurrency 64 keeps 64 requests in flight, on goroutines that cost a
// few KiB each.
package storage

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configure a Client. The zero value works: defaults are noted.
type Options struct {
	// Timeout bounds each attempt's wait for response headers, and each
	// wait for more of the body (default 30s).
	Timeout time.Duration
	// Retries is how many times a failed attempt is retried (default 3;
	// negative means none).
	Retries int
	// Backoff is the wait before the first retry (default 200ms); it
	// doubles with each retry, up to 10s, with ±25% jitter.
	Backoff time.Duration
	// MaxConnsPerHost bounds connections to one server (default 256).
	MaxConnsPerHost int
	// CAFile is a PEM bundle of certificate authorities to trust for
	// https:// (a private object store's); empty means the system's
	// (which SSL_CERT_FILE may also name).
	CAFile string
	// S3 configures s3:// names (s3.go).
	S3 S3Options
	// GCS configures gs:// names (gcs.go).
	GCS GCSOptions
	// Azure configures az:// and abfs:// names (azure.go).
	Azure AzureOptions
}

// Client reads objects. It is safe for concurrent use.
type Client struct {
	o    Options
	http *http.Client
	s3c  s3Client
	gcsc gcsClient
	azc  azureClient
}

// New returns a Client; it fails only on an unreadable CAFile.
func New(o Options) (*Client, error) {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Retries == 0 {
		o.Retries = 3
	} else if o.Retries < 0 {
		o.Retries = 0
	}
	if o.Backoff <= 0 {
		o.Backoff = 200 * time.Millisecond
	}
	if o.MaxConnsPerHost <= 0 {
		o.MaxConnsPerHost = 256
	}
	if EnvSync != nil {
		EnvSync()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = o.MaxConnsPerHost
	tr.MaxIdleConnsPerHost = o.MaxConnsPerHost
	tr.MaxIdleConns = 4 * o.MaxConnsPerHost
	tr.ResponseHeaderTimeout = o.Timeout
	tr.DisableCompression = true // bytes as stored: Range offsets must mean the object's bytes
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("storage: CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("storage: CA bundle %s holds no PEM certificate", o.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &Client{o: o, http: &http.Client{Transport: tr}}, nil
}

// IsRemote reports whether name is an http(s)://, s3://, gs://, az:// or
// abfs(s):// URL.
func IsRemote(name string) bool {
	return strings.HasPrefix(name, "http://") || strings.HasPrefix(name, "https://") || strings.HasPrefix(name, "s3://") ||
		strings.HasPrefix(name, "gs://") || isAzure(name)
}

// localPath returns the file a local name refers to.
func localPath(name string) string {
	if p, ok := strings.CutPrefix(name, "file://"); ok {
		if u, err := url.PathUnescape(p); err == nil {
			return u
		}
		return p
	}
	return name
}

// Error is a failed remote read.
type Error struct {
	URL      string
	Status   int // the last HTTP status, 0 if no response came
	Attempts int
	Err      error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.URL)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d %s", e.Status, http.StatusText(e.Status))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ErrNotFound is wrapped by the error for a missing object (HTTP 404 or a
// missing local file).
var ErrNotFound = errors.New("not found")

// notFound keeps a missing file's own message and matches ErrNotFound.
type notFound struct{ error }

func (e notFound) Unwrap() []error { return []error{e.error, ErrNotFound} }

// ReadAll returns the whole object.
func (c *Client) ReadAll(ctx context.Context, name string) ([]byte, error) {
	if !IsRemote(name) {
		b, err := os.ReadFile(localPath(name))
		if errors.Is(err, os.ErrNotExist) {
			err = notFound{err}
		}
		return b, err
	}
	var out []byte
	err := c.do(ctx, name, "GET", -1, 0, func(resp *http.Response, body io.Reader) error {
		n := resp.ContentLength
		buf := make([]byte, 0, max(0, min(n, 64<<20)))
		b, err := readAllInto(buf, body)
		if err != nil {
			return err
		}
		if n >= 0 && int64(len(b)) != n {
			return fmt.Errorf("body has %d bytes, Content-Length said %d: %w", len(b), n, io.ErrUnexpectedEOF)
		}
		out = b
		return nil
	})
	return out, err
}

func readAllInto(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// Size returns the object's size in bytes.
func (c *Client) Size(ctx context.Context, name string) (int64, error) {
	if !IsRemote(name) {
		st, err := os.Stat(localPath(name))
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
	var size int64
	err := c.do(ctx, name, "HEAD", -1, 0, func(resp *http.Response, _ io.Reader) error {
		if resp.ContentLength < 0 {
			return errors.New("the server gave no Content-Length")
		}
		size = resp.ContentLength
		return nil
	})
	return size, err
}

// ReadRange returns n bytes at offset off (fewer at the object's end).
func (c *Client) ReadRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	if !IsRemote(name) {
		f, err := os.Open(localPath(name))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b := make([]byte, n)
		m, err := f.ReadAt(b, off)
		if err == io.EOF {
			err = nil
		}
		return b[:m], err
	}
	var out []byte
	err := c.do(ctx, name, "GET", off, n, func(resp *http.Response, body io.Reader) error {
		b, err := readAllInto(make([]byte, 0, n), body)
		if err != nil {
			return err
		}
		out = b
		return nil
	})
	return out, err
}

// do runs one request with retries. With off >= 0 it asks for n bytes at
// off and insists on a 206 answer. handle reads the response; an error it
// returns is retried if retryable (a body cut short, a stall).
func (c *Client) do(ctx context.Context, name, method string, off, n int64, handle func(*http.Response, io.Reader) error) error {
	return c.retry(ctx, name, func() (int, error) { return c.attempt(ctx, name, method, off, n, handle) })
}

func (c *Client) retry(ctx context.Context, name string, try func() (int, error)) error {
	e := &Error{URL: name}
	backoff := c.o.Backoff
	for attempt := 0; ; attempt++ {
		e.Attempts = attempt + 1
		status, err := try()
		e.Status, e.Err = status, err
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			e.Err = ctx.Err()
			return e
		}
		if attempt >= c.o.Retries || !retryable(status, err) {
			return e
		}
		d := time.Duration(float64(backoff) * (0.75 + 0.5*rand.Float64()))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			e.Err = ctx.Err()
			return e
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// statusError is an HTTP answer that is not what was asked for.
type statusError struct{ msg string }

func (s statusError) Error() string { return s.msg }

func (c *Client) attempt(ctx context.Context, name, method string, off, n int64, handle func(*http.Response, io.Reader) error) (int, error) {
	if strings.HasPrefix(name, "s3://") {
		return c.s3Attempt(ctx, name, method, off, n, handle)
	}
	if strings.HasPrefix(name, "gs://") {
		return c.gcsAttempt(ctx, name, method, off, n, handle)
	}
	if isAzure(name) {
		return c.azureAttempt(ctx, name, method, off, n, handle)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, name, nil)
	if err != nil {
		return 0, err
	}
	if off >= 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, unwrapURLError(err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return resp.StatusCode, ErrNotFound
	case off >= 0 && resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		return resp.StatusCode, statusError{fmt.Sprintf("range %d-%d is past the object's end", off, off+n-1)}
	case off >= 0 && resp.StatusCode == http.StatusOK:
		return resp.StatusCode, ErrNoRanges
	case resp.StatusCode/100 != 2:
		return resp.StatusCode, statusError{serverMessage(resp)}
	}
	// Each body read must make progress within the timeout.
	body := &stallReader{r: resp.Body, timeout: c.o.Timeout, cancel: cancel}
	defer body.stop()
	if err := handle(resp, body); err != nil {
		if body.stalled.Load() {
			err = fmt.Errorf("no data for %v: %w", c.o.Timeout, errStalled)
		}
		return resp.StatusCode, err
	}
	return resp.StatusCode, nil
}

func serverMessage(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	msg := strings.TrimSpace(string(b))
	if i := strings.Index(msg, "<Message>"); i >= 0 { // S3's XML errors
		if j := strings.Index(msg[i:], "</Message>"); j > 0 {
			msg = msg[i+len("<Message>") : i+j]
		}
	}
	if msg == "" || strings.HasPrefix(msg, "<html") || strings.HasPrefix(msg, "<!DOCTYPE") {
		return "the server refused the request"
	}
	return msg
}

var errStalled = errors.New("the server stalled")

// ErrNoRanges is the error of a range read that the server answered with
// the whole object (200 instead of 206).
var ErrNoRanges = errors.New("the server ignored the Range header (it must answer 206 for range reads)")

func retryable(status int, err error) bool {
	if status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout {
		return true
	}
	if status != 0 && status/100 != 2 {
		return false // 4xx: asking again gives the same answer
	}
	var ne net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errStalled) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		(errors.As(err, &ne) && ne.Timeout())
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// stallReader cancels its request when a Read waits longer than timeout.
type stallReader struct {
	r       io.Reader
	timeout time.Duration
	cancel  context.CancelFunc
	timer   *time.Timer
	stalled atomic.Bool
}

func (s *stallReader) Read(p []byte) (int, error) {
	if s.timer == nil {
		s.timer = time.AfterFunc(s.timeout, func() { s.stalled.Store(true); s.cancel() })
	} else {
		s.timer.Reset(s.timeout)
	}
	n, err := s.r.Read(p)
	s.timer.Stop()
	return n, err
}

func (s *stallReader) stop() {
	if s.timer != nil {
		s.timer.Stop()
	}
}

// Open streams the object from its start. For a remote object it reads
// 8 MiB range requests, so that a failure midway (a reset, a stall, a 5xx)
// costs one retried chunk. A server that answers no HEAD (403, 405, 501)
// or ignores ranges is read with one plain GET instead, which a failure
// midway ends.
func (c *Client) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if !IsRemote(name) {
		return os.Open(localPath(name))
	}
	size, err := c.Size(ctx, name)
	var se *Error
	if errors.As(err, &se) && (se.Status == http.StatusForbidden || se.Status == http.StatusMethodNotAllowed || se.Status == http.StatusNotImplemented) {
		return c.openGET(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	return &rangeStream{c: c, ctx: ctx, name: name, size: size}, nil
}

// openGET starts a plain GET and returns its body; the retries cover
// getting the response, not the body.
func (c *Client) openGET(ctx context.Context, name string) (io.ReadCloser, error) {
	var body io.ReadCloser
	err := c.retry(ctx, name, func() (int, error) {
		actx, cancel := context.WithCancel(ctx)
		if open := c.sdkOpen(name); open != nil {
			b, status, err := open(actx, name)
			if err != nil {
				cancel()
				return status, err
			}
			body = &getBody{stallReader: stallReader{r: b, timeout: c.o.Timeout, cancel: cancel}, body: b, name: name}
			return status, nil
		}
		req, err := http.NewRequestWithContext(actx, "GET", name, nil)
		if err != nil {
			cancel()
			return 0, err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			cancel()
			return 0, unwrapURLError(err)
		}
		if resp.StatusCode/100 != 2 {
			msg := serverMessage(resp)
			resp.Body.Close()
			cancel()
			if resp.StatusCode == http.StatusNotFound {
				return resp.StatusCode, ErrNotFound
			}
			return resp.StatusCode, statusError{msg}
		}
		body = &getBody{stallReader: stallReader{r: resp.Body, timeout: c.o.Timeout, cancel: cancel}, body: resp.Body, name: name}
		return resp.StatusCode, nil
	})
	return body, err
}

// getBody is a streamed response body whose reads each get the timeout.
type getBody struct {
	stallReader
	body io.Closer
	name string
}

func (g *getBody) Read(p []byte) (int, error) {
	n, err := g.stallReader.Read(p)
	if err != nil && err != io.EOF {
		if g.stalled.Load() {
			err = fmt.Errorf("no data for %v: %w", g.timeout, errStalled)
		}
		err = &Error{URL: g.name, Err: err}
	}
	return n, err
}

func (g *getBody) Close() error {
	g.stop()
	err := g.body.Close()
	g.cancel()
	return err
}

// rangeStream reads an object in chunks of range requests, so that a
// failure costs one chunk.
type rangeStream struct {
	c     *Client
	ctx   context.Context
	name  string
	size  int64
	off   int64
	buf   []byte
	plain io.ReadCloser // the server ignores ranges: one GET
}

const streamChunk = 8 << 20

func (s *rangeStream) Read(p []byte) (int, error) {
	if s.plain != nil {
		return s.plain.Read(p)
	}
	if len(s.buf) == 0 {
		if s.off >= s.size {
			return 0, io.EOF
		}
		b, err := s.c.ReadRange(s.ctx, s.name, s.off, min(streamChunk, s.size-s.off))
		if errors.Is(err, ErrNoRanges) && s.off == 0 {
			if s.plain, err = s.c.openGET(s.ctx, s.name); err != nil {
				return 0, err
			}
			return s.plain.Read(p)
		}
		if err != nil {
			return 0, err
		}
		if len(b) == 0 {
			return 0, &Error{URL: s.name, Err: fmt.Errorf("empty range at %d of %d bytes: %w", s.off, s.size, io.ErrUnexpectedEOF)}
		}
		s.buf, s.off = b, s.off+int64(len(b))
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

func (s *rangeStream) Close() error {
	s.buf = nil
	if s.plain != nil {
		return s.plain.Close()
	}
	return nil
}

// File is an object opened for random access: Parquet and Arrow IPC
// readers take it. Remote reads are range requests.
type File interface {
	io.ReaderAt
	io.ReadSeeker
	io.Closer
}

// OpenFile opens name for random access.
func (c *Client) OpenFile(ctx context.Context, name string) (File, error) {
	if !IsRemote(name) {
		return os.Open(localPath(name))
	}
	size, err := c.Size(ctx, name)
	if err != nil {
		return nil, err
	}
	return &remoteFile{c: c, ctx: ctx, name: name, size: size}, nil
}

type remoteFile struct {
	c    *Client
	ctx  context.Context
	name string
	size int64
	pos  int64
}

func (f *remoteFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= f.size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), f.size-off)
	b, err := f.c.ReadRange(f.ctx, f.name, off, want)
	n := copy(p, b)
	if err != nil {
		return n, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *remoteFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (f *remoteFile) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += f.pos
	case io.SeekEnd:
		off += f.size
	default:
		return 0, fmt.Errorf("seek: bad whence %d", whence)
	}
	if off < 0 {
		return 0, fmt.Errorf("seek: negative position %d", off)
	}
	f.pos = off
	return off, nil
}

func (f *remoteFile) Close() error { return nil }

// sdkOpen is the whole-object reader of a name an SDK serves, or nil for
// http(s).
func (c *Client) sdkOpen(name string) func(context.Context, string) (io.ReadCloser, int, error) {
	switch {
	case strings.HasPrefix(name, "s3://"):
		return c.s3Open
	case strings.HasPrefix(name, "gs://"):
		return c.gcsOpen
	case isAzure(name):
		return c.azureOpen
	}
	return nil
}
