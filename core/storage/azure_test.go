package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
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
	cl, err := azblob.NewClientFromConnectionString(a.ConnectionString(), nil)
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
	files := map[string][]byte{"a.bin": blob(1000), "dir/with space+plus=eq.bin": blob(5000), "big.bin": blob(9 << 20)}
	for i := range 30 {
		files[fmt.Sprintf("many/%04d.txt", i)] = []byte("x")
	}
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
			base := "az://" + tc.container + "/"
			for name, want := range files {
				got, err := c.ReadAll(ctx, base+name)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("ReadAll(%s%s): %d bytes, %v", base, name, len(got), err)
				}
			}
			if b, err := c.ReadRange(ctx, base+"dir/with space+plus=eq.bin", 100, 10); err != nil || !bytes.Equal(b, files["dir/with space+plus=eq.bin"][100:110]) {
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
			objs, err := c.List(ctx, base+"many/")
			if err != nil || len(objs) != 30 || objs[0].Name != base+"many/0000.txt" || objs[29].Size != 1 {
				t.Errorf("List(many/): %v, %v", objs, err)
			}
			_, err = c.ReadAll(ctx, base+"nope.bin")
			if err == nil || !errors.Is(err, storage.ErrNotFound) || !strings.HasPrefix(err.Error(), base+"nope.bin: HTTP 404") {
				t.Errorf("missing blob: %v", err)
			}
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
