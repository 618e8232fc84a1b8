package sources

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spdl-go/spdl-go/core/storage"
)

// Lister lists objects under a remote prefix (storage.Client.List).
type Lister interface {
	List(ctx context.Context, prefix string) ([]storage.Object, error)
}

// ListRemote is ListFiles for an s3://bucket/prefix root or glob pattern
// (s3://bucket/train/**/*.jpg): it lists the fixed part of the name and
// matches the rest as ListFiles does. A prefix without a pattern is a
// "directory": its objects (and, with Recursive, those in deeper
// "subdirectories").
func ListRemote(ctx context.Context, l Lister, o FileOptions) ([]string, error) {
	exts, err := normExts(o.Extensions)
	if err != nil {
		return nil, err
	}
	dir, pattern := splitRemote(o.Root)
	objs, err := l.List(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	var out []string
	for _, obj := range objs {
		rel := strings.TrimPrefix(obj.Name, dir)
		if rel == "" || strings.HasSuffix(rel, "/") {
			continue // a "directory" marker object
		}
		if pattern != "" {
			if !matchPath(pattern, rel) {
				continue
			}
		} else if !o.Recursive && strings.Contains(rel, "/") {
			continue
		}
		if hasExt(rel, exts) {
			out = append(out, obj.Name)
		}
	}
	if len(out) == 0 {
		what := "no objects"
		if len(exts) > 0 {
			what = fmt.Sprintf("no objects with extension %s", strings.Join(exts, ", "))
		}
		return nil, fmt.Errorf("files: %s under %s", what, o.Root)
	}
	slices.Sort(out)
	return out, nil
}

// ImageFolderRemote is ImageFolder for an s3:// root: classes are the first
// "directory" level under it.
func ImageFolderRemote(ctx context.Context, l Lister, root string, extensions []string) (*Folder, error) {
	paths, err := ListRemote(ctx, l, FileOptions{Root: strings.TrimSuffix(root, "/") + "/", Extensions: extensions, Recursive: true})
	if err != nil {
		return nil, fmt.Errorf("image_folder: %w", err)
	}
	dir := strings.TrimSuffix(root, "/") + "/"
	f := &Folder{}
	index := map[string]int64{}
	for _, p := range paths {
		class, _, ok := strings.Cut(strings.TrimPrefix(p, dir), "/")
		if ok {
			index[class] = 0
		}
	}
	if len(index) == 0 {
		return nil, fmt.Errorf("image_folder: %s has no class \"directories\"", root)
	}
	for c := range index {
		f.Classes = append(f.Classes, c)
	}
	slices.Sort(f.Classes)
	for i, c := range f.Classes {
		index[c] = int64(i)
	}
	// paths are sorted, so each class's files are together and in order.
	for _, p := range paths {
		class, _, ok := strings.Cut(strings.TrimPrefix(p, dir), "/")
		if !ok {
			continue // a file directly under the root is not a sample
		}
		f.Paths = append(f.Paths, p)
		f.Labels = append(f.Labels, index[class])
	}
	return f, nil
}

// splitRemote splits s3://bucket/a/b/*.jpg into the listing prefix
// "s3://bucket/a/b/" and the pattern "*.jpg"; a name without a wildcard
// is a directory prefix ("s3://bucket/a/b" lists "s3://bucket/a/b/").
func splitRemote(root string) (dir, pattern string) {
	scheme, rest, _ := strings.Cut(root, "://")
	bucket, path, _ := strings.Cut(rest, "/")
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.ContainsAny(p, "*?[") {
			d := strings.Join(parts[:i], "/")
			if d != "" {
				d += "/"
			}
			return scheme + "://" + bucket + "/" + d, strings.Join(parts[i:], "/")
		}
	}
	path = strings.TrimSuffix(path, "/")
	if path != "" {
		path += "/"
	}
	return scheme + "://" + bucket + "/" + path, ""
}
