package ops

import (
	"context"
	"fmt"
	"os"

	"github.com/spdl-go/spdl-go/core/value"
)

func init() {
	Register("read_file", newReadFile)
}

// readFile reads a whole file: a path (str) becomes its contents (bytes).
// Bytes pass through unchanged, so a pipeline that reads files natively
// also takes samples whose bytes Python already loaded.
//
// Options: key (default "path"), output_key (default: key, so the path is
// replaced by the bytes; give another key to keep the path for error
// messages, e.g. decode_image names it).
//
// Cost: one os.ReadFile (a stat, one read of the whole file, one Go
// allocation of its size).
type readFile struct {
	field Field
}

func newReadFile(m map[string]any) (Op, error) {
	o := NewOptions(m)
	o.Get("key")
	o.Get("output_key")
	f, err := FieldFromOptions(m, "path", "")
	if err != nil {
		return nil, err
	}
	if err := o.Done(); err != nil {
		return nil, err
	}
	return readFile{f}, nil
}

func (op readFile) Process(ctx context.Context, in any) (any, error) {
	if err := ctx.Err(); err != nil {
		value.Release(in)
		return nil, err
	}
	out, err := op.field.Apply(in, func(v any) (any, error) {
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			if x == "" {
				return nil, fmt.Errorf("read_file: the path is empty")
			}
			b, err := os.ReadFile(x)
			if err != nil {
				// *fs.PathError names the path and the reason.
				return nil, fmt.Errorf("read_file: %w", err)
			}
			return b, nil
		default:
			value.Release(v)
			return nil, fmt.Errorf("read_file: expected a path (str) or bytes, got %s", value.Describe(v))
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
