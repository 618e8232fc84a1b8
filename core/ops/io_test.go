package ops_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/value"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.bin")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.jpg")
	dict := func(kv ...any) *value.Dict {
		d := value.NewDict(len(kv) / 2)
		for i := 0; i < len(kv); i += 2 {
			d.Set(kv[i].(string), kv[i+1])
		}
		return d
	}
	cases := []struct {
		name string
		opts map[string]any
		in   any
		want any
		err  string
	}{
		{"path", nil, path, []byte("hello"), ""},
		{"bytes pass through", nil, []byte("raw"), []byte("raw"), ""},
		{"tuple keeps label", nil, value.Tuple{path, int64(3)}, value.Tuple{[]byte("hello"), int64(3)}, ""},
		{"dict in place", nil, dict("path", path, "label", int64(1)), dict("path", []byte("hello"), "label", int64(1)), ""},
		{"dict keeps path", map[string]any{"output_key": "data"}, dict("path", path), dict("path", path, "data", []byte("hello")), ""},
		{"dict other key", map[string]any{"key": "file"}, dict("file", path), dict("file", []byte("hello")), ""},
		{"missing file names it", nil, missing, nil, missing},
		{"empty path", nil, "", nil, "path is empty"},
		{"not a path", nil, int64(3), nil, "expected a path (str) or bytes, got 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op := mustOp(t, "read_file", tc.opts)
			got, err := op.Process(context.Background(), tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %s, want %s", value.Describe(got), value.Describe(tc.want))
			}
		})
	}
	t.Run("missing file is fs.ErrNotExist", func(t *testing.T) {
		_, err := mustOp(t, "read_file", nil).Process(context.Background(), missing)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("unknown option", func(t *testing.T) {
		if _, err := ops.New("read_file", map[string]any{"keys": "x"}); err == nil || !strings.Contains(err.Error(), `unknown option "keys"`) {
			t.Fatalf("err = %v", err)
		}
	})
}
