package img

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/value"
)

// optReader reads an op's options (values as decoded from Python: nil,
// bool, int64, float64, string, value.List, value.Tuple; Go ints too) and
// rejects those no getter asked for.
type optReader struct {
	m     map[string]any
	known []string
}

func (o *optReader) get(name string) (any, bool) {
	o.known = append(o.known, name)
	v, ok := o.m[name]
	return v, ok && v != nil
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), true
		}
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func asSeq(v any) ([]any, bool) {
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

func (o *optReader) int(name string, def int64) (int64, error) {
	v, ok := o.get(name)
	if !ok {
		return def, nil
	}
	n, ok := asInt(v)
	if !ok {
		return 0, fmt.Errorf("option %q must be an int, not %s", name, value.Describe(v))
	}
	return n, nil
}

func (o *optReader) number(name string, def float64) (float64, error) {
	v, ok := o.get(name)
	if !ok {
		return def, nil
	}
	f, ok := asFloat(v)
	if !ok {
		return 0, fmt.Errorf("option %q must be a number, not %s", name, value.Describe(v))
	}
	return f, nil
}

func (o *optReader) string(name, def string) (string, error) {
	v, ok := o.get(name)
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("option %q must be a str, not %s", name, value.Describe(v))
	}
	return s, nil
}

// numbers reads a list or tuple of n numbers (any length if n is 0).
func (o *optReader) numbers(name string, n int, def []float64) ([]float64, error) {
	v, ok := o.get(name)
	if !ok {
		return def, nil
	}
	s, ok := asSeq(v)
	if !ok || (n > 0 && len(s) != n) || len(s) == 0 {
		what := "a list of numbers"
		if n > 0 {
			what = fmt.Sprintf("a list of %d numbers", n)
		}
		return nil, fmt.Errorf("option %q must be %s, not %s", name, what, value.Describe(v))
	}
	out := make([]float64, len(s))
	for i, e := range s {
		if out[i], ok = asFloat(e); !ok {
			return nil, fmt.Errorf("option %q must be a list of numbers, not %s", name, value.Describe(v))
		}
	}
	return out, nil
}

func (o *optReader) pair(name string, def [2]float64) ([2]float64, error) {
	s, err := o.numbers(name, 2, def[:])
	if err != nil {
		return def, err
	}
	return [2]float64{s[0], s[1]}, nil
}

// size reads [height, width], or an int meaning a square when square is
// set. It returns 0, 0 when the option is absent.
func (o *optReader) size(name string, square bool) (int, int, error) {
	v, ok := o.get(name)
	if !ok {
		return 0, 0, nil
	}
	if n, ok := asInt(v); ok && square {
		if n <= 0 || n > math.MaxInt32 {
			return 0, 0, fmt.Errorf("option %q must be positive, not %d", name, n)
		}
		return int(n), int(n), nil
	}
	s, ok := asSeq(v)
	if ok && len(s) == 2 {
		h, okH := asInt(s[0])
		w, okW := asInt(s[1])
		if okH && okW && h > 0 && w > 0 && h <= math.MaxInt32 && w <= math.MaxInt32 {
			return int(h), int(w), nil
		}
	}
	if _, isInt := asInt(v); isInt {
		return 0, 0, fmt.Errorf("option %q must be [height, width], not %s; for torchvision's Resize(n) use short_side=n", name, value.Describe(v))
	}
	return 0, 0, fmt.Errorf("option %q must be [height, width] of positive ints, not %s", name, value.Describe(v))
}

// seed reads the seed option; without one, draws differ from run to run.
func (o *optReader) seed() (uint64, error) {
	v, ok := o.get("seed")
	if !ok {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	n, ok := asInt(v)
	if !ok {
		return 0, fmt.Errorf("option \"seed\" must be an int or None, not %s", value.Describe(v))
	}
	return uint64(n), nil
}

// randomizer reads seed and rng_key for an op named op.
func (o *optReader) randomizer(op string) (*randomizer, error) {
	seed, err := o.seed()
	if err != nil {
		return nil, err
	}
	key, err := o.string("rng_key", "")
	if err != nil {
		return nil, err
	}
	return newRandomizer(op, seed, key), nil
}

func (o *optReader) interp() (Interp, error) {
	s, err := o.string("interpolation", "bilinear")
	if err != nil {
		return 0, err
	}
	return ParseInterp(s)
}

// field reads key and output_key; output_key defaults to key.
func (o *optReader) field(def string) (ops.Field, error) {
	o.get("key")
	o.get("output_key")
	return ops.FieldFromOptions(o.m, def, "")
}

func (o *optReader) done() error {
	for _, k := range slices.Sorted(maps.Keys(o.m)) {
		if !slices.Contains(o.known, k) {
			known := slices.Clone(o.known)
			slices.Sort(known)
			return fmt.Errorf("unknown option %q; known options: %s", k, strings.Join(slices.Compact(known), ", "))
		}
	}
	return nil
}
