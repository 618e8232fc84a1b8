package sources

import (
	"fmt"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
)

func init() { Register("range", newRange) }

// newRange reads {start, stop, step (default 1, not 0)}: the integers of
// Python's range(start, stop, step).
func newRange(m map[string]any) (pipeline.Source, error) {
	r := options.New(m)
	start, err := r.Int("start", 0)
	if err != nil {
		return nil, err
	}
	stop, err := r.Int("stop", 0)
	if err != nil {
		return nil, err
	}
	step, err := r.Int("step", 1)
	if err != nil {
		return nil, err
	}
	if step == 0 {
		return nil, fmt.Errorf("step must not be zero")
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return pipeline.Range(start, stop, step), nil
}
