package storage_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/storage/storagetest"
)

// azureData uploads blobs to the emulator: a private container "data"
// and a public one "open".
func azureData(t *testing.T, a *storagetest.Azurite, files map[string][]byte) {
	t.Helper()
	var o *azblob.ClientOptions
	if a.CAFile != "" {
		pemBytes, err := os.ReadFile(a.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pemBytes)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		o = &azblob.ClientOptions{}
		o.Transport = &http.Client{Transport: tr}
	}
	cl, err := azblob.NewClientFromConnectionString(a.ConnectionString(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cl.CreateContainer(ctx, "data", nil); err != nil {
		t.Fatal(err)
	}
	public := container.PublicAccessTypeContainer
	if _, err := cl.CreateContainer(ctx, "open", &azblob.CreateContainerOptions{Access: &public}); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		for _, c := range []string{"data", "open"} {
			if _, err := cl.UploadBuffer(ctx, c, name, b, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestReadsFromAzure is TestReadsFromS3 against Azurite, with credentials
// from each source in turn: a connection string (setting and
// AZURE_STORAGE_CONNECTION_STRING), the account key (setting and
// AZURE_STORAGE_ACCOUNT/AZURE_STORAGE_KEY), a SAS token, and anonymous
// reads of a public container; abfs:// names too.
func TestReadsFromAzure(t *testing.T) {
	a := storagetest.StartAzurite(t)
	files := storeFiles(t, "", 30)
	azureData(t, a, files)
	cred, err := azblob.NewSharedKeyCredential(a.Account, a.AccountKey)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := sas.BlobSignatureValues{Protocol: sas.ProtocolHTTPSandHTTP, ExpiryTime: time.Now().Add(time.Hour), ContainerName: "data",
		Permissions: (&sas.ContainerPermissions{Read: true, List: true}).String()}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		o         storage.AzureOptions
		env       map[string]string
		container string
	}{
		{"connection string setting", storage.AzureOptions{ConnectionString: a.ConnectionString()}, nil, "data"},
		{"AZURE_STORAGE_CONNECTION_STRING", storage.AzureOptions{}, map[string]string{"AZURE_STORAGE_CONNECTION_STRING": a.ConnectionString()}, "data"},
		{"account key setting", storage.AzureOptions{Account: a.Account, Endpoint: a.Endpoint, AccountKey: a.AccountKey}, nil, "data"},
		{"AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY", storage.AzureOptions{Endpoint: a.Endpoint},
			map[string]string{"AZURE_STORAGE_ACCOUNT": a.Account, "AZURE_STORAGE_KEY": a.AccountKey}, "data"},
		{"SAS token", storage.AzureOptions{Account: a.Account, Endpoint: a.Endpoint, SASToken: qp.Encode()}, nil, "data"},
		{"anonymous, public container", storage.AzureOptions{Account: a.Account, Endpoint: a.Endpoint, Anonymous: true}, nil, "open"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"} {
				t.Setenv(k, tc.env[k])
				if tc.env[k] == "" {
					os.Unsetenv(k)
				}
			}
			c := mustClient(t, storage.Options{Azure: tc.o, Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond})
			checkStore(t, c, "az://"+tc.container+"/", files, 30)
		})
	}
	t.Run("abfs name", func(t *testing.T) {
		c := mustClient(t, storage.Options{Azure: storage.AzureOptions{Endpoint: a.Endpoint, AccountKey: a.AccountKey}})
		got, err := c.ReadAll(ctx, "abfs://data@"+a.Account+".dfs.core.windows.net/a.bin")
		if err != nil || !bytes.Equal(got, files["a.bin"]) {
			t.Errorf("abfs read: %d bytes, %v", len(got), err)
		}
	})
	t.Run("failures", func(t *testing.T) {
		wrong := mustClient(t, storage.Options{Azure: storage.AzureOptions{Account: a.Account, Endpoint: a.Endpoint, AccountKey: "d3Jvbmc="}})
		_, err := wrong.ReadAll(ctx, "az://data/a.bin")
		var se *storage.Error
		if !errors.As(err, &se) || se.Status != 403 || se.Attempts != 1 || !strings.HasPrefix(err.Error(), "az://data/a.bin: HTTP 403") || strings.Contains(err.Error(), "d3Jvbmc=") {
			t.Errorf("wrong key: %v", err)
		}
		anon := mustClient(t, storage.Options{Azure: storage.AzureOptions{Account: a.Account, Endpoint: a.Endpoint, Anonymous: true}})
		if _, err := anon.ReadAll(ctx, "az://data/a.bin"); err == nil || !strings.Contains(err.Error(), "HTTP 404") && !strings.Contains(err.Error(), "HTTP 403") {
			t.Errorf("anonymous read of a private container: %v", err)
		}
		ok := mustClient(t, storage.Options{Azure: storage.AzureOptions{ConnectionString: a.ConnectionString()}})
		if _, err := ok.List(ctx, "az://nocontainer/x"); err == nil || !strings.HasPrefix(err.Error(), "az://nocontainer/x: HTTP 404") {
			t.Errorf("List of a missing container: %v", err)
		}
		none := mustClient(t, storage.Options{})
		t.Setenv("AZURE_STORAGE_ACCOUNT", "")
		os.Unsetenv("AZURE_STORAGE_ACCOUNT")
		t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
		os.Unsetenv("AZURE_STORAGE_CONNECTION_STRING")
		if _, err := none.ReadAll(ctx, "az://data/a.bin"); err == nil || !strings.Contains(err.Error(), "no Azure storage account") {
			t.Errorf("no account: %v", err)
		}
	})
}

// TestAzureThrottled puts a proxy in front of Azurite that answers the
// first requests with 503 ServerBusy, as Blob Storage does past an
// account's limits: reads are retried with backoff and succeed; with too
// few retries the error names the URL, the status and the service's code.
// An expired SAS fails with 403 and never shows the token.
func TestAzureThrottled(t *testing.T) {
	a := storagetest.StartAzurite(t)
	want := blob(5000)
	azureData(t, a, map[string][]byte{"obj.bin": want})
	target, _ := url.Parse(a.Endpoint)
	proxyURL, throttle := throttler(t, httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host}),
		"application/xml", `<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>The server is busy.</Message></Error>`,
		"x-ms-error-code", "ServerBusy")
	// Azurite's endpoint is path-style: http://host:port/account.
	ao := storage.AzureOptions{Account: a.Account, Endpoint: proxyURL + target.Path, AccountKey: a.AccountKey}
	ctx := context.Background()

	throttle.Store(2)
	c := mustClient(t, storage.Options{Azure: ao, Retries: 3, Backoff: 5 * time.Millisecond})
	if got, err := c.ReadAll(ctx, "az://data/obj.bin"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAll after two ServerBusy answers: %d bytes, %v", len(got), err)
	}
	if n := throttle.Load(); n != -1 {
		t.Errorf("throttle counter %d: the retries did not go through the proxy as expected", n)
	}
	throttle.Store(5)
	c = mustClient(t, storage.Options{Azure: ao, Retries: 1, Backoff: 5 * time.Millisecond})
	_, err := c.ReadAll(ctx, "az://data/obj.bin")
	var se *storage.Error
	if !errors.As(err, &se) || se.Status != 503 || se.Attempts != 2 || !strings.HasPrefix(err.Error(), "az://data/obj.bin: HTTP 503") || !strings.Contains(err.Error(), "ServerBusy") {
		t.Errorf("read while throttled: %v", err)
	}
	throttle.Store(5)
	if _, err := c.List(ctx, "az://data/"); err == nil || !strings.HasPrefix(err.Error(), "az://data/: HTTP 503") {
		t.Errorf("listing while throttled: %v", err)
	}

	cred, err := azblob.NewSharedKeyCredential(a.Account, a.AccountKey)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := sas.BlobSignatureValues{Protocol: sas.ProtocolHTTPSandHTTP, StartTime: time.Now().Add(-2 * time.Hour), ExpiryTime: time.Now().Add(-time.Hour),
		ContainerName: "data", Permissions: (&sas.ContainerPermissions{Read: true}).String()}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	token := qp.Encode()
	expired := mustClient(t, storage.Options{Azure: storage.AzureOptions{Account: a.Account, Endpoint: a.Endpoint, SASToken: token}})
	_, err = expired.ReadAll(ctx, "az://data/obj.bin")
	if !errors.As(err, &se) || se.Status != 403 || !strings.HasPrefix(err.Error(), "az://data/obj.bin: HTTP 403") || strings.Contains(err.Error(), qp.Signature()) {
		t.Errorf("expired SAS: %v", err)
	}
}

// TestAzureDefaultCredential reads through DefaultAzureCredential with a
// managed identity, as on App Service, Functions or Container Apps: the
// token comes from the loopback endpoint in IDENTITY_ENDPOINT (checked for
// IDENTITY_HEADER and the storage resource) and goes to Azurite over HTTPS,
// which checks its issuer, audience and lifetime. A token for another
// audience fails with 403, and an identity endpoint that refuses fails the
// read with an error naming the URL and the credential.
func TestAzureDefaultCredential(t *testing.T) {
	a := storagetest.StartAzuriteOAuth(t)
	want := blob(3000)
	azureData(t, a, map[string][]byte{"obj.bin": want, "dir/x.bin": want[:10]})
	for _, k := range []string{"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
		"AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_CLIENT_CERTIFICATE_PATH",
		"AZURE_USERNAME", "MSI_ENDPOINT", "IMDS_ENDPOINT", "IDENTITY_SERVER_THUMBPRINT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	// No Azure CLI or azd login either: an empty PATH.
	t.Setenv("PATH", t.TempDir())
	var requests atomic.Int64
	var audience atomic.Value
	var lifetime atomic.Int64
	audience.Store("https://storage.azure.com")
	lifetime.Store(3600)
	var refuse atomic.Bool
	id := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if refuse.Load() {
			http.Error(w, `{"error":"invalid_request","error_description":"no identity is assigned to this resource"}`, http.StatusBadRequest)
			return
		}
		if r.Header.Get("X-IDENTITY-HEADER") != "identity-secret" || !strings.HasPrefix(r.URL.Query().Get("resource"), "https://storage.azure.com") {
			http.Error(w, "bad token request "+r.URL.String(), http.StatusBadRequest)
			return
		}
		now, lifetime, audience := time.Now().Unix(), lifetime.Load(), audience.Load().(string)
		b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
		jwt := b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(fmt.Sprintf(`{"aud":%q,"iss":"https://sts.windows.net/72f988bf-86f1-41af-91ab-2d7cd011db47/","iat":%d,"nbf":%d,"exp":%d,"oid":"mi"}`, audience, now-60, now-60, now+lifetime)) + "."
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"expires_on":"%d","resource":"https://storage.azure.com","token_type":"Bearer"}`, jwt, now+lifetime)
	}))
	defer id.Close()
	t.Setenv("IDENTITY_ENDPOINT", id.URL+"/msi/token")
	t.Setenv("IDENTITY_HEADER", "identity-secret")
	ctx := context.Background()
	o := storage.Options{Azure: storage.AzureOptions{Account: a.Account, Endpoint: a.Endpoint}, CAFile: a.CAFile, Retries: 1, Backoff: 5 * time.Millisecond}

	// MSAL caches tokens process-wide: the failures come first, and the
	// wrong-audience token expires too soon to be kept.
	refuse.Store(true)
	_, err := mustClient(t, o).ReadAll(ctx, "az://data/obj.bin")
	if err == nil || !strings.HasPrefix(err.Error(), "az://data/obj.bin: ") || !strings.Contains(err.Error(), "ManagedIdentityCredential") ||
		strings.Contains(err.Error(), "identity-secret") || strings.Contains(err.Error(), "\n") {
		t.Errorf("identity endpoint refusing: %v", err)
	}
	refuse.Store(false)

	audience.Store("https://vault.azure.net")
	lifetime.Store(60)
	_, err = mustClient(t, o).ReadAll(ctx, "az://data/obj.bin")
	var se *storage.Error
	if !errors.As(err, &se) || se.Status != 403 || !strings.HasPrefix(err.Error(), "az://data/obj.bin: HTTP 403") {
		t.Errorf("token for another audience: %v", err)
	}

	audience.Store("https://storage.azure.com")
	lifetime.Store(3600)
	requests.Store(0)

	c := mustClient(t, o)
	for range 3 {
		if got, err := c.ReadAll(ctx, "az://data/obj.bin"); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ReadAll with a managed identity: %d bytes, %v", len(got), err)
		}
	}
	if objs, err := c.List(ctx, "az://data/dir/"); err != nil || len(objs) != 1 || objs[0].Size != 10 {
		t.Errorf("List with a managed identity: %v, %v", objs, err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d token requests for one client, want 1 (the token is cached until it nears expiry)", n)
	}
}
