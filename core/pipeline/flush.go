package pipeline

import (
	"context"
	"errors"
	"runtime/debug"
	"time"
)

// Flusher is implemented by an op that holds items back between calls (a
// custom aggregation): the engine calls Flush once, when the stage's input
// has ended, before the stage's output closes, so the op can pass on what
// it still holds. Its result is like Process's: one item, Skip (nothing)
// or a Stream. A failed Flush counts as one failed invocation of the
// stage, like a failed call. Flush is not called when the epoch is stopped
// or fails first, nor when the stage itself failed fatally.
//
// An op's Flush runs only in a stage with one worker: New refuses a
// Flusher stage with Concurrency > 1, AutoConcurrency or a Timeout, since
// the end of the input is one moment only when one goroutine sees it.
// Flush runs on that worker's goroutine (after the op's last call, so
// ThreadBound ops keep their thread state), under a NumThreads token
// unless the op is IOBound.
type Flusher interface {
	Flush(ctx context.Context) (any, error)
}

// checkFlusher refuses a Flusher op in a stage with more than one worker.
func checkFlusher(sc *StageConfig) string {
	if _, ok := sc.Op.(Flusher); !ok {
		return ""
	}
	if sc.Concurrency != 1 || sc.AutoConcurrency || sc.Timeout != 0 {
		return "an op with Flush needs one worker: Concurrency 1, no AutoConcurrency, no Timeout"
	}
	return ""
}

// flush calls the op's Flush when the worker's input ended (the channel
// closed, not the epoch ended), and passes its result on. It returns the
// worker's fatal error, if any.
func (w *worker) flush() error {
	fl, ok := w.s.Op.(Flusher)
	if !ok || w.c.stopped.Load() || isDone(w.done) {
		return nil
	}
	ep, sl := w.ep, w.sl
	tokens := ep.tokens
	if w.s.ioBound {
		tokens = nil
	}
	if tokens != nil && !send(tokens, struct{}{}, w.done) {
		return nil
	}
	sl.active.Add(1)
	t0 := time.Now()
	out, err := safeFlush(w.ctx, fl)
	w.callEnded(t0, err != nil)
	if tokens != nil {
		<-tokens
	}
	if err != nil {
		if isDone(w.done) {
			releaseErr(err)
			return nil
		}
		w.invoked(false)
		item := "<flush at the end of the input>"
		var d ItemDescriber
		if errors.As(err, &d) && d.FailedItem() != "" {
			item = d.FailedItem()
		}
		w.failed(item, err)
		return w.err
	}
	if w.invoked(true) == fateFatal {
		release(out)
		return w.err
	}
	w.emit(out)
	return w.err
}

func safeFlush(ctx context.Context, fl Flusher) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return fl.Flush(ctx)
}
