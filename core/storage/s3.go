package storage

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
)

// S3Options configure s3://bucket/key names.
type S3Options struct {
	// Endpoint is the store's base URL (e.g. "http://127.0.0.1:9000" for
	// MinIO or another S3-compatible server); empty means AWS,
	// https://<bucket>.s3.<region>.amazonaws.com.
	Endpoint string
	// Region signs requests (default us-east-1).
	Region string
	// AccessKey and SecretKey sign requests with AWS Signature Version 4;
	// without them, requests are anonymous (public buckets).
	AccessKey, SecretKey string
	// SessionToken is sent with temporary credentials.
	SessionToken string
	// VirtualHost addresses buckets as <bucket>.<endpoint host> rather
	// than <endpoint>/<bucket>; AWS (no Endpoint) always does.
	VirtualHost bool
}

// S3FromEnv reads the variables the AWS tools read: AWS_ENDPOINT_URL_S3
// or AWS_ENDPOINT_URL, AWS_REGION or AWS_DEFAULT_REGION,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func S3FromEnv() S3Options {
	first := func(names ...string) string {
		for _, n := range names {
			if v := os.Getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	return S3Options{
		Endpoint:     first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
		Region:       first("AWS_REGION", "AWS_DEFAULT_REGION"),
		AccessKey:    os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretKey:    os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: os.Getenv("AWS_SESSION_TOKEN"),
	}
}

func (o S3Options) region() string {
	if o.Region == "" {
		return "us-east-1"
	}
	return o.Region
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

// objectURL maps s3://bucket/key to the HTTP URL of the object, and
// s3://bucket/?query to the bucket's URL (for listing).
func (o S3Options) objectURL(name string) (string, error) {
	query := ""
	if b, q, ok := strings.Cut(name, "/?"); ok {
		name, query = b+"/", "?"+q
	}
	bucket, key, err := splitS3(name)
	if err != nil && query == "" {
		return "", err
	}
	if query != "" {
		bucket, key = strings.TrimSuffix(strings.TrimPrefix(name, "s3://"), "/"), ""
	}
	path := "/" + uriEncode(key, false) + query
	if o.Endpoint == "" {
		return fmt.Sprintf("https://%s.s3.%s.amazonaws.com%s", bucket, o.region(), path), nil
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("S3 endpoint %q is not a URL like http://host:port", o.Endpoint)
	}
	if o.VirtualHost {
		return fmt.Sprintf("%s://%s.%s%s", u.Scheme, bucket, u.Host, path), nil
	}
	base := strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/")
	return base + "/" + uriEncode(bucket, false) + path, nil
}

// emptySHA256 is the hash of an empty payload (GET and HEAD send none).
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// sign adds AWS Signature Version 4 headers to a request for an s3://
// object, when credentials are set.
func (c *Client) sign(req *http.Request) error {
	o := c.o.S3
	if !isS3Request(req, o) || o.AccessKey == "" {
		return nil
	}
	return signV4(req, o, time.Now().UTC())
}

// isS3Request reports whether req was built from an s3:// name.
func isS3Request(req *http.Request, o S3Options) bool {
	if o.Endpoint == "" {
		return strings.HasSuffix(req.URL.Host, ".amazonaws.com")
	}
	u, err := url.Parse(o.Endpoint)
	return err == nil && (req.URL.Host == u.Host || strings.HasSuffix(req.URL.Host, "."+u.Host))
}

func signV4(req *http.Request, o S3Options, now time.Time) error {
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	req.Header.Set("x-amz-date", amzDate)
	req.Header.Set("x-amz-content-sha256", emptySHA256)
	if o.SessionToken != "" {
		req.Header.Set("x-amz-security-token", o.SessionToken)
	}
	host := req.URL.Host
	signed := map[string]string{"host": host}
	for k, v := range req.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-amz-") || lk == "range" {
			signed[lk] = strings.TrimSpace(strings.Join(v, ","))
		}
	}
	names := make([]string, 0, len(signed))
	for k := range signed {
		names = append(names, k)
	}
	sort.Strings(names)
	var canonHeaders strings.Builder
	for _, k := range names {
		canonHeaders.WriteString(k + ":" + signed[k] + "\n")
	}
	signedHeaders := strings.Join(names, ";")
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	canonical := strings.Join([]string{req.Method, path, canonicalQuery(req.URL), canonHeaders.String(), signedHeaders, emptySHA256}, "\n")
	scope := day + "/" + o.region() + "/s3/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hexSHA256(canonical)
	key := hmacSHA256([]byte("AWS4"+o.SecretKey), day)
	key = hmacSHA256(key, o.region())
	key = hmacSHA256(key, "s3")
	key = hmacSHA256(key, "aws4_request")
	sig := hex.EncodeToString(hmacSHA256(key, toSign))
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s", o.AccessKey, scope, signedHeaders, sig))
	return nil
}

func canonicalQuery(u *url.URL) string {
	q := u.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		vs := q[k]
		sort.Strings(vs)
		for _, v := range vs {
			parts = append(parts, uriEncode(k, true)+"="+uriEncode(v, true))
		}
	}
	return strings.Join(parts, "&")
}

// uriEncode escapes as SigV4 wants: unreserved characters stay, '/' stays
// unless encodeSlash, everything else becomes %XX (upper case).
func uriEncode(s string, encodeSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && !encodeSlash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func hexSHA256(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func hmacSHA256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}
