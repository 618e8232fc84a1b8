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

	"github.com/spdl-go/spdl-go/core/options"
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

// identity returns its input.
type identity struct{}

func newIdentity(m map[string]any) (Op, error) {
	o := options.New(m)
	if err := o.Done(); err != nil {
		return nil, err
	}
	return identity{}, nil
}

func (identity) Process(_ context.Context, in any) (any, error) { return in, nil }
