package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

func Example() {
	upper := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		s := in.(string)
		if s == "" {
			return nil, errors.New("empty name")
		}
		return strings.ToUpper(s), nil
	})
	p, err := pipeline.New(pipeline.Config{
		Source: pipeline.Slice([]any{"a.jpg", "b.jpg", "", "c.jpg", "d.jpg"}),
		Stages: []pipeline.StageConfig{
			{Name: "upper", Op: upper, Concurrency: 4, Order: pipeline.OrderInput, MaxFailures: -1},
			{Name: "batch", Kind: pipeline.KindAggregate, Size: 3},
		},
		BufferSize:  2,
		MaxFailures: -1,
	})
	if err != nil {
		panic(err)
	}
	defer p.Stop()
	if err := p.Start(); err != nil {
		panic(err)
	}
	for {
		batch, err := p.Next(context.Background(), -1)
		if errors.Is(err, pipeline.ErrEndOfData) {
			break
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(batch)
	}
	fmt.Println(p.Stats().RecentErrors)
	// Output:
	// [A.JPG B.JPG C.JPG]
	// [D.JPG]
	// [stage "upper" (pipe 0): item "": empty name]
}
