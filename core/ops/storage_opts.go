package ops

import (
	"fmt"
	"time"

	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/value"
)

// storageOptions reads the options of ops that read remote objects:
// timeout_s (seconds an attempt may wait for headers or for more data),
// retries, ca_file (a PEM bundle to trust for https://), and s3, a dict of endpoint, region, access_key, secret_key,
// session_token and virtual_host (Python fills it from the AWS_*
// variables; Go sees only the environment the process started with).
func storageOptions(o *Options) (storage.Options, error) {
	var so storage.Options
	t, err := o.Number("timeout_s", 0)
	if err != nil {
		return so, err
	}
	if t < 0 {
		return so, fmt.Errorf("option timeout_s: want seconds > 0, got %v", t)
	}
	so.Timeout = time.Duration(t * float64(time.Second))
	retries, err := o.Int("retries", 3)
	if err != nil {
		return so, err
	}
	if retries < 0 {
		return so, fmt.Errorf("option retries: want >= 0, got %d", retries)
	}
	so.Retries = int(retries)
	if retries == 0 {
		so.Retries = -1
	}
	if so.CAFile, err = o.String("ca_file", ""); err != nil {
		return so, err
	}
	if v, ok := o.Get("s3"); ok {
		var m map[string]any
		switch d := v.(type) {
		case *value.Dict:
			m = dictMap(d)
		case map[string]any: // options that came as JSON
			m = d
		default:
			return so, fmt.Errorf("option s3: want a dict, got %s", value.Describe(v))
		}
		s3 := NewOptions(m)
		str := func(name string) string {
			if err != nil {
				return ""
			}
			var s string
			s, err = s3.String(name, "")
			return s
		}
		so.S3 = storage.S3Options{Endpoint: str("endpoint"), Region: str("region"), AccessKey: str("access_key"),
			SecretKey: str("secret_key"), SessionToken: str("session_token")}
		if err == nil {
			so.S3.VirtualHost, err = s3.Bool("virtual_host", false)
		}
		if err == nil {
			err = s3.Done()
		}
		if err != nil {
			return so, fmt.Errorf("option s3: %w", err)
		}
	}
	return so, nil
}

func dictMap(d *value.Dict) map[string]any {
	m := make(map[string]any, d.Len())
	for i, k := range d.Keys {
		m[k] = d.Values[i]
	}
	return m
}
