// Package value defines the values that flow through a spdl-go pipeline and
// cross the C ABI. core/wire encodes and decodes them in the byte format
// that Python's codec (python/spdl_go/_codec.py) speaks.
//
// A value is one of:
//
//	nil, bool, int64, float64, string, []byte,
//	List, Tuple, *Dict,
//	any type implementing Releaser that the ABI layer knows how to hand out
//	(a *tensor.Tensor, an arrow.Array, a Python object reference).
//
// Values that hold C memory or foreign references implement Releaser. The
// owner of a value releases it exactly once; Release walks containers.
package value

import (
	"fmt"
	"strings"
)

// List is a Python list.
type List []any

// Tuple is a Python tuple. It is a distinct type so that a round trip
// through Go keeps tuples as tuples.
type Tuple []any

// Dict is a Python dict with str keys, in insertion order (Python keeps
// order, and users see it in batches).
type Dict struct {
	Keys   []string
	Values []any
}

// NewDict returns an empty dict with room for n fields.
func NewDict(n int) *Dict {
	return &Dict{Keys: make([]string, 0, n), Values: make([]any, 0, n)}
}

// Set adds key, or replaces its value if present.
func (d *Dict) Set(key string, v any) {
	for i, k := range d.Keys {
		if k == key {
			d.Values[i] = v
			return
		}
	}
	d.Keys = append(d.Keys, key)
	d.Values = append(d.Values, v)
}

// Get returns the value of key.
func (d *Dict) Get(key string) (any, bool) {
	for i, k := range d.Keys {
		if k == key {
			return d.Values[i], true
		}
	}
	return nil, false
}

// Len is the number of fields.
func (d *Dict) Len() int { return len(d.Keys) }

// Releaser is implemented by values that own C memory or a foreign
// reference. Release must be safe to call once per owned reference.
type Releaser interface {
	Release()
}

// Release releases every Releaser reachable from v. It is what an owner
// calls when it drops an item (a failed item, a cancelled pipeline, a
// drained buffer).
func Release(v any) {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, []byte:
	case List:
		for _, e := range x {
			Release(e)
		}
	case Tuple:
		for _, e := range x {
			Release(e)
		}
	case []any:
		for _, e := range x {
			Release(e)
		}
	case *Dict:
		if x != nil {
			for _, e := range x.Values {
				Release(e)
			}
		}
	case Releaser:
		x.Release()
	}
}

// Describe renders v briefly for error messages: enough to name the item
// that failed, never megabytes of payload.
func Describe(v any) string {
	var b strings.Builder
	describe(&b, v, 0)
	s := b.String()
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

func describe(b *strings.Builder, v any, depth int) {
	if depth > 3 {
		b.WriteString("…")
		return
	}
	seq := func(open, close string, xs []any) {
		b.WriteString(open)
		for i, e := range xs {
			if i > 0 {
				b.WriteString(", ")
			}
			if i == 8 {
				fmt.Fprintf(b, "… (%d items)", len(xs))
				break
			}
			describe(b, e, depth+1)
		}
		b.WriteString(close)
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case string:
		if len(x) > 80 {
			x = x[:80] + "…"
		}
		fmt.Fprintf(b, "%q", x)
	case []byte:
		if name, ok := Origin(x); ok {
			if len(name) > 120 {
				name = "…" + name[len(name)-120:]
			}
			fmt.Fprintf(b, "<%d bytes of %q>", len(x), name)
		} else {
			fmt.Fprintf(b, "<%d bytes>", len(x))
		}
	case List:
		seq("[", "]", x)
	case []any:
		seq("[", "]", x)
	case Tuple:
		seq("(", ")", x)
	case *Dict:
		b.WriteString("{")
		for i, k := range x.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			if i == 8 {
				fmt.Fprintf(b, "… (%d keys)", len(x.Keys))
				break
			}
			fmt.Fprintf(b, "%q: ", k)
			describe(b, x.Values[i], depth+1)
		}
		b.WriteString("}")
	case fmt.Stringer:
		b.WriteString(x.String())
	default:
		fmt.Fprintf(b, "%v", x)
	}
}
