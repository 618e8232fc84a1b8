package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	gcs "cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// GCSOptions configure gs://bucket/object names. Left empty, the Google
// Cloud Storage client's defaults apply: Application Default Credentials
// (GOOGLE_APPLICATION_CREDENTIALS, gcloud's user credentials, the metadata
// server of GCE, GKE and Cloud Run), and STORAGE_EMULATOR_HOST for an
// emulator (which needs no credentials).
type GCSOptions struct {
	// Endpoint is the JSON API's base URL (e.g. an emulator's
	// "http://127.0.0.1:4443/storage/v1/"); empty means Google's, or
	// STORAGE_EMULATOR_HOST's.
	Endpoint string
	// CredentialsFile is a service account or external account JSON key
	// file, instead of Application Default Credentials.
	CredentialsFile string
	// Anonymous sends unauthenticated requests (public buckets).
	Anonymous bool
}

type gcsClient struct {
	once sync.Once
	cl   *gcs.Client
	err  error
}

func (c *Client) gcs(ctx context.Context) (*gcs.Client, error) {
	c.gcsc.once.Do(func() {
		// The client outlives the first caller's context.
		ctx := context.WithoutCancel(ctx)
		var opts []option.ClientOption
		o := c.o.GCS
		if o.Endpoint != "" {
			opts = append(opts, option.WithEndpoint(o.Endpoint))
		}
		switch {
		case o.Anonymous:
			opts = append(opts, option.WithoutAuthentication())
		case o.CredentialsFile != "":
			opts = append(opts, option.WithAuthCredentialsFile(option.ServiceAccount, o.CredentialsFile))
		}
		cl, err := gcs.NewClient(ctx, opts...)
		if err != nil {
			c.gcsc.err = fmt.Errorf("making the Google Cloud Storage client: %w", err)
			return
		}
		// One layer of retries: Client.retry's.
		cl.SetRetry(gcs.WithPolicy(gcs.RetryNever))
		c.gcsc.cl = cl
	})
	return c.gcsc.cl, c.gcsc.err
}

// splitGS splits gs://bucket/object.
func splitGS(name string) (bucket, object string, err error) {
	rest := strings.TrimPrefix(name, "gs://")
	bucket, object, _ = strings.Cut(rest, "/")
	if bucket == "" || object == "" {
		return "", "", fmt.Errorf("%s: want gs://bucket/object", name)
	}
	return bucket, object, nil
}

// gcsAttempt is attempt for a gs:// name: the object's attributes (HEAD),
// or a reader of n bytes at off (off >= 0) or of the whole object. handle
// gets a response that carries the status and length, as an HTTP server's
// would.
func (c *Client) gcsAttempt(ctx context.Context, name, method string, off, n int64, handle func(*http.Response, io.Reader) error) (int, error) {
	cl, err := c.gcs(ctx)
	if err != nil {
		return 0, err
	}
	bucket, object, err := splitGS(name)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	obj := cl.Bucket(bucket).Object(object)
	// The wait for the answer gets the timeout, as an HTTP response's
	// headers do; the body's reads get it again each (stallReader).
	t := time.AfterFunc(c.o.Timeout, cancel)
	if method == "HEAD" {
		attrs, err := obj.Attrs(ctx)
		t.Stop()
		if err != nil {
			return gcsFailure(ctx, err, off, n, c.o.Timeout)
		}
		return http.StatusOK, handle(&http.Response{StatusCode: http.StatusOK, ContentLength: attrs.Size, Body: http.NoBody}, http.NoBody)
	}
	if off < 0 {
		off, n = 0, -1
	}
	r, err := obj.NewRangeReader(ctx, off, n)
	if !t.Stop() && err == nil {
		r.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		return gcsFailure(ctx, err, off, n, c.o.Timeout)
	}
	defer r.Close()
	status := http.StatusOK
	if n >= 0 {
		status = http.StatusPartialContent
	}
	resp := &http.Response{StatusCode: status, ContentLength: r.Remain(), Body: r}
	body := &stallReader{r: r, timeout: c.o.Timeout, cancel: cancel}
	defer body.stop()
	if err := handle(resp, body); err != nil {
		if body.stalled.Load() {
			err = fmt.Errorf("no data for %v: %w", c.o.Timeout, errStalled)
		}
		return status, err
	}
	return status, nil
}

// gcsFailure turns a client error into attempt's status and error.
func gcsFailure(ctx context.Context, err error, off, n int64, timeout time.Duration) (int, error) {
	if errors.Is(err, gcs.ErrObjectNotExist) || errors.Is(err, gcs.ErrBucketNotExist) {
		return http.StatusNotFound, notFound{err}
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		msg := ge.Message
		if msg == "" {
			msg = http.StatusText(ge.Code)
		}
		if off >= 0 && n >= 0 && ge.Code == http.StatusRequestedRangeNotSatisfiable {
			msg = fmt.Sprintf("range %d-%d is past the object's end", off, off+n-1)
		}
		if ge.Code == http.StatusNotFound {
			return ge.Code, notFound{errors.New(msg)}
		}
		return ge.Code, statusError{msg}
	}
	if errors.Is(err, context.DeadlineExceeded) || (errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		return 0, fmt.Errorf("no answer in %v: %w", timeout, errStalled)
	}
	return 0, unwrapURLError(err)
}

// gcsOpen starts a read of the whole object, for Open's one-GET fallback.
func (c *Client) gcsOpen(ctx context.Context, name string) (io.ReadCloser, int, error) {
	cl, err := c.gcs(ctx)
	if err != nil {
		return nil, 0, err
	}
	bucket, object, err := splitGS(name)
	if err != nil {
		return nil, 0, err
	}
	r, err := cl.Bucket(bucket).Object(object).NewReader(ctx)
	if err != nil {
		status, err := gcsFailure(ctx, err, -1, 0, c.o.Timeout)
		return nil, status, err
	}
	return r, http.StatusOK, nil
}

// listGCS lists the objects under prefix (gs://bucket/objectprefix).
func (c *Client) listGCS(ctx context.Context, prefix string) ([]Object, error) {
	rest := strings.TrimPrefix(prefix, "gs://")
	bucket, objPrefix, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return nil, fmt.Errorf("%s: want gs://bucket/prefix", prefix)
	}
	cl, err := c.gcs(ctx)
	if err != nil {
		return nil, &Error{URL: prefix, Attempts: 1, Err: err}
	}
	// A fresh iterator after a failure resumes after the last name seen
	// (the client's own iterator repeats its error).
	var it *gcs.ObjectIterator
	last := ""
	var out []Object
	for {
		var attrs *gcs.ObjectAttrs
		err := c.retry(ctx, prefix, func() (int, error) {
			if it == nil {
				q := &gcs.Query{Prefix: objPrefix, Projection: gcs.ProjectionNoACL}
				if last != "" {
					q.StartOffset = last + "\x00"
				}
				it = cl.Bucket(bucket).Objects(ctx, q)
			}
			a, err := it.Next()
			if err == iterator.Done {
				attrs = nil
				return http.StatusOK, nil
			}
			if err != nil {
				it = nil
				return gcsFailure(ctx, err, -1, 0, c.o.Timeout)
			}
			attrs = a
			return http.StatusOK, nil
		})
		if err != nil {
			return nil, err
		}
		if attrs == nil {
			return out, nil
		}
		last = attrs.Name
		out = append(out, Object{Name: "gs://" + bucket + "/" + attrs.Name, Size: attrs.Size})
	}
}
