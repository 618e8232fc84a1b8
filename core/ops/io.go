package ops

import (
	"context"
	"fmt"

	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/value"
)

func init() {
	Register("read_file", newReadFile)
}

// readFile reads a whole file or object: a name (str) becomes its
// contents (bytes). Names are local paths, file://, http(s):// or
// s3://bucket/key URLs (core/storage: retries, timeouts, errors that name
// the URL and status). Bytes pass through unchanged, so a pipeline that
// reads files natively also takes samples whose bytes Python already
// loaded.
//
// Options: key (default "path"), output_key (default: key, so the path is
// replaced by the bytes; give another key to keep the path for error
// messages, e.g. decode_image names it), and the remote-read options of
// storageOptions (timeout_s, retries, s3).
//
// Cost: a local file is one os.ReadFile; a remote object one GET (more on
// retries), whose wait costs a goroutine, not a thread: run the stage with
// a high concurrency (64 or more) to keep many requests in flight.
type readFile struct {
	field  Field
	client *storage.Client
}

func newReadFile(m map[string]any) (Op, error) {
	o := NewOptions(m)
	o.Get("key")
	o.Get("output_key")
	f, err := FieldFromOptions(m, "path", "")
	if err != nil {
		return nil, err
	}
	so, err := storageOptions(o)
	if err != nil {
		return nil, err
	}
	if err := o.Done(); err != nil {
		return nil, err
	}
	return readFile{field: f, client: storage.New(so)}, nil
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
			b, err := op.client.ReadAll(ctx, x)
			if err != nil {
				// Both *fs.PathError and *storage.Error name the file.
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
