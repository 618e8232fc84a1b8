package storage

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The GET Object example of AWS's Signature Version 4 documentation
// ("Signature Calculations for the Authorization Header: Transferring
// Payload in a Single Chunk").
func TestSignV4MatchesAWSExample(t *testing.T) {
	req, _ := http.NewRequest("GET", "https://examplebucket.s3.amazonaws.com/test.txt", nil)
	req.Header.Set("Range", "bytes=0-9")
	o := S3Options{AccessKey: "AKIAIOSFODNN7EXAMPLE", SecretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", Region: "us-east-1"}
	if err := signV4(req, o, time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	want := "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, " +
		"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, " +
		"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
	if got := req.Header.Get("Authorization"); got != want {
		t.Errorf("Authorization\n%s\nwant\n%s", got, want)
	}
}

func TestS3ObjectURLs(t *testing.T) {
	for _, c := range []struct {
		o         S3Options
		name, url string
		err       string
	}{
		{S3Options{}, "s3://b/k/x.tar", "https://b.s3.us-east-1.amazonaws.com/k/x.tar", ""},
		{S3Options{Region: "eu-west-1"}, "s3://b/a b+c.jpg", "https://b.s3.eu-west-1.amazonaws.com/a%20b%2Bc.jpg", ""},
		{S3Options{Endpoint: "http://127.0.0.1:9000"}, "s3://bkt/d/e.tar", "http://127.0.0.1:9000/bkt/d/e.tar", ""},
		{S3Options{Endpoint: "http://minio:9000/", VirtualHost: true}, "s3://bkt/e", "http://bkt.minio:9000/e", ""},
		{S3Options{}, "s3://bucket-only", "", "want s3://bucket/key"},
		{S3Options{Endpoint: "localhost"}, "s3://b/k", "", "is not a URL"},
	} {
		got, err := c.o.objectURL(c.name)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.url {
			t.Errorf("%s with %+v = %q, %v; want %q", c.name, c.o, got, err, c.url)
		}
	}
}
