package storage

import (
	"context"
	"fmt"
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
	if !strings.HasPrefix(prefix, "s3://") {
		return nil, fmt.Errorf("%s: only s3:// prefixes can be listed", prefix)
	}
	out, err := c.listS3(ctx, prefix)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
