package storagetest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// AWSCreds serves, on loopback, the documented endpoints that hand out
// AWS credentials, as the AWS SDK calls them:
//
//   - EC2's instance metadata service, IMDSv2 (PUT /latest/api/token,
//     then GET /latest/meta-data/iam/security-credentials/[role] with the
//     token): point AWS_EC2_METADATA_SERVICE_ENDPOINT at URL;
//   - the ECS container credentials endpoint (GET ECSPath with the
//     Authorization token): AWS_CONTAINER_CREDENTIALS_FULL_URI = URL+ECSPath
//     and AWS_CONTAINER_AUTHORIZATION_TOKEN = ECSToken;
//   - STS's AssumeRole and AssumeRoleWithWebIdentity (POST /, form-encoded,
//     XML answers): AWS_ENDPOINT_URL_STS = URL;
//   - the SSO portal's GetRoleCredentials (GET /federation/credentials with
//     the SSOToken bearer token): AWS_ENDPOINT_URL_SSO = URL.
//
// Each hands out Key and Secret (which the S3 server under test accepts),
// expiring TTL after the request, without the session token real
// temporary credentials carry: versitygw refuses a session token with its
// root key, and these must pass its signature check. Hits counts the
// requests each endpoint answered with credentials.
type AWSCreds struct {
	URL         string
	Key, Secret string
	ECSPath     string
	ECSToken    string
	// WebIdentityToken is what AssumeRoleWithWebIdentity must be sent.
	WebIdentityToken string
	// SSOToken is the bearer token the SSO portal's GetRoleCredentials
	// (GET /federation/credentials) must be sent: AWS_ENDPOINT_URL_SSO = URL.
	SSOToken string

	mu   sync.Mutex
	ttl  time.Duration
	hits map[string]int
	srv  *http.Server
}

const imdsRole = "spdl-test-role"

// StartAWSCreds starts the endpoints; the server stops at the end of the
// test.
func StartAWSCreds(t testing.TB, key, secret string, ttl time.Duration) *AWSCreds {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &AWSCreds{URL: "http://" + l.Addr().String(), Key: key, Secret: secret, ECSPath: "/ecs/creds",
		ECSToken: "ecs-auth-token", WebIdentityToken: "web-identity-jwt", SSOToken: "sso-access-token", ttl: ttl, hits: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /latest/api/token", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds") == "" {
			http.Error(w, "missing token TTL", http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", r.Header.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds"))
		fmt.Fprint(w, "imds-session-token")
	})
	mux.HandleFunc("GET /latest/meta-data/iam/security-credentials/{role...}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Aws-Ec2-Metadata-Token") != "imds-session-token" {
			http.Error(w, "IMDSv2 token required", http.StatusUnauthorized)
			return
		}
		switch r.PathValue("role") {
		case "":
			fmt.Fprint(w, imdsRole)
		case imdsRole:
			exp, key, secret := a.hit("imds")
			json.NewEncoder(w).Encode(map[string]string{"Code": "Success", "Type": "AWS-HMAC", "LastUpdated": time.Now().UTC().Format(time.RFC3339),
				"AccessKeyId": key, "SecretAccessKey": secret, "Expiration": exp})
		default:
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("GET "+a.ECSPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != a.ECSToken {
			http.Error(w, `{"code":"AccessDenied","message":"bad token"}`, http.StatusForbidden)
			return
		}
		exp, key, secret := a.hit("ecs")
		json.NewEncoder(w).Encode(map[string]string{"AccessKeyId": key, "SecretAccessKey": secret, "Expiration": exp})
	})
	mux.HandleFunc("GET /federation/credentials", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Sso_bearer_token") != a.SSOToken {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"message":"bad SSO token"}`)
			return
		}
		if r.URL.Query().Get("account_id") == "" || r.URL.Query().Get("role_name") == "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"message":"account_id and role_name are required"}`)
			return
		}
		_, key, secret := a.hit("sso")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"roleCredentials": map[string]any{
			"accessKeyId": key, "secretAccessKey": secret, "expiration": time.Now().Add(a.ttl).UnixMilli()}})
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		action := r.PostForm.Get("Action")
		switch action {
		case "AssumeRole":
			if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
				stsError(w, http.StatusForbidden, "MissingAuthenticationToken", "AssumeRole must be signed")
				return
			}
		case "AssumeRoleWithWebIdentity":
			if r.PostForm.Get("WebIdentityToken") != a.WebIdentityToken {
				stsError(w, http.StatusBadRequest, "InvalidIdentityToken", "the token is not the one handed out")
				return
			}
		default:
			stsError(w, http.StatusBadRequest, "InvalidAction", "unsupported action "+action)
			return
		}
		if r.PostForm.Get("RoleArn") == "" || r.PostForm.Get("RoleSessionName") == "" {
			stsError(w, http.StatusBadRequest, "ValidationError", "RoleArn and RoleSessionName are required")
			return
		}
		exp, key, secret := a.hit(action)
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<%[1]sResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><%[1]sResult>
<Credentials><AccessKeyId>%[2]s</AccessKeyId><SecretAccessKey>%[3]s</SecretAccessKey><Expiration>%[4]s</Expiration></Credentials>
<AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/spdl/%[5]s</Arn><AssumedRoleId>AROATEST:%[5]s</AssumedRoleId></AssumedRoleUser>
</%[1]sResult><ResponseMetadata><RequestId>spdl-test</RequestId></ResponseMetadata></%[1]sResponse>`,
			action, key, secret, exp, r.PostForm.Get("RoleSessionName"))
	})
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go a.srv.Serve(l)
	t.Cleanup(func() { a.srv.Close() })
	return a
}

func stsError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>spdl-test</RequestId></ErrorResponse>`, code, msg)
}

// hit counts a hand-out and returns its expiry time and the key pair.
func (a *AWSCreds) hit(endpoint string) (exp, key, secret string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hits[endpoint]++
	return time.Now().Add(a.ttl).UTC().Format(time.RFC3339), a.Key, a.Secret
}

// Hits is how many times endpoint ("imds", "ecs", "sso", "AssumeRole",
// "AssumeRoleWithWebIdentity") handed out credentials.
func (a *AWSCreds) Hits(endpoint string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hits[endpoint]
}

// SetKeys changes the key pair handed out from now on (as a rotation
// does: the SDK caches signing keys by access key).
func (a *AWSCreds) SetKeys(key, secret string) {
	a.mu.Lock()
	a.Key, a.Secret = key, secret
	a.mu.Unlock()
}

// IsolateAWS points every place the AWS SDK looks for configuration at
// nothing (an empty HOME, no AWS_* variables, IMDS off), for a test that
// then sets what it means to test. It uses t.Setenv: not for parallel
// tests.
func IsolateAWS(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("AWS_CONFIG_FILE", home+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", home+"/credentials")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}
