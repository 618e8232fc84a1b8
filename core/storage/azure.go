package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// AzureOptions configure az://container/blob names (and the
// abfs[s]://container@account.dfs.core.windows.net/blob form fsspec users
// know, whose account it names). What is left empty comes from the
// environment the Azure tools read, in this order:
// AZURE_STORAGE_CONNECTION_STRING (which may carry an account key or a
// SAS, and an endpoint, as Azurite's does); else AZURE_STORAGE_ACCOUNT
// with AZURE_STORAGE_KEY (shared key) or AZURE_STORAGE_SAS_TOKEN; else
// DefaultAzureCredential (environment service principal, workload
// identity, managed identity, the Azure CLI's login).
type AzureOptions struct {
	// Account is the storage account (default AZURE_STORAGE_ACCOUNT).
	Account string
	// Endpoint is the blob service URL (default
	// https://<account>.blob.core.windows.net).
	Endpoint string
	// ConnectionString, AccountKey and SASToken are credentials, tried in
	// that order before the environment's.
	ConnectionString, AccountKey, SASToken string
	// Anonymous sends unauthenticated requests (public containers).
	Anonymous bool
}

type azureClient struct {
	mu      sync.Mutex
	clients map[string]*azblob.Client // by account ("" for a connection string's)
}

// azureName is a parsed az:// or abfs:// name.
type azureName struct {
	account, container, blob string
}

func parseAzure(name string) (azureName, error) {
	var n azureName
	scheme, rest, _ := strings.Cut(name, "://")
	switch scheme {
	case "az":
		n.container, n.blob, _ = strings.Cut(rest, "/")
	case "abfs", "abfss":
		host, path, _ := strings.Cut(rest, "/")
		c, h, ok := strings.Cut(host, "@")
		if !ok {
			return n, fmt.Errorf("%s: want %s://container@account.dfs.core.windows.net/blob", name, scheme)
		}
		n.container, n.blob = c, path
		n.account, _, _ = strings.Cut(h, ".")
	default:
		return n, fmt.Errorf("%s: not an az:// or abfs:// name", name)
	}
	if n.container == "" {
		return n, fmt.Errorf("%s: want az://container/blob", name)
	}
	return n, nil
}

// isAzure reports whether name is az://, abfs:// or abfss://.
func isAzure(name string) bool {
	return strings.HasPrefix(name, "az://") || strings.HasPrefix(name, "abfs://") || strings.HasPrefix(name, "abfss://")
}

// azure returns the client for account ("" means the configured one).
func (c *Client) azure(account string) (*azblob.Client, error) {
	c.azc.mu.Lock()
	defer c.azc.mu.Unlock()
	if cl, ok := c.azc.clients[account]; ok {
		return cl, nil
	}
	cl, err := newAzure(c.o.Azure, account, c.http)
	if err != nil {
		return nil, err
	}
	if c.azc.clients == nil {
		c.azc.clients = map[string]*azblob.Client{}
	}
	c.azc.clients[account] = cl
	return cl, nil
}

func newAzure(o AzureOptions, account string, hc *http.Client) (*azblob.Client, error) {
	opts := &azblob.ClientOptions{ClientOptions: policy.ClientOptions{
		Transport: hc,
		// One layer of retries: Client.retry's.
		Retry: policy.RetryOptions{MaxRetries: -1},
	}}
	conn := o.ConnectionString
	if conn == "" && account == "" && o.AccountKey == "" && o.SASToken == "" && !o.Anonymous {
		conn = os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	}
	if conn != "" {
		cl, err := azblob.NewClientFromConnectionString(conn, opts)
		if err != nil {
			return nil, fmt.Errorf("the Azure connection string: %w", err)
		}
		return cl, nil
	}
	if account == "" {
		account = o.Account
	}
	if account == "" {
		account = os.Getenv("AZURE_STORAGE_ACCOUNT")
	}
	endpoint := o.Endpoint
	if endpoint == "" {
		if account == "" {
			return nil, errors.New("no Azure storage account: set azure={\"account\": ...} or AZURE_STORAGE_ACCOUNT, or a connection string")
		}
		endpoint = "https://" + account + ".blob.core.windows.net/"
	}
	key, sas := o.AccountKey, o.SASToken
	if key == "" && sas == "" && !o.Anonymous {
		key, sas = os.Getenv("AZURE_STORAGE_KEY"), os.Getenv("AZURE_STORAGE_SAS_TOKEN")
	}
	switch {
	case o.Anonymous:
		return azblob.NewClientWithNoCredential(endpoint, opts)
	case key != "":
		cred, err := azblob.NewSharedKeyCredential(account, key)
		if err != nil {
			return nil, fmt.Errorf("the Azure account key: %w", err)
		}
		return azblob.NewClientWithSharedKeyCredential(endpoint, cred, opts)
	case sas != "":
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("the Azure endpoint %q: %w", endpoint, err)
		}
		u.RawQuery = strings.TrimPrefix(sas, "?")
		return azblob.NewClientWithNoCredential(u.String(), opts)
	}
	cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{ClientOptions: opts.ClientOptions})
	if err != nil {
		return nil, fmt.Errorf("DefaultAzureCredential: %w", err)
	}
	return azblob.NewClient(endpoint, cred, opts)
}

// azureAttempt is attempt for an az:// or abfs:// name: the blob's
// properties (HEAD), or a download of n bytes at off (off >= 0) or of the
// whole blob, handed to handle as an HTTP response would be.
func (c *Client) azureAttempt(ctx context.Context, name, method string, off, n int64, handle func(*http.Response, io.Reader) error) (int, error) {
	an, err := parseAzure(name)
	if err != nil {
		return 0, err
	}
	if an.blob == "" {
		return 0, fmt.Errorf("%s: want az://container/blob", name)
	}
	cl, err := c.azure(an.account)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := time.AfterFunc(c.o.Timeout, cancel)
	if method == "HEAD" {
		props, err := cl.ServiceClient().NewContainerClient(an.container).NewBlobClient(an.blob).GetProperties(ctx, nil)
		t.Stop()
		if err != nil {
			return azureFailure(ctx, err, off, n, c.o.Timeout)
		}
		size := int64(-1)
		if props.ContentLength != nil {
			size = *props.ContentLength
		}
		return http.StatusOK, handle(&http.Response{StatusCode: http.StatusOK, ContentLength: size, Body: http.NoBody}, http.NoBody)
	}
	o := &azblob.DownloadStreamOptions{}
	if off >= 0 {
		o.Range = azblob.HTTPRange{Offset: off, Count: n}
	}
	resp, err := cl.DownloadStream(ctx, an.container, an.blob, o)
	if !t.Stop() && err == nil {
		resp.Body.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		return azureFailure(ctx, err, off, n, c.o.Timeout)
	}
	defer resp.Body.Close()
	status := http.StatusOK
	if off >= 0 {
		status = http.StatusPartialContent
	}
	size := int64(-1)
	if resp.ContentLength != nil {
		size = *resp.ContentLength
	}
	body := &stallReader{r: resp.Body, timeout: c.o.Timeout, cancel: cancel}
	defer body.stop()
	if err := handle(&http.Response{StatusCode: status, ContentLength: size, Body: resp.Body}, body); err != nil {
		if body.stalled.Load() {
			err = fmt.Errorf("no data for %v: %w", c.o.Timeout, errStalled)
		}
		return status, err
	}
	return status, nil
}

// azureFailure turns an SDK error into attempt's status and error: the
// HTTP status and the service's error code (never a credential).
func azureFailure(ctx context.Context, err error, off, n int64, timeout time.Duration) (int, error) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		msg := re.ErrorCode
		if msg == "" {
			msg = http.StatusText(re.StatusCode)
		}
		switch {
		case re.StatusCode == http.StatusNotFound:
			return re.StatusCode, notFound{errors.New(msg)}
		case off >= 0 && re.StatusCode == http.StatusRequestedRangeNotSatisfiable:
			msg = fmt.Sprintf("range %d-%d is past the blob's end", off, off+n-1)
		case bloberror.HasCode(err, bloberror.AuthenticationFailed, bloberror.AuthorizationFailure):
			msg += " (check the account key, SAS or identity)"
		}
		return re.StatusCode, statusError{msg}
	}
	if errors.Is(err, context.DeadlineExceeded) || (errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		return 0, fmt.Errorf("no answer in %v: %w", timeout, errStalled)
	}
	return 0, oneLine{unwrapURLError(err)}
}

// oneLine is err on one line: azidentity's errors span many, with
// rulers, which an item's error in a table or a log should not.
type oneLine struct{ err error }

func (e oneLine) Error() string {
	var b strings.Builder
	for _, line := range strings.Split(e.err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.Trim(line, "-") == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(line)
	}
	return b.String()
}

func (e oneLine) Unwrap() error { return e.err }

// azureOpen starts a download of the whole blob, for Open's one-GET
// fallback.
func (c *Client) azureOpen(ctx context.Context, name string) (io.ReadCloser, int, error) {
	an, err := parseAzure(name)
	if err != nil {
		return nil, 0, err
	}
	cl, err := c.azure(an.account)
	if err != nil {
		return nil, 0, err
	}
	resp, err := cl.DownloadStream(ctx, an.container, an.blob, nil)
	if err != nil {
		status, err := azureFailure(ctx, err, -1, 0, c.o.Timeout)
		return nil, status, err
	}
	return resp.Body, http.StatusOK, nil
}

// listAzure lists the blobs under prefix (az://container/blobprefix).
func (c *Client) listAzure(ctx context.Context, prefix string) ([]Object, error) {
	an, err := parseAzure(prefix)
	if err != nil {
		return nil, err
	}
	cl, err := c.azure(an.account)
	if err != nil {
		return nil, &Error{URL: prefix, Attempts: 1, Err: err}
	}
	base := strings.TrimSuffix(prefix, an.blob)
	var out []Object
	var marker *string
	for {
		var page azblob.ListBlobsFlatResponse
		err := c.retry(ctx, prefix, func() (int, error) {
			pager := cl.NewListBlobsFlatPager(an.container, &azblob.ListBlobsFlatOptions{Prefix: &an.blob, Marker: marker})
			p, err := pager.NextPage(ctx)
			if err != nil {
				return azureFailure(ctx, err, -1, 0, c.o.Timeout)
			}
			page = p
			return http.StatusOK, nil
		})
		if err != nil {
			return nil, err
		}
		if page.Segment != nil {
			for _, b := range page.Segment.BlobItems {
				if b.Name == nil {
					continue
				}
				size := int64(0)
				if b.Properties != nil && b.Properties.ContentLength != nil {
					size = *b.Properties.ContentLength
				}
				out = append(out, Object{Name: base + *b.Name, Size: size})
			}
		}
		if page.NextMarker == nil || *page.NextMarker == "" {
			return out, nil
		}
		marker = page.NextMarker
	}
}
