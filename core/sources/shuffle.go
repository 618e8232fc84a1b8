package sources

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
)

// shuffler hands out a stream's items in random order through a buffer of
// size items, as WebDataset's shuffle stage does: each item is at most
// size-1 places from where it would be without shuffling, in expectation.
type shuffler struct {
	size int
	rng  *rand.Rand
	buf  []any
	eof  bool
}

func newShuffler(size int, seed, stream uint64) *shuffler {
	if size <= 0 {
		return nil
	}
	return &shuffler{size: size, rng: rand.New(rand.NewPCG(seed, stream))}
}

// next returns an item of read's stream. Failed items (any error but
// io.EOF) pass straight on; io.EOF comes once the buffer is empty. A nil
// shuffler (no buffer) hands read's items on in order.
func (s *shuffler) next(ctx context.Context, read func(context.Context) (any, error)) (any, error) {
	if s == nil {
		return read(ctx)
	}
	for !s.eof && len(s.buf) < s.size {
		v, err := read(ctx)
		if errors.Is(err, io.EOF) {
			s.eof = true
			break
		}
		if err != nil {
			return nil, err
		}
		s.buf = append(s.buf, v)
	}
	if len(s.buf) == 0 {
		return nil, io.EOF
	}
	i := s.rng.IntN(len(s.buf))
	v := s.buf[i]
	s.buf[i] = s.buf[len(s.buf)-1]
	s.buf = s.buf[:len(s.buf)-1]
	return v, nil
}

// drop releases what is buffered.
func (s *shuffler) drop(release func(any)) {
	if s == nil {
		return
	}
	for _, v := range s.buf {
		release(v)
	}
	s.buf = nil
}
