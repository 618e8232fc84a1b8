package pipeline

import (
	"context"
	"errors"
	"io"
)

// Slice returns a Source that yields items in order, every epoch. The items
// are handed out again each epoch, so they must be plain values (no
// value.Releaser): an op that released one would break the next epoch.
func Slice(items []any) Source { return sliceSource(items) }

type sliceSource []any

func (s sliceSource) Open(context.Context) (Iterator, error) {
	return &sliceIter{items: s}, nil
}

type sliceIter struct {
	items []any
	i     int
}

func (it *sliceIter) Next(context.Context) (any, error) {
	if it.i >= len(it.items) {
		return nil, io.EOF
	}
	v := it.items[it.i]
	it.i++
	return v, nil
}

func (it *sliceIter) Close() error { return nil }

// Range returns a Source that yields int64 values start, start+step, ...
// up to but excluding stop, like Python's range. Open fails if step is 0.
func Range(start, stop, step int64) Source { return rangeSource{start, stop, step} }

type rangeSource struct{ start, stop, step int64 }

func (r rangeSource) Open(context.Context) (Iterator, error) {
	if r.step == 0 {
		return nil, errors.New("range step must not be 0")
	}
	return &rangeIter{next: r.start, stop: r.stop, step: r.step}, nil
}

type rangeIter struct{ next, stop, step int64 }

func (it *rangeIter) Next(context.Context) (any, error) {
	if (it.step > 0 && it.next >= it.stop) || (it.step < 0 && it.next <= it.stop) {
		return nil, io.EOF
	}
	v := it.next
	it.next += it.step
	return v, nil
}

func (it *rangeIter) Close() error { return nil }
