package ops_test

import (
	"context"
	"fmt"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/value"
)

func ExampleNew() {
	ctx := context.Background()
	toTensor, err := ops.New("to_tensor", map[string]any{"dtype": "uint8"})
	if err != nil {
		panic(err)
	}
	collate, err := ops.New("collate", nil)
	if err != nil {
		panic(err)
	}
	// Three samples, as aggregate(3) would emit them.
	var batch value.List
	for i := range int64(3) {
		img, err := toTensor.Process(ctx, value.List{i, i, i, i})
		if err != nil {
			panic(err)
		}
		d := value.NewDict(2)
		d.Set("image", img)
		d.Set("label", i%2 == 0)
		batch = append(batch, d)
	}
	out, err := collate.Process(ctx, batch)
	if err != nil {
		panic(err)
	}
	defer value.Release(out)
	fmt.Println(value.Describe(out))
	// Output: {"image": tensor(uint8, [3 4]), "label": [true false true]}
}
