package sources

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

// Factory builds a source from its options (the source spec without its
// "kind"), read with an options.Reader whose Done rejects unknown names.
// Values are as decoded from JSON with UseNumber (json.Number, []any,
// map[string]any) or from the wire.
type Factory func(opts map[string]any) (pipeline.Source, error)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes a source kind available to New. It panics if kind is
// empty or taken, or f is nil: registration happens at init time, and a
// clash is a programming error. The host registers its own kinds (capi's
// "python", whose items come from a Python callback).
func Register(kind string, f Factory) {
	if kind == "" || f == nil {
		panic("sources: Register needs a kind and a factory")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[kind]; dup {
		panic(fmt.Sprintf("sources: source kind %q is already registered", kind))
	}
	factories[kind] = f
}

// New builds the source registered as kind; its errors name the kind.
func New(kind string, opts map[string]any) (pipeline.Source, error) {
	mu.RLock()
	f, ok := factories[kind]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown source kind %q; known kinds: %s", kind, strings.Join(Kinds(), ", "))
	}
	src, err := f(opts)
	if err != nil {
		return nil, fmt.Errorf("%s source: %w", kind, err)
	}
	return src, nil
}

// Kinds lists the registered source kinds, sorted.
func Kinds() []string {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Sorted(maps.Keys(factories))
}
