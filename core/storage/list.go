package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Object is one listed object.
type Object struct {
	Name string // s3://bucket/key or gs://bucket/object
	Size int64
}

// List returns the objects whose names start with prefix (an s3://bucket/,
// gs://bucket/ or az://container/ prefix; "" after the bucket lists the
// whole bucket), sorted by name, page by page.
func (c *Client) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	var err error
	switch {
	case strings.HasPrefix(prefix, "s3://"):
		out, err = c.listS3(ctx, prefix)
	case strings.HasPrefix(prefix, "gs://"):
		out, err = c.listGCS(ctx, prefix)
	case isAzure(prefix):
		out, err = c.listAzure(ctx, prefix)
	default:
		return nil, fmt.Errorf("%s: only s3://, gs:// and az:// prefixes can be listed", prefix)
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Listable reports whether name is in an object store that lists (s3://,
// gs://, az://, abfs(s)://), rather than an http(s) server.
func Listable(name string) bool {
	return strings.HasPrefix(name, "s3://") || strings.HasPrefix(name, "gs://") || isAzure(name)
}
