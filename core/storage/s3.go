package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3Options configure s3://bucket/key names. Everything left empty comes
// from the AWS SDK for Go v2's defaults (config.LoadDefaultConfig): the
// AWS_* environment variables, the shared config and credentials files
// and their profiles, a web identity token file exchanged through STS,
// the ECS container credentials endpoint, EC2's instance metadata
// (IMDSv2), SSO and credential_process. Credentials that expire are
// refreshed before they do.
type S3Options struct {
	// Endpoint is the store's base URL (e.g. "http://127.0.0.1:9000" for
	// MinIO or another S3-compatible server); empty means
	// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the profile's, else AWS.
	Endpoint string
	// Region overrides AWS_REGION and the profile's (default us-east-1
	// when nothing names one).
	Region string
	// Profile picks a profile of the shared config and credentials files
	// instead of AWS_PROFILE's.
	Profile string
	// AccessKey and SecretKey (with SessionToken for temporary ones) are
	// static credentials, used instead of the SDK's chain.
	AccessKey, SecretKey string
	SessionToken         string
	// Anonymous sends unsigned requests (public buckets), skipping the
	// credential chain.
	Anonymous bool
	// VirtualHost addresses buckets as <bucket>.<endpoint host> rather
	// than <endpoint>/<bucket> when Endpoint is set; AWS itself is always
	// addressed that way.
	VirtualHost bool
}

// EnvSync, if set, copies the cloud SDKs' variables (SyncCloudEnv) of the
// process's current environment into Go's; New calls it, so that the SDK reads them as they
// were when the Client was made. libspdl sets it: Go copies the
// environment once, when the library loads, and a Python program may set
// AWS_PROFILE or AWS_ROLE_ARN after that.
var EnvSync func()

// s3Client is a Client's S3 service client, made on first use.
type s3Client struct {
	once sync.Once
	cl   *s3.Client
	err  error
}

func (c *Client) s3(ctx context.Context) (*s3.Client, error) {
	c.s3c.once.Do(func() { c.s3c.cl, c.s3c.err = newS3(ctx, c.o.S3, c.http) })
	return c.s3c.cl, c.s3c.err
}

func newS3(ctx context.Context, o S3Options, hc *http.Client) (*s3.Client, error) {
	// The SDK needs a client it can configure (AWS_CA_BUNDLE adds roots),
	// built with this Client's transport settings.
	base := hc.Transport.(*http.Transport)
	bc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxConnsPerHost = base.MaxConnsPerHost
		tr.MaxIdleConnsPerHost = base.MaxIdleConnsPerHost
		tr.MaxIdleConns = base.MaxIdleConns
		tr.ResponseHeaderTimeout = base.ResponseHeaderTimeout
		tr.DisableCompression = true
		if base.TLSClientConfig != nil {
			tr.TLSClientConfig = base.TLSClientConfig.Clone()
		}
	})
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(bc),
		// One layer of retries, Client.retry's, with its backoff and
		// per-attempt timeouts; the credential providers keep theirs.
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
	}
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	if o.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(o.Profile))
	}
	switch {
	case o.Anonymous:
		opts = append(opts, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	case o.AccessKey != "" || o.SecretKey != "":
		if o.AccessKey == "" || o.SecretKey == "" {
			return nil, errors.New("S3 settings: access_key and secret_key go together")
		}
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, o.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		// A custom endpoint (MinIO, versitygw) is path-addressed unless
		// asked otherwise; AWS picks virtual hosts itself.
		so.UsePathStyle = so.BaseEndpoint != nil && !o.VirtualHost
		// Data is read whole or in ranges and checked by TLS; the
		// per-object checksum would cost a CRC over every byte.
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}), nil
}

// splitS3 splits s3://bucket/key.
func splitS3(name string) (bucket, key string, err error) {
	rest := strings.TrimPrefix(name, "s3://")
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" || key == "" {
		return "", "", fmt.Errorf("%s: want s3://bucket/key", name)
	}
	return bucket, key, nil
}

// s3Attempt is attempt for an s3:// name: one GET (of n bytes at off when
// off >= 0) or HEAD through the SDK, whose raw HTTP response goes to
// handle as an http.Response's would.
func (c *Client) s3Attempt(ctx context.Context, name, method string, off, n int64, handle func(*http.Response, io.Reader) error) (int, error) {
	cl, err := c.s3(ctx)
	if err != nil {
		return 0, err
	}
	bucket, key, err := splitS3(name)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var meta middleware.Metadata
	var body io.ReadCloser
	switch method {
	case "HEAD":
		out, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
		if err != nil {
			return s3Failure(err, off, n)
		}
		meta = out.ResultMetadata
	default:
		in := &s3.GetObjectInput{Bucket: &bucket, Key: &key}
		if off >= 0 {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
		}
		out, err := cl.GetObject(ctx, in)
		if err != nil {
			return s3Failure(err, off, n)
		}
		meta, body = out.ResultMetadata, out.Body
		defer body.Close()
	}
	raw, ok := awsmiddleware.GetRawResponse(meta).(*smithyhttp.Response)
	if !ok || raw.Response == nil {
		return 0, errors.New("the AWS SDK returned no HTTP response")
	}
	resp := raw.Response
	if off >= 0 && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, ErrNoRanges
	}
	if body == nil {
		return resp.StatusCode, handle(resp, http.NoBody)
	}
	r := &stallReader{r: body, timeout: c.o.Timeout, cancel: cancel}
	defer r.stop()
	if err := handle(resp, r); err != nil {
		if r.stalled.Load() {
			err = fmt.Errorf("no data for %v: %w", c.o.Timeout, errStalled)
		}
		return resp.StatusCode, err
	}
	return resp.StatusCode, nil
}

// s3Open starts a GET of the whole object and returns its body, for
// Open's one-GET fallback.
func (c *Client) s3Open(ctx context.Context, name string) (io.ReadCloser, int, error) {
	cl, err := c.s3(ctx)
	if err != nil {
		return nil, 0, err
	}
	bucket, key, err := splitS3(name)
	if err != nil {
		return nil, 0, err
	}
	out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		status, err := s3Failure(err, -1, 0)
		return nil, status, err
	}
	return out.Body, http.StatusOK, nil
}

// s3Failure turns an SDK error into the status and error attempt returns:
// the HTTP status when the server answered, the S3 error code and message
// (never a credential), and ErrNotFound for a missing key or bucket.
func s3Failure(err error, off, n int64) (int, error) {
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var api smithy.APIError
	msg := ""
	if errors.As(err, &api) {
		msg = api.ErrorCode()
		if m := api.ErrorMessage(); m != "" && m != msg {
			msg += ": " + m
		}
	}
	switch {
	case status == http.StatusNotFound:
		if msg == "" {
			return status, ErrNotFound
		}
		return status, notFound{errors.New(msg)}
	case off >= 0 && status == http.StatusRequestedRangeNotSatisfiable:
		return status, statusError{fmt.Sprintf("range %d-%d is past the object's end", off, off+n-1)}
	case status != 0:
		if msg == "" {
			msg = "the server refused the request"
		}
		return status, statusError{msg}
	}
	// No answer: a transport error (retryable when it is one of those),
	// or the credential chain's own failure, which the SDK words.
	var oe *smithy.OperationError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return 0, unwrapURLError(err)
}

// listS3 pages through ListObjectsV2 for prefix (s3://bucket/keyprefix).
func (c *Client) listS3(ctx context.Context, prefix string) ([]Object, error) {
	rest := strings.TrimPrefix(prefix, "s3://")
	bucket, keyPrefix, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return nil, fmt.Errorf("%s: want s3://bucket/prefix", prefix)
	}
	cl, err := c.s3(ctx)
	if err != nil {
		return nil, &Error{URL: prefix, Attempts: 1, Err: err}
	}
	var out []Object
	var token *string
	for {
		var page *s3.ListObjectsV2Output
		err := c.retry(ctx, prefix, func() (int, error) {
			p, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &keyPrefix, ContinuationToken: token})
			if err != nil {
				return s3Failure(err, -1, 0)
			}
			page = p
			return http.StatusOK, nil
		})
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			out = append(out, Object{Name: "s3://" + bucket + "/" + aws.ToString(o.Key), Size: aws.ToInt64(o.Size)})
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil {
			return out, nil
		}
		token = page.NextContinuationToken
	}
}

// cloudEnv reports whether k is a variable the cloud SDKs read, which
// EnvSync copies.
func cloudEnv(k string) bool {
	switch k {
	case "STORAGE_EMULATOR_HOST",
		// Azure's managed identity endpoints (App Service, Functions,
		// Service Fabric, Arc, Cloud Shell), read by azidentity.
		"IDENTITY_ENDPOINT", "IDENTITY_HEADER", "IDENTITY_SERVER_THUMBPRINT", "IMDS_ENDPOINT", "MSI_ENDPOINT", "MSI_SECRET":
		return true
	}
	return strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "GOOGLE_") || strings.HasPrefix(k, "AZURE_")
}

// SyncCloudEnv sets Go's copies of the variables the cloud SDKs read
// (AWS_*, GOOGLE_*, AZURE_*, STORAGE_EMULATOR_HOST, the managed identity
// endpoints) to those of environ
// (KEY=VALUE entries), and unsets the ones environ lacks: what EnvSync
// implementations call with the C environment.
func SyncCloudEnv(environ []string) {
	want := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && cloudEnv(k) {
			want[k] = v
		}
	}
	for _, kv := range os.Environ() {
		if k, _, ok := strings.Cut(kv, "="); ok && cloudEnv(k) {
			if _, keep := want[k]; !keep {
				os.Unsetenv(k)
			}
		}
	}
	for k, v := range want {
		if os.Getenv(k) != v {
			os.Setenv(k, v)
		}
	}
}
