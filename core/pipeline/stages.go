package pipeline

import (
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"

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

func (ep *epoch) launchOrdered(g *errgroup.Group, s *stageInfo, c *stageCounters, in <-chan any, out chan<- any, closeOut bool) {
	w := 2 * s.Concurrency
	r := &reorder{slots: make([]rslot, w), window: make(chan struct{}, w)}
	for i := range s.Concurrency {
		sl := &c.slots[i]
		if s.Timeout > 0 {
			g.Go(func() error {
				return ep.supervise(s, c, sl, r, out, closeOut, func(is *inner) error { return ep.orderedLoop(s, c, sl, r, in, out, is) })
			})
			continue
		}
		g.Go(onThread(s.Op, func() error { return ep.runOrderedWorker(s, c, sl, r, in, out, closeOut) }))
	}
}

func (ep *epoch) runOrderedWorker(s *stageInfo, c *stageCounters, sl *slot, r *reorder, in <-chan any, out chan<- any, closeOut bool) error {
	// Emitting happens only inside complete, so once the last worker is
	// here nobody can send to out any more.
	defer c.workerExit(out, closeOut)
	return ep.orderedLoop(s, c, sl, r, in, out, nil)
}

// orderedLoop is the body of an ordered worker; is links it to its
// supervisor in a stage with a Timeout (nil otherwise).
func (ep *epoch) orderedLoop(s *stageInfo, c *stageCounters, sl *slot, r *reorder, in <-chan any, out chan<- any, is *inner) error {
	var fatal error
	for {
		if !c.enter(ep.done) {
			return fatal
		}
		more, lost := ep.orderedOne(s, c, sl, r, in, out, is, &fatal)
		if lost {
			return nil // the supervisor completed the item and gave back the tokens
		}
		c.leave()
		if !more {
			return fatal
		}
	}
}

// orderedOne takes, runs and completes one item; more is false when the
// worker should return, lost when its call was abandoned.
func (ep *epoch) orderedOne(s *stageInfo, c *stageCounters, sl *slot, r *reorder, in <-chan any, out chan<- any, is *inner, fatal *error) (more, lost bool) {
	{
		if !send(r.window, struct{}{}, ep.done) {
			return false, false
		}
		r.rmu.Lock()
		v, ok := recv(in, ep.done)
		seq := r.next
		if ok {
			r.next++
		}
		r.rmu.Unlock()
		if !ok {
			<-r.window
			return false, false
		}
		sl.in.Add(1)
		if isDone(ep.done) {
			release(v)
			r.complete(ep, sl, seq, nil, false, out)
			return false, false
		}
		res, ok, err, lost := ep.call(s, c, sl, v, is, seq)
		if lost {
			return false, true
		}
		if err != nil && *fatal == nil {
			*fatal = err
		}
		// Always complete: the head must move past every number taken.
		r.complete(ep, sl, seq, res, ok, out)
		return true, false
	}
}

// complete stores the outcome of item seq and, if it is the head and no
// one else is emitting, emits it and every ready item behind it.
func (r *reorder) complete(ep *epoch, sl *slot, seq uint64, v any, ok bool, out chan<- any) {
	n := uint64(len(r.slots))
	r.mu.Lock()
	st := uint8(slotSkip)
	if ok {
		st = slotReady
	}
	r.slots[seq%n] = rslot{v: v, state: st}
	if r.emitting || seq != r.head {
		r.mu.Unlock()
		return
	}
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
		if ready {
			if send(out, v, ep.done) {
				sl.out.Add(1)
				sl.occ.Add(int64(len(out)))
			} else {
				release(v)
			}
		}
		<-r.window // the item has left the window
		r.mu.Lock()
	}
	r.emitting = false
	r.mu.Unlock()
}

func (ep *epoch) runAggregate(s *stageInfo, c *stageCounters, in <-chan any, out chan<- any, closeOut bool) error {
	if closeOut {
		defer close(out)
	}
	sl := &c.slots[s.Concurrency]
	batch := make(value.List, 0, s.Size)
	for {
		v, ok := recv(in, ep.done)
		if !ok {
			if len(batch) == 0 {
				return nil
			}
			if s.DropLast || isDone(ep.done) || !send(out, any(batch), ep.done) {
				release(batch)
				return nil
			}
			sl.out.Add(1)
			sl.occ.Add(int64(len(out)))
			return nil
		}
		sl.in.Add(1)
		batch = append(batch, v)
		if len(batch) < s.Size {
			continue
		}
		if !send(out, any(batch), ep.done) {
			release(batch)
			return nil
		}
		sl.out.Add(1)
		sl.occ.Add(int64(len(out)))
		batch = make(value.List, 0, s.Size)
	}
}

func (ep *epoch) runDisaggregate(s *stageInfo, c *stageCounters, in <-chan any, out chan<- any, closeOut bool) error {
	if closeOut {
		defer close(out)
	}
	sl := &c.slots[s.Concurrency]
	for {
		v, ok := recv(in, ep.done)
		if !ok {
			return nil
		}
		sl.in.Add(1)
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
			if err := ep.itemFailed(s, c, item, fmt.Errorf("disaggregate needs a list or tuple, got %T", v)); err != nil {
				return err
			}
			continue
		}
		for i, e := range elems {
			if !send(out, e, ep.done) {
				for _, rest := range elems[i:] {
					release(rest)
				}
				return nil
			}
			sl.out.Add(1)
			sl.occ.Add(int64(len(out)))
		}
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
