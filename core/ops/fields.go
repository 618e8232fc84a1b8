package ops

import (
	"fmt"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/value"
)

// Field says which part of an item an op transforms, so that metadata
// (labels, paths, ids) travels with the sample untouched:
//
//   - a *value.Dict: the value under In is transformed and stored under
//     Out (Out defaults to In; a different Out keeps the input too);
//   - a value.Tuple or value.List: element 0 is transformed, the rest kept
//     (the `(path, label)` convention);
//   - anything else: the item itself.
type Field struct {
	In  string
	Out string
}

// ReadField reads "key" and "output_key" (which defaults to key) with o,
// so that o.Done knows them.
func ReadField(o *options.Reader, defaultKey string) (Field, error) {
	o.Get("key")
	o.Get("output_key")
	return FieldFromOptions(o.Map(), defaultKey, "")
}

// FieldFromOptions reads the "key" and "output_key" options, with the
// op's defaults.
func FieldFromOptions(opts map[string]any, in, out string) (Field, error) {
	f := Field{In: in, Out: out}
	var err error
	if f.In, err = stringOpt(opts, "key", in); err != nil {
		return f, err
	}
	if f.Out, err = stringOpt(opts, "output_key", out); err != nil {
		return f, err
	}
	if f.Out == "" {
		f.Out = f.In
	}
	return f, nil
}

func stringOpt(opts map[string]any, name, def string) (string, error) {
	v, ok := opts[name]
	if !ok || v == nil {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("option %q must be a string, got %T", name, v)
	}
	return s, nil
}

// Apply runs fn on the selected part of item and puts the result back.
// Ownership: Apply owns item; fn owns what it is given (on success it
// returns or releases it; on error it has released it). On error Apply
// releases the rest of the item, so the caller has nothing left to free.
func (f Field) Apply(item any, fn func(any) (any, error)) (any, error) {
	switch x := item.(type) {
	case *value.Dict:
		in, ok := x.Get(f.In)
		if !ok {
			value.Release(x)
			return nil, fmt.Errorf("item has no key %q (keys: %v); set the op's key option", f.In, x.Keys)
		}
		if f.Out == f.In {
			x.Set(f.In, nil) // fn owns it now
		}
		out, err := fn(in)
		if err != nil {
			value.Release(x)
			return nil, err
		}
		x.Set(f.Out, out)
		return x, nil
	case value.Tuple:
		return applySeq(x, fn, func(xs []any) any { return value.Tuple(xs) })
	case value.List:
		return applySeq(x, fn, func(xs []any) any { return value.List(xs) })
	default:
		return fn(item)
	}
}

func applySeq(xs []any, fn func(any) (any, error), wrap func([]any) any) (any, error) {
	if len(xs) == 0 {
		return nil, fmt.Errorf("item is an empty sequence; expected (data, metadata...)")
	}
	out, err := fn(xs[0])
	if err != nil {
		for _, e := range xs[1:] {
			value.Release(e)
		}
		return nil, err
	}
	res := make([]any, len(xs))
	copy(res, xs)
	res[0] = out
	return wrap(res), nil
}
