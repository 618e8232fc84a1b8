// Package options reads the options of ops and sources: JSON-like maps as
// they arrive from Python, either decoded from the wire (nil, bool, int64,
// float64, string, value.List, value.Tuple, *value.Dict) or from JSON
// decoded with json.Decoder.UseNumber (json.Number, []any,
// map[string]any); Go callers may also pass int.
//
// A Reader remembers the names its getters asked for, and Done rejects the
// others, so a typo in an option name is an error rather than a silent
// default. A nil value means "use the default".
package options

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spdl-go/spdl-go/core/value"
)

// Reader reads one map of options.
type Reader struct {
	m     map[string]any
	group string // the option holding m, for a group read by Sub
	known []string
}

// New reads m.
func New(m map[string]any) *Reader { return &Reader{m: m} }

// Get returns the option's value, if set, and marks the name as known.
func (r *Reader) Get(name string) (any, bool) {
	r.known = append(r.known, name)
	v, ok := r.m[name]
	return v, ok && v != nil
}

// Has reports whether the option is set (not nil), without marking it.
func (r *Reader) Has(name string) bool { return r.m[name] != nil }

// errorf names the option, with its group's name when r reads a group.
func (r *Reader) errorf(name, format string, args ...any) error {
	if r.group != "" {
		name = r.group + "." + name
	}
	return fmt.Errorf("option %q "+format, append([]any{name}, args...)...)
}

// read is every scalar getter: the option's value converted by as, def
// when it is unset, or an error that names the option and what it must be.
func read[T any](r *Reader, name string, def T, as func(any) (T, bool), want string) (T, error) {
	v, ok := r.Get(name)
	if !ok {
		return def, nil
	}
	x, ok := as(v)
	if !ok {
		var zero T
		return zero, r.errorf(name, "must be %s, not %s", want, value.Describe(v))
	}
	return x, nil
}

func asBool(v any) (bool, bool)     { b, ok := v.(bool); return b, ok }
func asString(v any) (string, bool) { s, ok := v.(string); return s, ok }

// Bool reads a bool option.
func (r *Reader) Bool(name string, def bool) (bool, error) {
	return read(r, name, def, asBool, "True or False")
}

// Number reads a number option (an int or a float).
func (r *Reader) Number(name string, def float64) (float64, error) {
	return read(r, name, def, AsFloat, "a number")
}

// Int reads an int option (a float with no fraction is accepted).
func (r *Reader) Int(name string, def int64) (int64, error) {
	return read(r, name, def, AsInt, "an int")
}

// Uint64 reads an int option in [0, 2**64).
func (r *Reader) Uint64(name string, def uint64) (uint64, error) {
	return read(r, name, def, AsUint64, "an int in [0, 2**64)")
}

// String reads a str option.
func (r *Reader) String(name, def string) (string, error) {
	return read(r, name, def, asString, "a str")
}

// Strings reads a list of str; absent, it is nil.
func (r *Reader) Strings(name string) ([]string, error) {
	v, ok := r.Get(name)
	if !ok {
		return nil, nil
	}
	seq, ok := AsSeq(v)
	if !ok {
		return nil, r.errorf(name, "must be a list of str, not %s", value.Describe(v))
	}
	out := make([]string, len(seq))
	for i, e := range seq {
		if out[i], ok = e.(string); !ok {
			return nil, r.errorf(name, "must be a list of str; item %d is %s", i, value.Describe(e))
		}
	}
	return out, nil
}

// StringMap reads a dict of str to str; absent, it is nil.
func (r *Reader) StringMap(name string) (map[string]string, error) {
	v, ok := r.Get(name)
	if !ok {
		return nil, nil
	}
	m, ok := AsMap(v)
	if !ok {
		return nil, r.errorf(name, "must be a dict of str, not %s", value.Describe(v))
	}
	out := make(map[string]string, len(m))
	for k, e := range m {
		s, ok := e.(string)
		if !ok {
			return nil, r.errorf(name, "must be a dict of str; %q is %s", k, value.Describe(e))
		}
		out[k] = s
	}
	return out, nil
}

// Sub returns a Reader of the dict option name (a group of options, such
// as "storage"); absent, the group is empty and its getters give their
// defaults. The group's Done reports its unknown names; call it too.
func (r *Reader) Sub(name string) (*Reader, error) {
	group := name
	if r.group != "" {
		group = r.group + "." + name
	}
	v, ok := r.Get(name)
	if !ok {
		return &Reader{group: group}, nil
	}
	m, ok := AsMap(v)
	if !ok {
		return nil, r.errorf(name, "must be a dict, not %s", value.Describe(v))
	}
	return &Reader{m: m, group: group}, nil
}

// JSON decodes the option into target (a pointer) through its JSON form:
// for structured values that a Go type describes. It reports whether the
// option was set.
func (r *Reader) JSON(name string, target any) (bool, error) {
	v, ok := r.Get(name)
	if !ok {
		return false, nil
	}
	b, err := json.Marshal(plain(v))
	if err == nil {
		err = json.Unmarshal(b, target)
	}
	if err != nil {
		return false, r.errorf(name, "is malformed: %v", err)
	}
	return true, nil
}

// plain turns wire containers into the JSON-able shapes json.Marshal takes.
func plain(v any) any {
	switch x := v.(type) {
	case *value.Dict:
		m := make(map[string]any, x.Len())
		for i, k := range x.Keys {
			m[k] = plain(x.Values[i])
		}
		return m
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = plain(e)
		}
		return m
	case value.List:
		return plainSeq(x)
	case value.Tuple:
		return plainSeq(x)
	case []any:
		return plainSeq(x)
	}
	return v
}

func plainSeq(xs []any) []any {
	out := make([]any, len(xs))
	for i, e := range xs {
		out[i] = plain(e)
	}
	return out
}

// Map is the options as given (nil for an absent group).
func (r *Reader) Map() map[string]any { return r.m }

// Done reports an option that no getter asked for.
func (r *Reader) Done() error {
	for _, k := range slices.Sorted(maps.Keys(r.m)) {
		if slices.Contains(r.known, k) {
			continue
		}
		in := ""
		if r.group != "" {
			in = " in " + r.group
		}
		if len(r.known) == 0 {
			if r.group != "" {
				return fmt.Errorf("unknown option %q%s; it takes no options", k, in)
			}
			return fmt.Errorf("unknown option %q; this op takes no options", k)
		}
		known := slices.Compact(slices.Sorted(slices.Values(r.known)))
		return fmt.Errorf("unknown option %q%s; known options: %s", k, in, strings.Join(known, ", "))
	}
	return nil
}

// AsInt reads an option value as an int: int64, int, json.Number, or a
// float64 with no fraction that an int64 holds exactly.
func AsInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return n, true
		}
		if f, err := x.Float64(); err == nil {
			return AsInt(f)
		}
	case float64:
		if x == math.Trunc(x) && math.Abs(x) <= 1<<53 {
			return int64(x), true
		}
	}
	return 0, false
}

// AsUint64 reads an option value as an int in [0, 2**64).
func AsUint64(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint64:
		return x, true
	case json.Number:
		if n, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return n, true
		}
	}
	n, ok := AsInt(v)
	return uint64(n), ok && n >= 0
}

// AsFloat reads an option value as a finite number.
func AsFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil && !math.IsInf(f, 0)
	case float64:
		return x, !math.IsNaN(x) && !math.IsInf(x, 0)
	}
	return 0, false
}

// AsSeq reads an option value as a list or tuple.
func AsSeq(v any) ([]any, bool) {
	switch x := v.(type) {
	case value.List:
		return x, true
	case value.Tuple:
		return x, true
	case []any:
		return x, true
	}
	return nil, false
}

// AsMap reads an option value as a dict with str keys.
func AsMap(v any) (map[string]any, bool) {
	switch x := v.(type) {
	case map[string]any:
		return x, true
	case *value.Dict:
		m := make(map[string]any, x.Len())
		for i, k := range x.Keys {
			m[k] = x.Values[i]
		}
		return m, true
	}
	return nil, false
}
