package storage_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
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

// TestS3CredentialChain reads from versitygw with credentials from each
// source of the AWS SDK's default chain in turn, served by real endpoints
// on loopback (storagetest.AWSCreds: IMDSv2, ECS, STS), with nothing else
// configured. Each source must be the one used: the endpoint counts its
// hand-outs.
func TestS3CredentialChain(t *testing.T) {
	root := t.TempDir()
	want := blob(3000)
	os.MkdirAll(filepath.Join(root, "bucket"), 0o755)
	os.WriteFile(filepath.Join(root, "bucket", "obj.bin"), want, 0o644)
	srv := storagetest.StartS3(t, root)
	cases := []struct {
		name  string
		setup func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options
		hits  string // the endpoint that must have handed out credentials
	}{
		{"environment variables", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
			t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
			return storage.S3Options{}
		}, ""},
		{"shared credentials file, AWS_PROFILE", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			writeFile(t, os.Getenv("AWS_SHARED_CREDENTIALS_FILE"), "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[train]\naws_access_key_id = "+srv.AccessKey+"\naws_secret_access_key = "+srv.SecretKey+"\n")
			t.Setenv("AWS_PROFILE", "train")
			return storage.S3Options{}
		}, ""},
		{"shared credentials file, profile setting", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			writeFile(t, os.Getenv("AWS_SHARED_CREDENTIALS_FILE"), "[train]\naws_access_key_id = "+srv.AccessKey+"\naws_secret_access_key = "+srv.SecretKey+"\n")
			return storage.S3Options{Profile: "train"}
		}, ""},
		{"profile that assumes a role through STS", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			writeFile(t, os.Getenv("AWS_SHARED_CREDENTIALS_FILE"), "[base]\naws_access_key_id = base-key\naws_secret_access_key = base-secret\n")
			writeFile(t, os.Getenv("AWS_CONFIG_FILE"), "[profile reader]\nrole_arn = arn:aws:iam::123456789012:role/spdl\nsource_profile = base\n")
			t.Setenv("AWS_ENDPOINT_URL_STS", a.URL)
			return storage.S3Options{Profile: "reader"}
		}, "AssumeRole"},
		{"web identity token file (EKS IRSA)", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			tok := filepath.Join(home, "token")
			writeFile(t, tok, a.WebIdentityToken)
			t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/spdl")
			t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tok)
			t.Setenv("AWS_ENDPOINT_URL_STS", a.URL)
			return storage.S3Options{}
		}, "AssumeRoleWithWebIdentity"},
		{"credential_process", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			script := filepath.Join(home, "creds.sh")
			writeFile(t, script, "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \""+srv.AccessKey+"\", \"SecretAccessKey\": \""+srv.SecretKey+"\"}'\n")
			os.Chmod(script, 0o700)
			writeFile(t, os.Getenv("AWS_CONFIG_FILE"), "[profile proc]\ncredential_process = "+script+"\n")
			return storage.S3Options{Profile: "proc"}
		}, ""},
		{"SSO (a cached portal token)", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			const start = "https://spdl-test.awsapps.com/start"
			writeFile(t, os.Getenv("AWS_CONFIG_FILE"), "[profile sso]\nsso_start_url = "+start+"\nsso_region = us-east-1\nsso_account_id = 123456789012\nsso_role_name = reader\n")
			cache := filepath.Join(home, ".aws", "sso", "cache")
			os.MkdirAll(cache, 0o700)
			writeFile(t, filepath.Join(cache, fmt.Sprintf("%x.json", sha1.Sum([]byte(start)))),
				`{"accessToken": "`+a.SSOToken+`", "expiresAt": "`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`", "region": "us-east-1", "startUrl": "`+start+`"}`)
			t.Setenv("AWS_ENDPOINT_URL_SSO", a.URL)
			return storage.S3Options{Profile: "sso"}
		}, "sso"},
		{"ECS container credentials endpoint", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", a.URL+a.ECSPath)
			t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", a.ECSToken)
			return storage.S3Options{}
		}, "ecs"},
		{"EC2 instance metadata, IMDSv2", func(t *testing.T, a *storagetest.AWSCreds, home string) storage.S3Options {
			t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
			t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", a.URL)
			return storage.S3Options{}
		}, "imds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			storagetest.IsolateAWS(t)
			a := storagetest.StartAWSCreds(t, srv.AccessKey, srv.SecretKey, time.Hour)
			o := tc.setup(t, a, os.Getenv("HOME"))
			o.Endpoint, o.Region = srv.Endpoint, srv.Region
			c := mustClient(t, storage.Options{S3: o, Timeout: 5 * time.Second, Retries: -1})
			got, err := c.ReadAll(context.Background(), "s3://bucket/obj.bin")
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("ReadAll: %d bytes, %v", len(got), err)
			}
			if objs, err := c.List(context.Background(), "s3://bucket/"); err != nil || len(objs) != 1 {
				t.Errorf("List: %v, %v", objs, err)
			}
			if tc.hits != "" && a.Hits(tc.hits) == 0 {
				t.Errorf("the %s endpoint handed out no credentials", tc.hits)
			}
		})
	}
}

// TestS3CredentialsRefreshMidEpoch reads for longer than the credentials
// the ECS endpoint hands out last: they are refreshed before they expire
// and no read fails.
func TestS3CredentialsRefreshMidEpoch(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bucket"), 0o755)
	os.WriteFile(filepath.Join(root, "bucket", "obj.bin"), blob(100), 0o644)
	srv := storagetest.StartS3(t, root)
	storagetest.IsolateAWS(t)
	// The SDK refreshes ECS credentials in the last 5 minutes of their
	// lifetime, give or take; 5m3s leaves each hand-out a few seconds.
	a := storagetest.StartAWSCreds(t, srv.AccessKey, srv.SecretKey, 5*time.Minute+3*time.Second)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", a.URL+a.ECSPath)
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", a.ECSToken)
	c := mustClient(t, storage.Options{S3: storage.S3Options{Endpoint: srv.Endpoint, Region: srv.Region}, Timeout: 5 * time.Second, Retries: -1})
	ctx := context.Background()
	end := time.Now().Add(8 * time.Second)
	reads := 0
	for time.Now().Before(end) {
		if _, err := c.ReadAll(ctx, "s3://bucket/obj.bin"); err != nil {
			t.Fatalf("read %d, after %d credential hand-outs: %v", reads, a.Hits("ecs"), err)
		}
		reads++
		time.Sleep(20 * time.Millisecond)
	}
	if a.Hits("ecs") < 2 {
		t.Errorf("credentials handed out %d times over %d reads in 8 s; want them refreshed", a.Hits("ecs"), reads)
	}
	// Then the endpoint hands out keys the server does not know: once the
	// good ones run out, reads fail with the server's answer (versitygw's
	// is a 404, "XAdminUserNotFound"), naming the URL and never the secret.
	const bad = "a-wrong-secret-never-to-be-printed"
	a.SetKeys("AKIAROTATEDAWAY", bad)
	time.Sleep(4 * time.Second)
	_, err := c.ReadAll(ctx, "s3://bucket/obj.bin")
	var se *storage.Error
	if !errors.As(err, &se) || (se.Status != 403 && se.Status != 404) || !strings.HasPrefix(err.Error(), "s3://bucket/obj.bin: HTTP 40") {
		t.Errorf("read with keys the server does not know: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), bad) {
		t.Errorf("the error prints the secret: %v", err)
	}
}

// TestS3NoCredentials: nothing configured and no metadata service: the
// read fails fast with the SDK's account of the chain, naming the URL.
// Anonymous reads of the private bucket get the server's 403.
func TestS3NoCredentials(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bucket"), 0o755)
	os.WriteFile(filepath.Join(root, "bucket", "obj.bin"), blob(10), 0o644)
	srv := storagetest.StartS3(t, root)
	storagetest.IsolateAWS(t)
	c := mustClient(t, storage.Options{S3: storage.S3Options{Endpoint: srv.Endpoint}, Timeout: 2 * time.Second})
	start := time.Now()
	_, err := c.ReadAll(context.Background(), "s3://bucket/obj.bin")
	if err == nil || !strings.HasPrefix(err.Error(), "s3://bucket/obj.bin: ") || !strings.Contains(strings.ToLower(err.Error()), "credential") {
		t.Errorf("read with no credentials: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("failing took %v", d)
	}
	anon := mustClient(t, storage.Options{S3: storage.S3Options{Endpoint: srv.Endpoint, Anonymous: true}})
	if _, err := anon.ReadAll(context.Background(), "s3://bucket/obj.bin"); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Errorf("anonymous read of a private bucket: %v", err)
	}
	if _, err := storage.New(storage.Options{S3: storage.S3Options{Endpoint: srv.Endpoint, AccessKey: "only-the-key"}}); err != nil {
		t.Fatal(err)
	} else if _, err := mustClient(t, storage.Options{S3: storage.S3Options{Endpoint: srv.Endpoint, AccessKey: "only-the-key"}}).ReadAll(context.Background(), "s3://bucket/obj.bin"); err == nil || !strings.Contains(err.Error(), "access_key and secret_key go together") {
		t.Errorf("a key without its secret: %v", err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestS3Throttled puts a proxy in front of versitygw that answers the
// first requests with 503 SlowDown, as S3 does under load: reads are
// retried with backoff and succeed; with too few retries the error names
// the URL, the status and S3's code.
func TestS3Throttled(t *testing.T) {
	root := t.TempDir()
	want := blob(5000)
	os.MkdirAll(filepath.Join(root, "bucket"), 0o755)
	os.WriteFile(filepath.Join(root, "bucket", "obj.bin"), want, 0o644)
	srv := storagetest.StartS3(t, root)
	storagetest.IsolateAWS(t)
	target, _ := url.Parse(srv.Endpoint)
	proxyURL, throttle := throttler(t, httputil.NewSingleHostReverseProxy(target), "application/xml",
		`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
	s3o := storage.S3Options{Endpoint: proxyURL, Region: srv.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	ctx := context.Background()

	throttle.Store(2)
	c := mustClient(t, storage.Options{S3: s3o, Retries: 3, Backoff: 5 * time.Millisecond})
	if got, err := c.ReadAll(ctx, "s3://bucket/obj.bin"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAll after two SlowDowns: %d bytes, %v", len(got), err)
	}
	if n := throttle.Load(); n != -1 {
		t.Errorf("throttle counter %d: the retries did not go through the proxy as expected", n)
	}
	throttle.Store(5)
	c = mustClient(t, storage.Options{S3: s3o, Retries: 1, Backoff: 5 * time.Millisecond})
	_, err := c.ReadAll(ctx, "s3://bucket/obj.bin")
	var se *storage.Error
	if !errors.As(err, &se) || se.Status != 503 || se.Attempts != 2 || !strings.HasPrefix(err.Error(), "s3://bucket/obj.bin: HTTP 503") || !strings.Contains(err.Error(), "SlowDown") {
		t.Errorf("read while throttled: %v", err)
	}
}
