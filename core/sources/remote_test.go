package sources_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/storage"
)

// fakeList is a listing as ListObjectsV2 returns it (sorted keys); the
// client against a real server is tested in core/storage and from Python.
type fakeList []string

func (f fakeList) List(_ context.Context, prefix string) ([]storage.Object, error) {
	var out []storage.Object
	for _, n := range f {
		if strings.HasPrefix(n, prefix) {
			out = append(out, storage.Object{Name: n, Size: 1})
		}
	}
	return out, nil
}

func TestListRemote(t *testing.T) {
	l := fakeList{"s3://b/top.jpg", "s3://b/train/", "s3://b/train/cat/1.jpg", "s3://b/train/cat/2.JPG", "s3://b/train/cat/n.txt",
		"s3://b/train/dog/x/3.jpg", "s3://b/train2/4.jpg"}
	cases := []struct {
		o    sources.FileOptions
		want []string
		err  string
	}{
		{sources.FileOptions{Root: "s3://b/train", Recursive: true, Extensions: []string{"jpg"}},
			[]string{"s3://b/train/cat/1.jpg", "s3://b/train/cat/2.JPG", "s3://b/train/dog/x/3.jpg"}, ""},
		{sources.FileOptions{Root: "s3://b/train/"}, nil, "no objects under"},
		{sources.FileOptions{Root: "s3://b/train/*/*.jpg"}, []string{"s3://b/train/cat/1.jpg"}, ""},
		{sources.FileOptions{Root: "s3://b/**/*.jpg"}, []string{"s3://b/top.jpg", "s3://b/train/cat/1.jpg", "s3://b/train/dog/x/3.jpg", "s3://b/train2/4.jpg"}, ""},
		{sources.FileOptions{Root: "s3://b/train*/4.jpg"}, []string{"s3://b/train2/4.jpg"}, ""},
		{sources.FileOptions{Root: "s3://b/val", Recursive: true}, nil, "no objects under s3://b/val"},
	}
	for _, c := range cases {
		got, err := sources.ListRemote(context.Background(), l, c.o)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: err %v, want %q", c.o, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, %v; want %v", c.o, got, err, c.want)
		}
	}
	f, err := sources.ImageFolderRemote(context.Background(), l, "s3://b/train", []string{"jpg"})
	if err != nil || !slices.Equal(f.Classes, []string{"cat", "dog"}) || !slices.Equal(f.Labels, []int64{0, 0, 1}) {
		t.Errorf("ImageFolderRemote = %+v, %v", f, err)
	}
}
