package sources

import (
	"context"
	"io"
	"sync"
	"time"
)

// readAheadPiece is how much one read of the underlying stream asks for.
const readAheadPiece = 1 << 20

// readAhead opens and reads a stream in a goroutine of its own, up to a
// byte budget ahead of its consumer: the next shard is opened (a HEAD and
// the first range request, for remote ones) while the current one is
// still being read, and a remote shard's next range request is in flight
// while the last one is consumed. The goroutine is owned by the
// readAhead: Close cancels its context and waits for it.
type readAhead struct {
	stats   *ioStats // counts the bytes read and the waits for them (nil: none)
	cancel  context.CancelFunc
	opened  chan struct{} // closed once open has returned
	openErr error
	rc      io.ReadCloser
	pieces  chan readAheadResult
	done    sync.WaitGroup

	piece *[]byte // the piece being read, back to piecePool once read
	cur   []byte  // what is left of it
	err   error   // the stream's end or failure, once reached
}

type readAheadResult struct {
	b   *[]byte // from piecePool
	n   int
	err error
}

var piecePool = sync.Pool{New: func() any { b := make([]byte, readAheadPiece); return &b }}

// startReadAhead opens name with open in a new goroutine and reads ahead
// up to budget bytes (at least one piece).
func startReadAhead(ctx context.Context, open func(context.Context, string) (io.ReadCloser, error), name string, budget int, stats *ioStats) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	r := &readAhead{stats: stats, cancel: cancel, opened: make(chan struct{}), pieces: make(chan readAheadResult, max(budget/readAheadPiece, 1))}
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		defer close(r.pieces)
		rc, err := open(ctx, name)
		r.rc, r.openErr = rc, err
		close(r.opened)
		if err != nil {
			return
		}
		for ctx.Err() == nil {
			b := piecePool.Get().(*[]byte)
			n, err := io.ReadFull(rc, *b)
			if err == io.ErrUnexpectedEOF {
				err = io.EOF // a short last piece
			}
			select {
			case r.pieces <- readAheadResult{b, n, err}:
			case <-ctx.Done():
				piecePool.Put(b)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

// wait returns open's error, once it has returned.
func (r *readAhead) wait(ctx context.Context) error {
	select {
	case <-r.opened:
		return r.openErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *readAhead) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		r.release()
		if r.err != nil {
			return 0, r.err
		}
		res, ok := r.receive()
		if !ok { // the goroutine stopped early: cancelled
			r.err = context.Canceled
			if r.openErr != nil {
				r.err = r.openErr
			}
			return 0, r.err
		}
		// The data first, then the error that ended it.
		r.piece, r.cur, r.err = res.b, (*res.b)[:res.n], res.err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// receive takes the next piece, counting the time if it has to wait.
func (r *readAhead) receive() (readAheadResult, bool) {
	select {
	case res, ok := <-r.pieces:
		r.count(res, ok)
		return res, ok
	default:
	}
	t0 := time.Now()
	res, ok := <-r.pieces
	if r.stats != nil {
		r.stats.waited(t0)
	}
	r.count(res, ok)
	return res, ok
}

func (r *readAhead) count(res readAheadResult, ok bool) {
	if ok && r.stats != nil {
		r.stats.bytes.Add(int64(res.n))
	}
}

func (r *readAhead) release() {
	if r.piece != nil {
		piecePool.Put(r.piece)
		r.piece, r.cur = nil, nil
	}
}

// Close stops the goroutine, waits for it and closes the stream.
func (r *readAhead) Close() error {
	r.cancel()
	for res := range r.pieces { // unblock a pending send
		piecePool.Put(res.b)
	}
	r.done.Wait()
	r.release()
	if r.rc != nil {
		return r.rc.Close()
	}
	return nil
}
