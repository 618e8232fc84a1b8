package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
	"github.com/spdl-go/spdl-go/core/wire"
)

// Frames as Python's multiprocessing.Connection writes them:
// struct.pack("!i", n) + payload.
func TestFrames(t *testing.T) {
	cases := []struct {
		name    string
		in      []byte
		max     int
		want    []string
		wantErr string
	}{
		{"one", []byte("\x00\x00\x00\x02c2"), 64, []string{"c2"}, ""},
		{"two, then the end", []byte("\x00\x00\x00\x01a\x00\x00\x00\x03bcd"), 64, []string{"a", "bcd"}, ""},
		{"empty payload", []byte("\x00\x00\x00\x00"), 64, []string{""}, ""},
		{"long form (-1, then u64)", []byte("\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x02hi"), 64, []string{"hi"}, ""},
		{"too long", []byte("\x00\x00\x01\x00"), 64, nil, "more than the 64 expected"},
		{"negative", []byte("\xff\xff\xff\xfe"), 64, nil, "length -2"},
		{"long form too long", []byte("\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00"), 64, nil, "a frame of"},
		{"cut in the header", []byte("\x00\x00"), 64, nil, io.ErrUnexpectedEOF.Error()},
		{"cut in the payload", []byte("\x00\x00\x00\x05ab"), 64, nil, io.ErrUnexpectedEOF.Error()},
		{"cut in the long length", []byte("\xff\xff\xff\xff\x00"), 64, nil, io.ErrUnexpectedEOF.Error()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := bytes.NewReader(c.in)
			var got []string
			for {
				m, err := wire.ReadFrame(r, nil, c.max)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					if c.wantErr == "" || !strings.Contains(err.Error(), c.wantErr) {
						t.Fatalf("error %v, want %q", err, c.wantErr)
					}
					return
				}
				got = append(got, string(m))
			}
			if c.wantErr != "" {
				t.Fatalf("no error, want %q (got %q)", c.wantErr, got)
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestAppendFrameRoundTrip(t *testing.T) {
	for _, parts := range [][][]byte{{}, {[]byte("D\x01")}, {[]byte("D\x01"), bytes.Repeat([]byte{7}, 1000)}} {
		b := wire.AppendFrame([]byte("keep"), parts...)
		if string(b[:4]) != "keep" {
			t.Fatalf("the prefix changed: %q", b[:4])
		}
		m, err := wire.ReadFrame(bytes.NewReader(b[4:]), make([]byte, 0, 8), 1<<20)
		if err != nil || !bytes.Equal(m, bytes.Join(parts, nil)) {
			t.Fatalf("round trip: %q, %v", m, err)
		}
	}
}

// A socket pair, as between a worker and its parent: writes arrive whole,
// Readable waits for them, and a closed peer reads as io.EOF.
func TestFDOverSocketPair(t *testing.T) {
	sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := wire.FD(sv[0]), wire.FD(sv[1])
	defer unix.Close(sv[0])
	if ok, err := a.Readable(10 * time.Millisecond); ok || err != nil {
		t.Fatalf("nothing sent yet, but readable: %v, %v", ok, err)
	}
	big := bytes.Repeat([]byte("x"), 1<<20) // more than the socket buffer: Write loops
	done := make(chan error, 1)
	go func() {
		_, err := b.Write(wire.AppendFrame(nil, []byte("D\x01"), big))
		done <- err
	}()
	if ok, err := a.Readable(-1); !ok || err != nil {
		t.Fatalf("a frame was sent, but not readable: %v, %v", ok, err)
	}
	m, err := wire.ReadFrame(a, nil, 2<<20)
	if err != nil || len(m) != 2+len(big) || string(m[:2]) != "D\x01" {
		t.Fatalf("read %d bytes, %v", len(m), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	unix.Close(sv[1])
	if ok, err := a.Readable(time.Second); !ok || err != nil {
		t.Fatalf("a closed peer should read as ready: %v, %v", ok, err)
	}
	if _, err := wire.ReadFrame(a, nil, 64); !errors.Is(err, io.EOF) {
		t.Fatalf("closed peer: %v, want io.EOF", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, unix.EPIPE) {
		t.Fatalf("write to a closed peer: %v, want EPIPE (and no SIGPIPE)", err)
	}
}

func TestEncodedTensor(t *testing.T) {
	tt, err := tensor.New(tensor.UInt8, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		v    any
		one  bool
	}{
		{"one tensor", tt, true},
		{"a list of one tensor", value.List{tt.Retain()}, false},
		{"an int", int64(9), false},
	} {
		enc, _, err := wire.EncodeC(nil, c.v, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p := enc.Tensor(); (p != nil) != c.one {
			t.Fatalf("%s: Tensor() = %v", c.name, p)
		}
		enc.Release()
	}
	if s := tensor.MemStats(); s.LiveTensors != 0 {
		t.Fatalf("leak: %+v", s)
	}
}

// FuzzReadFrame: any bytes give frames or an error, never a panic or an
// allocation beyond max.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x02c2"))
	f.Add([]byte("\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x02hi"))
	f.Add([]byte("\x7f\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for first := true; ; first = false {
			m, err := wire.ReadFrame(r, nil, 1024)
			if err != nil {
				return
			}
			if len(m) > 1024 {
				t.Fatalf("a frame of %d bytes past the limit", len(m))
			}
			if n := int32(binary.BigEndian.Uint32(b)); first && n >= 0 && int(n) != len(m) {
				t.Fatalf("a frame of %d bytes from a header that says %d", len(m), n)
			}
		}
	})
}
