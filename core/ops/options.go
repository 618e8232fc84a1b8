package ops

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/spdl-go/spdl-go/core/value"
)

// Options reads an op factory's options (values as they arrive from
// Python: nil, bool, int64, float64, string, value.List, value.Tuple; Go
// ints too), and Done rejects the ones no getter asked for, so a typo in an
// option name is an error rather than a silent default. A nil value means
// "use the default".
type Options struct {
	m     map[string]any
	known []string
}

// NewOptions reads m.
func NewOptions(m map[string]any) *Options { return &Options{m: m} }

// Get returns the option's value, if set, and marks the name as known.
func (o *Options) Get(name string) (any, bool) {
	o.known = append(o.known, name)
	v, ok := o.m[name]
	return v, ok && v != nil
}

// Bool reads a bool option.
func (o *Options) Bool(name string, def bool) (bool, error) {
	v, ok := o.Get(name)
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("option %q must be True or False, not %s", name, value.Describe(v))
	}
	return b, nil
}

// Number reads a number option (an int or a float).
func (o *Options) Number(name string, def float64) (float64, error) {
	v, ok := o.Get(name)
	if !ok {
		return def, nil
	}
	f, ok := AsFloat(v)
	if !ok {
		return 0, fmt.Errorf("option %q must be a number, not %s", name, value.Describe(v))
	}
	return f, nil
}

// Int reads an int option (a float with no fraction is accepted).
func (o *Options) Int(name string, def int64) (int64, error) {
	v, ok := o.Get(name)
	if !ok {
		return def, nil
	}
	n, ok := AsInt(v)
	if !ok {
		return 0, fmt.Errorf("option %q must be an int, not %s", name, value.Describe(v))
	}
	return n, nil
}

// String reads a str option.
func (o *Options) String(name, def string) (string, error) {
	v, ok := o.Get(name)
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("option %q must be a str, not %s", name, value.Describe(v))
	}
	return s, nil
}

// Field reads "key" and "output_key" (which defaults to key).
func (o *Options) Field(defaultKey string) (Field, error) {
	o.Get("key")
	o.Get("output_key")
	return FieldFromOptions(o.m, defaultKey, "")
}

// Done reports an option that no getter asked for.
func (o *Options) Done() error {
	for _, k := range slices.Sorted(maps.Keys(o.m)) {
		if !slices.Contains(o.known, k) {
			if len(o.known) == 0 {
				return fmt.Errorf("unknown option %q; this op takes no options", k)
			}
			known := slices.Compact(slices.Sorted(slices.Values(o.known)))
			return fmt.Errorf("unknown option %q; known options: %s", k, strings.Join(known, ", "))
		}
	}
	return nil
}

// AsInt reads an option value as an int: int64, int, or a float64 with no
// fraction that an int64 holds exactly.
func AsInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) <= 1<<53 {
			return int64(x), true
		}
	}
	return 0, false
}

// AsFloat reads an option value as a finite number.
func AsFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
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
