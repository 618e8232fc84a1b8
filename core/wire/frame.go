package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"golang.org/x/sys/unix"
)

// Frames are how messages cross a socket between a worker process and its
// parent: Python's multiprocessing.Connection framing, so that Go and
// Python can take turns on the same socket. A frame is a big-endian int32
// length and the payload; a payload of 2 GiB or more has the length -1,
// then a big-endian uint64 length.

// AppendFrame appends the framed payload (the concatenation of parts) to dst.
func AppendFrame(dst []byte, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > math.MaxInt32 {
		dst = binary.BigEndian.AppendUint32(dst, math.MaxUint32) // -1
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	} else {
		dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	}
	for _, p := range parts {
		dst = append(dst, p...)
	}
	return dst
}

// ReadFrame reads one frame from r into dst (reused when it has room) and
// returns the payload. A frame longer than max is an error, and r is then
// out of step. A stream that ends between frames gives io.EOF; one that
// ends inside a frame, io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, dst []byte, max int) ([]byte, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return nil, err
	}
	n := int64(int32(binary.BigEndian.Uint32(hdr[:4])))
	if n == -1 {
		if _, err := io.ReadFull(r, hdr[:8]); err != nil {
			return nil, noEOF(err)
		}
		u := binary.BigEndian.Uint64(hdr[:8])
		if u > math.MaxInt64 {
			return nil, fmt.Errorf("wire: a frame of %d bytes", u)
		}
		n = int64(u)
	}
	if n < 0 {
		return nil, fmt.Errorf("wire: a frame with the length %d", n)
	}
	if n > int64(max) {
		return nil, fmt.Errorf("wire: a frame of %d bytes, more than the %d expected", n, max)
	}
	if int64(cap(dst)) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	if _, err := io.ReadFull(r, dst); err != nil {
		return nil, noEOF(err)
	}
	return dst, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// FD is a blocking socket file descriptor that the caller owns: reads and
// writes go straight to it (no buffering, so another reader of the same
// socket, such as Python's Connection, can take over between frames).
type FD int

// Read reads what is there, at most len(p) bytes; 0 bytes is io.EOF.
func (fd FD) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(fd), p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of p. MSG_NOSIGNAL: a peer that is gone gives EPIPE, not
// a SIGPIPE that would kill the process.
func (fd FD) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.SendmsgN(int(fd), p[done:], nil, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// Readable waits up to timeout (< 0: forever) for something to read (or
// the peer's end); false when the time ran out first.
func (fd FD) Readable(timeout time.Duration) (bool, error) {
	ms := -1
	if timeout >= 0 {
		ms = int(min(timeout.Milliseconds(), math.MaxInt32))
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue // a signal for another thread; waiting the whole time again is fine here
		}
		if err != nil {
			return false, err
		}
		return n > 0, nil
	}
}
