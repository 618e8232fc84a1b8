package pipeline

import (
	"fmt"
	"sync"

	"github.com/spdl-go/spdl-go/core/value"
)

// An ordered pipe stage (OrderInput) has no goroutine of its own besides
// its Concurrency workers. A worker takes an item and its sequence number
// in one step (under rmu, so numbers follow the input channel's order),
// runs the op, and stores the result in a ring of window slots. The worker
// that completes the item at the head emits it and every item behind it
// that is ready, so a failed item only leaves a gap for the emitter to skip
// and a slow item holds back the ones behind it. A worker reserves a place
// in the window (a token of the window channel) before it takes an item,
// and the emitter gives it back, which bounds the items in flight to the
// window: 2*Concurrency, so that a worker done ahead of a slow head can
// take one more item rather than idle.
type reorder struct {
	rmu  sync.Mutex
	next uint64 // sequence number of the next item taken; under rmu

	mu       sync.Mutex
	head     uint64        // sequence number of the next item to emit
	slots    []rslot       // the item numbered n is in slots[n%len(slots)]
	emitting bool          // a worker is emitting; the others only store
	window   chan struct{} // capacity len(slots)
}

type rslot struct {
	v     any
	state uint8 // slotEmpty, slotReady (v is a result), slotSkip (failed or cancelled)
}

const (
	slotEmpty = iota
	slotReady
	slotSkip
)

func newReorder(window int) *reorder {
	return &reorder{slots: make([]rslot, window), window: make(chan struct{}, window)}
}

// orderedOne takes, runs and completes one item of an ordered stage.
func (w *worker) orderedOne() fate {
	r := w.r
	if w.c.stopped.Load() {
		return fateEnd // the stage failed: it takes no more items
	}
	if !send(r.window, struct{}{}, w.done) {
		return fateEnd
	}
	r.rmu.Lock()
	v, ok := recv(w.in, w.done)
	seq := r.next
	if ok {
		r.next++
	}
	r.rmu.Unlock()
	if !ok {
		<-r.window
		return fateEnd
	}
	w.sl.in.Add(1)
	if isDone(w.done) {
		release(v)
		w.complete(seq, nil, false)
		return fateEnd
	}
	res, f := w.call(v, seq)
	if f == fateLost {
		return f
	}
	keep := f == fatePassed && res != Skip
	if _, ok := res.(Stream); keep && w.sink != nil && !ok {
		// Here, not when emitting: the workers encode in parallel. A
		// stream's items are encoded as they are pulled (drain).
		res, f = w.encode(res)
		keep = f == fatePassed
	}
	// Always complete: the head must move past every number taken.
	if cf := w.complete(seq, res, keep); cf == fateFatal {
		return cf
	}
	return f
}

// complete stores the outcome of item seq (v, if ok) and, if it is the
// head and no one else is emitting, emits it and every ready item behind
// it. A Stream is drained in its place; complete returns fateFatal when
// a stream's failure exceeded a limit (w.err set), else fatePassed.
func (w *worker) complete(seq uint64, v any, ok bool) fate {
	r := w.r
	n := uint64(len(r.slots))
	r.mu.Lock()
	st := uint8(slotSkip)
	if ok {
		st = slotReady
	}
	r.slots[seq%n] = rslot{v: v, state: st}
	if r.emitting || seq != r.head {
		r.mu.Unlock()
		return fatePassed
	}
	res := fatePassed
	r.emitting = true
	for {
		h := &r.slots[r.head%n]
		if h.state == slotEmpty {
			break
		}
		v, ready := h.v, h.state == slotReady
		*h = rslot{}
		r.head++
		r.mu.Unlock()
		if st, ok := v.(Stream); ready && ok {
			if w.drain(st) == fateFatal {
				res = fateFatal
			}
		} else if ready {
			if send(w.out, v, w.done) {
				w.sl.out.Add(1)
				w.sl.occ.Add(int64(len(w.out)))
			} else {
				release(v)
			}
		}
		<-r.window // the item has left the window
		r.mu.Lock()
	}
	r.emitting = false
	r.mu.Unlock()
	return res
}

// runAggregate is an aggregate stage's goroutine.
func (w *worker) runAggregate() error {
	if w.closeOut {
		defer close(w.out)
	}
	size := w.s.Size
	batch := make(value.List, 0, size)
	for {
		v, ok := recv(w.in, w.done)
		if !ok {
			if len(batch) == 0 {
				return nil
			}
			if w.s.DropLast || isDone(w.done) {
				release(batch)
				return nil
			}
			w.pass(batch)
			return w.err
		}
		w.sl.in.Add(1)
		batch = append(batch, v)
		if w.invoked(true) == fateFatal {
			release(batch)
			return w.err
		}
		if len(batch) < size {
			continue
		}
		switch w.pass(batch) {
		case fateFatal:
			return w.err
		case fateEnd:
			return nil
		}
		batch = make(value.List, 0, size)
	}
}

// runDisaggregate is a disaggregate stage's goroutine.
func (w *worker) runDisaggregate() error {
	if w.closeOut {
		defer close(w.out)
	}
	for {
		v, ok := recv(w.in, w.done)
		if !ok {
			return nil
		}
		w.sl.in.Add(1)
		var elems []any
		switch x := v.(type) {
		case value.List:
			elems = x
		case value.Tuple:
			elems = x
		case []any:
			elems = x
		default:
			item := value.Describe(v) // ours: the engine owns v here
			release(v)
			w.invoked(false)
			if w.failed(item, fmt.Errorf("disaggregate needs a list or tuple, got %T", v)) == fateFatal {
				return w.err
			}
			continue
		}
		if w.invoked(true) == fateFatal {
			release(v)
			return w.err
		}
		for i, e := range elems {
			switch w.pass(e) {
			case fateFatal:
				releaseAll(elems[i+1:])
				return w.err
			case fateEnd:
				releaseAll(elems[i+1:])
				return nil
			}
		}
	}
}

func releaseAll(vs []any) {
	for _, v := range vs {
		release(v)
	}
}

// describeOwned names an item that was handed to an op which then failed.
// The op owns it and may have released it, so it is read only when that is
// memory-safe: plain Go values, and containers of them, whose memory the GC
// keeps. Anything holding a Releaser (C memory) is named by type only.
func describeOwned(v any) string {
	if plain(v, 0) {
		return value.Describe(v)
	}
	switch x := v.(type) {
	case value.List:
		return fmt.Sprintf("<value.List of %d>", len(x))
	case value.Tuple:
		return fmt.Sprintf("<value.Tuple of %d>", len(x))
	case []any:
		return fmt.Sprintf("<[]any of %d>", len(x))
	}
	return fmt.Sprintf("<%T>", v)
}

func plain(v any, depth int) bool {
	if depth > 3 {
		return false
	}
	all := func(xs []any) bool {
		for _, e := range xs {
			if !plain(e, depth+1) {
				return false
			}
		}
		return true
	}
	switch x := v.(type) {
	case nil, bool, int, int64, float64, string, []byte:
		return true
	case value.List:
		return all(x)
	case value.Tuple:
		return all(x)
	case []any:
		return all(x)
	case *value.Dict:
		return x != nil && all(x.Values)
	}
	return false
}
