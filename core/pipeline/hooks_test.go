package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/pipeline"
)

// threadOp records which OS threads attached and checks that every call
// runs on an attached thread, as a Python stage's thread state needs.
type threadOp struct {
	mu        sync.Mutex
	attached  map[int]int // thread id -> attach depth
	attaches  int
	detaches  int
	strangers int // calls on a thread that was not attached
}

func (o *threadOp) AttachThread() {
	runtime.LockOSThread()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attached[syscall.Gettid()]++
	o.attaches++
}

func (o *threadOp) DetachThread() {
	o.mu.Lock()
	o.attached[syscall.Gettid()]--
	o.detaches++
	o.mu.Unlock()
	runtime.UnlockOSThread()
}

func (o *threadOp) Process(_ context.Context, in any) (any, error) {
	time.Sleep(50 * time.Microsecond) // let the scheduler move goroutines if it would
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.attached[syscall.Gettid()] == 0 {
		o.strangers++
	}
	return in, nil
}

func TestThreadBoundHooks(t *testing.T) {
	for _, order := range []pipeline.Order{pipeline.OrderCompletion, pipeline.OrderInput} {
		for _, conc := range []int{1, 3} {
			t.Run(fmt.Sprintf("%v/c%d", order, conc), func(t *testing.T) {
				op := &threadOp{attached: map[int]int{}}
				p := mustNew(t, pipeline.Config{
					Source:     pipeline.Range(0, 200, 1),
					Stages:     []pipeline.StageConfig{{Kind: pipeline.KindPipe, Op: op, Concurrency: conc, Order: order, MaxFailures: -1}},
					BufferSize: 2, MaxFailures: -1,
				})
				for epoch := 0; epoch < 2; epoch++ {
					if err := p.Start(); err != nil {
						t.Fatal(err)
					}
					out, err := drain(t, p)
					if err != nil || len(out) != 200 {
						t.Fatalf("epoch %d: %d items, err %v", epoch, len(out), err)
					}
				}
				p.Stop()
				op.mu.Lock()
				defer op.mu.Unlock()
				if op.attaches != 2*conc || op.detaches != op.attaches {
					t.Fatalf("attaches %d detaches %d, want %d each", op.attaches, op.detaches, 2*conc)
				}
				if op.strangers != 0 {
					t.Fatalf("%d calls ran on a thread that was not attached", op.strangers)
				}
			})
		}
	}
}

type describedErr struct{ item string }

func (e *describedErr) Error() string      { return "bad input" }
func (e *describedErr) FailedItem() string { return e.item }

func TestItemDescriberNamesTheItem(t *testing.T) {
	fail := pipeline.OpFunc(func(_ context.Context, in any) (any, error) {
		return nil, fmt.Errorf("wrapped: %w", &describedErr{item: "('a.jpg', 3)"})
	})
	_, _, err := runAll(t, pipeline.Config{
		Source:     pipeline.Range(0, 5, 1),
		Stages:     []pipeline.StageConfig{{Name: "load", Kind: pipeline.KindPipe, Op: fail, MaxFailures: 0}},
		BufferSize: 1, MaxFailures: -1,
	})
	var fl *pipeline.FailureLimitError
	if !errors.As(err, &fl) {
		t.Fatalf("err = %v, want a FailureLimitError", err)
	}
	if !strings.Contains(err.Error(), `item ('a.jpg', 3)`) {
		t.Fatalf("error does not name the item as described: %v", err)
	}
}
