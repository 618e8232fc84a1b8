package storage

import (
	"fmt"
	"math"
	"time"

	"github.com/spdl-go/spdl-go/core/options"
)

// ReadOptions reads the remote-read options, the group that every reader
// of remote names takes (ops.read_file at its top level, sources under
// "storage"):
//
//	timeout_s      seconds an attempt may wait for headers or for more data (> 0)
//	retries        retries of a failed attempt (>= 0; 0 means none)
//	ca_file        a PEM bundle to trust for https://
//	s3             {endpoint, region, profile, access_key, secret_key, session_token,
//	                anonymous, virtual_host}: overrides of the AWS SDK's
//	                defaults (S3Options)
//	gcs            {endpoint, credentials_file, anonymous}: overrides of the
//	                Google Cloud Storage client's defaults (GCSOptions)
//	azure          {account, endpoint, connection_string, account_key,
//	                sas_token, anonymous}: overrides of the Azure defaults
//	                (AzureOptions)
//
// The caller calls r.Done.
func ReadOptions(r *options.Reader) (Options, error) {
	var o Options
	t, err := r.Number("timeout_s", 0)
	if err != nil {
		return o, err
	}
	if t < 0 || t > math.MaxInt64/float64(time.Second) {
		return o, fmt.Errorf("option timeout_s: want seconds > 0, got %v", t)
	}
	o.Timeout = time.Duration(t * float64(time.Second))
	if r.Has("retries") {
		retries, err := r.Int("retries", 0)
		if err != nil {
			return o, err
		}
		if retries < 0 || retries > math.MaxInt32 {
			return o, fmt.Errorf("option retries: want >= 0, got %d", retries)
		}
		o.Retries = int(retries)
		if retries == 0 {
			o.Retries = -1 // Options' "none"; its 0 means the default
		}
	} else {
		r.Get("retries")
	}
	if o.CAFile, err = r.String("ca_file", ""); err != nil {
		return o, err
	}
	s3, err := r.Sub("s3")
	if err != nil {
		return o, err
	}
	str := func(name string) string {
		if err != nil {
			return ""
		}
		var s string
		s, err = s3.String(name, "")
		return s
	}
	o.S3 = S3Options{Endpoint: str("endpoint"), Region: str("region"), Profile: str("profile"), AccessKey: str("access_key"),
		SecretKey: str("secret_key"), SessionToken: str("session_token")}
	if err == nil {
		o.S3.VirtualHost, err = s3.Bool("virtual_host", false)
	}
	if err == nil {
		o.S3.Anonymous, err = s3.Bool("anonymous", false)
	}
	if err == nil {
		err = s3.Done()
	}
	if err != nil {
		return o, err
	}
	g, err := r.Sub("gcs")
	if err != nil {
		return o, err
	}
	if o.GCS.Endpoint, err = g.String("endpoint", ""); err != nil {
		return o, err
	}
	if o.GCS.CredentialsFile, err = g.String("credentials_file", ""); err != nil {
		return o, err
	}
	if o.GCS.Anonymous, err = g.Bool("anonymous", false); err != nil {
		return o, err
	}
	if err := g.Done(); err != nil {
		return o, err
	}
	az, err := r.Sub("azure")
	if err != nil {
		return o, err
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"account", &o.Azure.Account}, {"endpoint", &o.Azure.Endpoint}, {"connection_string", &o.Azure.ConnectionString},
		{"account_key", &o.Azure.AccountKey}, {"sas_token", &o.Azure.SASToken}} {
		if *f.dst, err = az.String(f.name, ""); err != nil {
			return o, err
		}
	}
	if o.Azure.Anonymous, err = az.Bool("anonymous", false); err != nil {
		return o, err
	}
	return o, az.Done()
}
