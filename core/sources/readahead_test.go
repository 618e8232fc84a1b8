package sources

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/goleak"
)

// nopOpen opens a fixed reader.
func nopOpen(r io.Reader) func(context.Context, string) (io.ReadCloser, error) {
	return func(context.Context, string) (io.ReadCloser, error) { return io.NopCloser(r), nil }
}

func TestReadAheadIsByteExact(t *testing.T) {
	defer goleak.VerifyNone(t)
	const p = readAheadPiece
	for _, size := range []int{0, 1, p - 1, p, p + 1, 3*p + p/2} {
		for _, budget := range []int{0, p, 4 * p} {
			want := make([]byte, size)
			rand.NewChaCha8([32]byte{byte(size)}).Read(want) //nolint:errcheck
			// Small, odd reads below and above.
			r := startReadAhead(context.Background(), nopOpen(iotest.HalfReader(bytes.NewReader(want))), "x", budget, nil)
			got, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(r, 7)))
			if err != nil {
				t.Fatal(err)
			}
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, rest...)
			if !bytes.Equal(got, want) {
				t.Fatalf("size %d, budget %d: read %d bytes, not the stream", size, budget, len(got))
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestReadAheadErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	boom := errors.New("boom")
	// The data before a failure comes first, then the failure.
	data := bytes.Repeat([]byte("x"), readAheadPiece+100)
	r := startReadAhead(context.Background(), nopOpen(io.MultiReader(bytes.NewReader(data), iotest.ErrReader(boom))), "x", 0, nil)
	got, err := io.ReadAll(r)
	if !errors.Is(err, boom) || len(got) != len(data) {
		t.Fatalf("read %d bytes, err %v; want %d, then boom", len(got), err, len(data))
	}
	r.Close()
	// A failed open is wait's answer, and Read's.
	r = startReadAhead(context.Background(), func(context.Context, string) (io.ReadCloser, error) { return nil, boom }, "x", 0, nil)
	if err := r.wait(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("wait: %v", err)
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, boom) {
		t.Fatalf("read: %v", err)
	}
	r.Close()
}

// closeCounter counts Close calls.
type closeCounter struct {
	io.Reader
	closed *int
}

func (c closeCounter) Close() error { *c.closed++; return nil }

func TestReadAheadCloseStopsItsGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Closed with the budget full and the goroutine waiting to send more.
	closed := 0
	endless := closeCounter{Reader: rand.NewChaCha8([32]byte{1}), closed: &closed}
	r := startReadAhead(context.Background(), func(context.Context, string) (io.ReadCloser, error) { return endless, nil }, "x", 2*readAheadPiece, nil)
	if _, err := r.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let it fill the budget
	r.Close()
	if closed != 1 {
		t.Fatalf("the stream was closed %d times, want once", closed)
	}
	// Closed while open waits for the network: the cancel ends it.
	r = startReadAhead(context.Background(), func(ctx context.Context, _ string) (io.ReadCloser, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}, "x", 0, nil)
	r.Close()
	// The epoch's context ends: wait returns.
	ctx, cancel := context.WithCancel(context.Background())
	block := make(chan struct{})
	r = startReadAhead(ctx, func(context.Context, string) (io.ReadCloser, error) { <-block; return nil, io.EOF }, "x", 0, nil)
	cancel()
	if err := r.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait after cancel: %v", err)
	}
	close(block)
	r.Close()
}
