package pipeline

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/spdl-go/spdl-go/core/value"
)

// One input, zero or several outputs.
//
// An op's result normally is the one item its stage passes on. Two kinds
// of result say otherwise:
//
//   - Skip: the input is consumed and nothing goes downstream. It is not a
//     failure; the stage's items_out just does not count it.
//   - A Stream: each item the stream yields goes downstream as its own
//     item, as soon as it is pulled, and counts in items_out. The worker
//     pulls with Next, under a Config.NumThreads token like a call (unless
//     the op is IOBound), never holding the token while it waits for room
//     downstream. In an output_order="input" stage the items of one input
//     stay together and in the order yielded, in the place of their input;
//     the worker that emits the head of the order pulls them. A Stream's
//     Next is not under the stage's Timeout, which covers the call that
//     returned the stream.
//
// If Next fails, the input fails as if its call had (its error counts
// against the stage's and the pipeline's failure limits); items it yielded
// before stay passed. The engine releases every stream it is handed
// (value.Release calls its Release) once drained, failed, or when the epoch
// ends first, so a stream must free there whatever it still holds.

// Skip, returned by an op as its result, passes nothing on for that input.
var Skip any = skipped{}

type skipped struct{}

// Stream is an op's result that passes on zero or more items, pulled one
// at a time.
type Stream interface {
	// Next returns the next item and true, or false at the end. On error
	// the stream has released any item it did not return.
	Next(ctx context.Context) (v any, ok bool, err error)
	// Release frees what the stream still holds (items not pulled). The
	// engine calls it exactly once, from one goroutine.
	value.Releaser
}

// Items returns a Stream over vs, which it owns: a simple 1→N result for
// an op that makes all its outputs at once.
func Items(vs ...any) Stream { return &items{vs: vs} }

type items struct{ vs []any }

func (s *items) Next(context.Context) (any, bool, error) {
	if len(s.vs) == 0 {
		return nil, false, nil
	}
	v := s.vs[0]
	s.vs[0] = nil
	s.vs = s.vs[1:]
	return v, true, nil
}

func (s *items) Release() {
	releaseAll(s.vs)
	s.vs = nil
}

// emit passes on an op's result (unordered stages): one item, none
// (Skip), or each item of a Stream.
func (w *worker) emit(res any) fate {
	switch x := res.(type) {
	case skipped:
		return fatePassed
	case Stream:
		return w.drain(x)
	}
	return w.pass(res)
}

// drain pulls every item of s and passes each on; it releases s. It
// returns fatePassed, or the first other fate of a pull or a pass.
func (w *worker) drain(s Stream) fate {
	defer s.Release()
	ep, sl := w.ep, w.sl
	tokens := ep.tokens
	if w.s.ioBound {
		tokens = nil
	}
	for {
		if tokens != nil && !send(tokens, struct{}{}, w.done) {
			return fateEnd
		}
		t0 := time.Now()
		v, ok, err := safePull(w.ctx, s)
		sl.busy.Add(int64(time.Since(t0)))
		if tokens != nil {
			<-tokens
		}
		switch {
		case err != nil:
			if isDone(w.done) {
				releaseErr(err)
				return fateEnd
			}
			return w.failed(describeFailed(s, err), err)
		case !ok:
			return fatePassed
		}
		if f := w.pass(v); f != fatePassed {
			if f == fateDropped {
				continue // the sink hook failed this one item; the rest go on
			}
			return f
		}
	}
}

func safePull(ctx context.Context, s Stream) (v any, ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, ok, err = nil, false, &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return s.Next(ctx)
}
