// Package ops is the registry of native ops: per-item transforms written in
// Go that a pipeline stage runs by name, configured from JSON-like options
// (what Python passes as keyword arguments).
//
// An op owns its input: on success it returns the input or releases it
// (value.Release); on error it releases the input itself. Ops here are safe
// for concurrent use by several goroutines.
package ops

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/spdl-go/spdl-go/core/value"
)

// Op transforms one item. It has the same method set as pipeline.Op, so an
// Op can be used as one.
type Op interface {
	Process(ctx context.Context, in any) (any, error)
}

// Factory builds an op from its options. Options hold values as decoded
// from Python (nil, bool, int64, float64, string, value.List, *value.Dict)
// or Go (int is accepted where int64 is).
type Factory func(opts map[string]any) (Op, error)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes an op available to New under name. It panics if name is
// empty or taken, or f is nil: registration happens at init time, and a
// clash is a programming error.
func Register(name string, f Factory) {
	if name == "" || f == nil {
		panic("ops: Register needs a name and a factory")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[name]; dup {
		panic(fmt.Sprintf("ops: op %q is already registered", name))
	}
	factories[name] = f
}

// New builds the op registered as name.
func New(name string, opts map[string]any) (Op, error) {
	mu.RLock()
	f, ok := factories[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("ops: unknown op %q; known ops: %s", name, strings.Join(Names(), ", "))
	}
	op, err := f(opts)
	if err != nil {
		return nil, fmt.Errorf("ops: %s: %w", name, err)
	}
	return op, nil
}

// Names lists the registered ops, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Sorted(maps.Keys(factories))
}

func init() {
	Register("identity", newIdentity)
	Register("to_tensor", newToTensor)
	Register("collate", newCollate)
}

// options reads a factory's options and rejects the ones it did not read.
type options struct {
	m     map[string]any
	known []string
}

func (o *options) get(name string) (any, bool) {
	o.known = append(o.known, name)
	v, ok := o.m[name]
	return v, ok && v != nil
}

func (o *options) bool(name string, def bool) (bool, error) {
	v, ok := o.get(name)
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("option %q must be True or False, not %s", name, value.Describe(v))
	}
	return b, nil
}

func (o *options) number(name string, def float64) (float64, error) {
	v, ok := o.get(name)
	if !ok {
		return def, nil
	}
	switch x := v.(type) {
	case int64:
		return float64(x), nil
	case int:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("option %q must be a number, not %s", name, value.Describe(v))
}

func (o *options) string(name, def string) (string, error) {
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

// done reports an option that no getter asked for.
func (o *options) done() error {
	for _, k := range slices.Sorted(maps.Keys(o.m)) {
		if !slices.Contains(o.known, k) {
			if len(o.known) == 0 {
				return fmt.Errorf("unknown option %q; this op takes no options", k)
			}
			return fmt.Errorf("unknown option %q; known options: %s", k, strings.Join(o.known, ", "))
		}
	}
	return nil
}

// identity returns its input.
type identity struct{}

func newIdentity(m map[string]any) (Op, error) {
	o := options{m: m}
	if err := o.done(); err != nil {
		return nil, err
	}
	return identity{}, nil
}

func (identity) Process(_ context.Context, in any) (any, error) { return in, nil }
