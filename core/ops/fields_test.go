package ops_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/value"
)

func upper(v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, errors.New("not a string")
	}
	return strings.ToUpper(s), nil
}

func TestFieldApply(t *testing.T) {
	dict := func(kv ...any) *value.Dict {
		d := value.NewDict(len(kv) / 2)
		for i := 0; i < len(kv); i += 2 {
			d.Set(kv[i].(string), kv[i+1])
		}
		return d
	}
	cases := []struct {
		name  string
		field ops.Field
		in    any
		want  any
		err   string
	}{
		{"plain", ops.Field{In: "path", Out: "path"}, "a", "A", ""},
		{"tuple keeps label", ops.Field{In: "path", Out: "path"}, value.Tuple{"a", int64(3)}, value.Tuple{"A", int64(3)}, ""},
		{"list keeps rest", ops.Field{In: "path", Out: "path"}, value.List{"a", "b"}, value.List{"A", "b"}, ""},
		{"dict in place", ops.Field{In: "path", Out: "path"}, dict("path", "a", "label", int64(1)), dict("path", "A", "label", int64(1)), ""},
		{"dict new key", ops.Field{In: "path", Out: "data"}, dict("path", "a"), dict("path", "a", "data", "A"), ""},
		{"dict missing key", ops.Field{In: "path", Out: "path"}, dict("file", "a"), nil, `no key "path"`},
		{"fn error", ops.Field{In: "path", Out: "path"}, value.Tuple{int64(1), "x"}, nil, "not a string"},
		{"empty tuple", ops.Field{In: "path", Out: "path"}, value.Tuple{}, nil, "empty sequence"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.field.Apply(tc.in, upper)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestFieldFromOptions(t *testing.T) {
	f, err := ops.FieldFromOptions(map[string]any{"key": "img"}, "image", "")
	if err != nil || f.In != "img" || f.Out != "img" {
		t.Fatalf("got %+v, %v", f, err)
	}
	if _, err := ops.FieldFromOptions(map[string]any{"key": 3}, "image", ""); err == nil {
		t.Fatal("non-string key accepted")
	}
}
