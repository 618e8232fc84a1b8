// Package storagetest starts real servers on loopback for tests of remote
// reads: nginx (Debian's package) serving a directory; versitygw, an
// S3-compatible gateway over a directory; fake-gcs-server; Azurite
// (.ci/servers installs them). Without the binary a test is skipped, except where
// SPDL_GO_REQUIRE_SERVERS is set (.ci/run sets it), where it fails: CI must
// exercise them.
package storagetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// need finds a server binary or skips (fails under CI).
func need(t testing.TB, name string, extra ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range extra {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s is not installed (.ci/run installs it)", name)
	if os.Getenv("SPDL_GO_REQUIRE_SERVERS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// freePort returns a loopback port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitListening(t testing.TB, addr string, cmd *exec.Cmd, done <-chan struct{}, log string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			b, _ := os.ReadFile(log)
			t.Fatalf("%s exited before listening on %s: %s", cmd.Path, addr, b)
		case <-time.After(50 * time.Millisecond):
		}
	}
	b, _ := os.ReadFile(log)
	t.Fatalf("%s did not start listening on %s: %s", cmd.Path, addr, b)
}

// Nginx is a running nginx.
type Nginx struct {
	URL  string // http://127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{}
}

// StartNginx serves root at URL/ and, throttled to rateKB KiB/s per
// response, at URL/slow/. The server is stopped at the end of the test.
func StartNginx(t testing.TB, root string, rateKB int) *Nginx {
	t.Helper()
	bin := need(t, "nginx", "/usr/sbin/nginx")
	dir := t.TempDir()
	port := freePort(t)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root root;" // workers must read the test's private directories
	}
	root, _ = filepath.Abs(root)
	conf := fmt.Sprintf(`%s
worker_processes 2;
error_log %[2]s/error.log;
pid %[2]s/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[2]s/body; proxy_temp_path %[2]s/proxy; fastcgi_temp_path %[2]s/fcgi;
  uwsgi_temp_path %[2]s/uwsgi; scgi_temp_path %[2]s/scgi;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:%[3]d;
    root %[4]s;
    location /slow/ { alias %[4]s/; limit_rate %[5]dk; }
  }
}
`, user, dir, port, root, max(rateKB, 1))
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Stop kills the workers too
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &Nginx{URL: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(n.done) }()
	t.Cleanup(n.Stop)
	waitListening(t, fmt.Sprintf("127.0.0.1:%d", port), cmd, n.done, filepath.Join(dir, "error.log"))
	return n
}

// Stop kills the server (and its workers) and waits for it; calling it
// again does nothing.
func (n *Nginx) Stop() {
	if n.cmd.Process == nil {
		return
	}
	syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}

// S3 is a running S3-compatible server (versitygw over a directory).
type S3 struct {
	Endpoint             string
	AccessKey, SecretKey string
	Region               string
	Root                 string // the directory behind it: Root/<bucket>/<key>
	cmd                  *exec.Cmd
	done                 chan struct{}
}

// StartS3 starts versitygw serving the buckets (directories) under root.
func StartS3(t testing.TB, root string) *S3 {
	t.Helper()
	gobin := filepath.Join(os.Getenv("HOME"), "go", "bin", "versitygw")
	bin := need(t, "versitygw", gobin, "/tmp/vgw-bin/versitygw")
	port := freePort(t)
	s := &S3{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), AccessKey: "spdlgo-test", SecretKey: "spdlgo-test-secret-key",
		Region: "us-east-1", Root: root, done: make(chan struct{})}
	logPath := filepath.Join(t.TempDir(), "versitygw.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// --nometa: objects are files put there by the test, without the
	// extended attributes versitygw would write on upload.
	cmd := exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region, "--quiet",
		"--port", fmt.Sprintf("127.0.0.1:%d", port), "posix", "--nometa", root)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd = cmd
	go func() { cmd.Wait(); logf.Close(); close(s.done) }()
	t.Cleanup(s.Stop)
	waitListening(t, fmt.Sprintf("127.0.0.1:%d", port), cmd, s.done, logPath)
	return s
}

// Stop kills the server.
func (s *S3) Stop() {
	if s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
}

// Env returns the AWS_* variables that point clients at the server.
func (s *S3) Env() []string {
	return []string{"AWS_ENDPOINT_URL=" + s.Endpoint, "AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey, "AWS_REGION=" + s.Region}
}

// GCS is a running Google Cloud Storage emulator (fake-gcs-server, go
// install github.com/fsouza/fake-gcs-server@v1.56.1; .ci/servers installs
// it), serving the buckets (directories) under a root, loaded at start.
type GCS struct {
	Host string // 127.0.0.1:port, for STORAGE_EMULATOR_HOST
	cmd  *exec.Cmd
	done chan struct{}
}

// StartGCS starts fake-gcs-server with the buckets under root (each
// directory a bucket, its files the objects) in memory.
func StartGCS(t testing.TB, root string) *GCS {
	t.Helper()
	bin := need(t, "fake-gcs-server", filepath.Join(os.Getenv("HOME"), "go", "bin", "fake-gcs-server"))
	port := freePort(t)
	g := &GCS{Host: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan struct{})}
	logPath := filepath.Join(t.TempDir(), "fake-gcs-server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-scheme", "http", "-host", "127.0.0.1", "-port", fmt.Sprint(port), "-backend", "memory",
		"-data", root, "-public-host", g.Host, "-external-url", "http://"+g.Host, "-log-level", "error")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g.cmd = cmd
	go func() { cmd.Wait(); logf.Close(); close(g.done) }()
	t.Cleanup(g.Stop)
	waitListening(t, g.Host, cmd, g.done, logPath)
	return g
}

// Stop kills the server.
func (g *GCS) Stop() {
	if g.cmd.Process == nil {
		return
	}
	g.cmd.Process.Kill()
	<-g.done
}

// Azurite is a running Azure Blob Storage emulator (npm's azurite; .ci/servers
// installs it), in memory, with its well-known development account.
type Azurite struct {
	Endpoint   string // http://127.0.0.1:port/devstoreaccount1 (https for StartAzuriteOAuth)
	Account    string
	AccountKey string
	CAFile     string // the PEM certificate to trust (StartAzuriteOAuth)
	cmd        *exec.Cmd
	done       chan struct{}
}

// AzuriteKey is the emulator's published development account key.
const AzuriteKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

// ConnectionString is the emulator's connection string (account key).
func (a *Azurite) ConnectionString() string {
	return "DefaultEndpointsProtocol=" + strings.Split(a.Endpoint, ":")[0] + ";AccountName=" + a.Account + ";AccountKey=" + a.AccountKey + ";BlobEndpoint=" + a.Endpoint + ";"
}

// StartAzurite starts azurite-blob on a free port.
func StartAzurite(t testing.TB) *Azurite {
	t.Helper()
	return startAzurite(t, false)
}

// StartAzuriteOAuth starts azurite-blob over HTTPS (a self-signed
// certificate for 127.0.0.1, trusted through CAFile) that also accepts
// bearer tokens, as Blob Storage does for Entra ID identities: Azurite's
// "basic" check takes a JWT whose issuer is Entra's
// (https://sts.windows.net/<tenant>/), whose audience is
// https://storage.azure.com and which is within its lifetime, without
// checking its signature. The SDKs send tokens only over HTTPS.
func StartAzuriteOAuth(t testing.TB) *Azurite {
	t.Helper()
	return startAzurite(t, true)
}

func startAzurite(t testing.TB, oauth bool) *Azurite {
	bin := need(t, "azurite-blob", "/usr/bin/azurite-blob", "/usr/local/bin/azurite-blob")
	port := freePort(t)
	dir := t.TempDir()
	scheme := "http"
	args := []string{"--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(port), "--location", filepath.Join(dir, "data"),
		"--silent", "--loose", "--skipApiVersionCheck"}
	var caFile string
	if oauth {
		scheme = "https"
		var certFile, keyFile string
		caFile, certFile, keyFile = selfSigned(t, dir)
		args = append(args, "--cert", certFile, "--key", keyFile, "--oauth", "basic")
	}
	a := &Azurite{Endpoint: fmt.Sprintf("%s://127.0.0.1:%d/devstoreaccount1", scheme, port), Account: "devstoreaccount1",
		AccountKey: AzuriteKey, CAFile: caFile, done: make(chan struct{})}
	logPath := filepath.Join(dir, "azurite.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.cmd = cmd
	go func() { cmd.Wait(); logf.Close(); close(a.done) }()
	t.Cleanup(a.Stop)
	waitListening(t, fmt.Sprintf("127.0.0.1:%d", port), cmd, a.done, logPath)
	return a
}

// Stop kills the emulator (node and whatever it started).
func (a *Azurite) Stop() {
	if a.cmd.Process == nil {
		return
	}
	syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	<-a.done
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// under dir; the certificate is its own CA.
func selfSigned(t testing.TB, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, certFile, keyFile
}
