package storage

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Object is one listed object.
type Object struct {
	Name string // s3://bucket/key
	Size int64
}

// List returns the objects whose names start with prefix (an s3://bucket/
// prefix; "" after the bucket lists the whole bucket), sorted by name. It
// pages through ListObjectsV2.
func (c *Client) List(ctx context.Context, prefix string) ([]Object, error) {
	rest, ok := strings.CutPrefix(prefix, "s3://")
	if !ok {
		return nil, fmt.Errorf("%s: only s3:// prefixes can be listed", prefix)
	}
	bucket, keyPrefix, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return nil, fmt.Errorf("%s: want s3://bucket/prefix", prefix)
	}
	var out []Object
	token := ""
	for page := 0; ; page++ {
		q := url.Values{"list-type": {"2"}, "prefix": {keyPrefix}}
		if token != "" {
			q.Set("continuation-token", token)
		}
		var res listResult
		err := c.doURL(ctx, prefix, "s3://"+bucket+"/?"+q.Encode(), func(resp *http.Response, body io.Reader) error {
			return xml.NewDecoder(body).Decode(&res)
		})
		if err != nil {
			return nil, err
		}
		for _, o := range res.Contents {
			out = append(out, Object{Name: "s3://" + bucket + "/" + o.Key, Size: o.Size})
		}
		if !res.IsTruncated || res.NextContinuationToken == "" {
			break
		}
		token = res.NextContinuationToken
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

type listResult struct {
	Contents []struct {
		Key  string `xml:"Key"`
		Size int64  `xml:"Size"`
	} `xml:"Contents"`
	IsTruncated           bool   `xml:"IsTruncated"`
	NextContinuationToken string `xml:"NextContinuationToken"`
}
