package wire_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
	"github.com/spdl-go/spdl-go/core/wire"
)

func TestRoundTrip(t *testing.T) {
	dict := value.NewDict(2)
	dict.Set("a", int64(1))
	dict.Set("b", value.List{"x", []byte("y"), nil})
	cases := []struct {
		name string
		in   any
		want any // when encoding normalises the Go type
	}{
		{"none", nil, nil},
		{"true", true, nil},
		{"false", false, nil},
		{"int64", int64(-1 << 63), nil},
		{"int", 42, int64(42)},
		{"float64", 2.5, nil},
		{"float32", float32(0.5), 0.5},
		{"string", "héllo", nil},
		{"empty string", "", nil},
		{"bytes", []byte{0, 1, 255}, nil},
		{"empty bytes", []byte{}, nil},
		{"list", value.List{int64(1), "two", value.List{}}, nil},
		{"[]any", []any{int64(1)}, value.List{int64(1)}},
		{"tuple", value.Tuple{int64(1), nil}, nil},
		{"dict", dict, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := wire.Encode(nil, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := (&wire.Decoder{}).Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == nil {
				want = tc.in
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip: got %#v, want %#v", got, want)
			}
		})
	}
}

func TestEncodeRejectsUnknownTypesWithoutHandingOver(t *testing.T) {
	tt, err := tensor.New(tensor.Float32, 2)
	if err != nil {
		t.Fatal(err)
	}
	v := value.List{tt, struct{}{}}
	if _, err := wire.Encode(nil, v); err == nil || !strings.Contains(err.Error(), "element 1") {
		t.Fatalf("err = %v, want one naming element 1", err)
	}
	// The tensor still belongs to the caller.
	if tt.NBytes() != 8 {
		t.Fatal("tensor was detached by a failed encode")
	}
	value.Release(v)
	if s := tensor.MemStats(); s.LiveTensors != 0 {
		t.Fatalf("live tensors %d", s.LiveTensors)
	}
}

func TestTensorMovesAcrossTrustedWire(t *testing.T) {
	tt, err := tensor.New(tensor.UInt8, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	copy(tt.Bytes(), bytes.Repeat([]byte{7}, 12))
	b, err := wire.Encode(nil, value.List{tt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&wire.Decoder{}).Decode(b); err == nil {
		t.Fatal("untrusted decoder accepted a pointer tag")
	}
	got, err := (&wire.Decoder{TrustPointers: true}).Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	back := got.(value.List)[0].(*tensor.Tensor)
	if !reflect.DeepEqual(back.Shape(), []int64{3, 4}) || back.Bytes()[11] != 7 {
		t.Fatalf("got %v", back)
	}
	value.Release(got)
	if s := tensor.MemStats(); s.LiveTensors != 0 || s.LiveBytes != 0 {
		t.Fatalf("leak: %+v", s)
	}
}

func TestArrowExportIsOwnedByReceiver(t *testing.T) {
	arr, err := columnar.FromValues([]any{int64(1), nil, int64(3)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := wire.Encode(nil, arr)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 'A' || len(b) != 17 {
		t.Fatalf("encoded %q", b)
	}
	if columnar.Allocator.AllocatedBytes() == 0 {
		t.Fatal("export released the buffers before the receiver did")
	}
	wire.FreeExportedArrow(b[1:])
	columnar.Allocator.AssertSize(t, 0)
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"unknown tag", []byte{'Z'}, "unknown tag"},
		{"short int", []byte{'i', 1, 2}, "truncated"},
		{"huge length", append([]byte{'s'}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), "exceeds"},
		{"trailing", []byte{'N', 'N'}, "trailing"},
		{"list too short", append([]byte{'l'}, 2, 0, 0, 0, 0, 0, 0, 0, 'N'), "truncated"},
		{"deep", bytes.Repeat(append([]byte{'l'}, 1, 0, 0, 0, 0, 0, 0, 0), 100), "deeper"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&wire.Decoder{}).Decode(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	d := value.NewDict(1)
	d.Set("k", value.Tuple{int64(1), 2.0, "s", []byte("b"), nil, true})
	for _, v := range []any{nil, int64(5), "x", value.List{d}, d} {
		b, err := wire.Encode(nil, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{'O', 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		released := 0
		dec := &wire.Decoder{ReleasePy: func(uint64) { released++ }}
		v, err := dec.Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to the same bytes.
		out, err := wire.Encode(nil, v)
		if err != nil {
			t.Fatalf("decoded %#v but cannot encode it: %v", v, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding changed the bytes:\n in %q\nout %q", b, out)
		}
	})
}

func TestEncodedReleaseGivesBackEveryReference(t *testing.T) {
	tt, err := tensor.New(tensor.Float32, 4)
	if err != nil {
		t.Fatal(err)
	}
	arr, err := columnar.FromValues([]any{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	var released []uint64
	dec := &wire.Decoder{ReleasePy: func(id uint64) { released = append(released, id) }}
	v := value.List{tt, arr, wire.NewPyObject(7, dec.ReleasePy), "plain"}
	enc, _, err := wire.EncodeC(nil, v, dec)
	if err != nil {
		t.Fatal(err)
	}
	if s := tensor.MemStats(); s.LiveTensors != 1 {
		t.Fatalf("the encoded item should hold the tensor: %+v", s)
	}
	enc.Release()
	enc.Release() // a no-op the second time
	if s := tensor.MemStats(); s.LiveTensors != 0 || s.LiveBytes != 0 {
		t.Fatalf("tensor not released: %+v", s)
	}
	columnar.Allocator.AssertSize(t, 0)
	if len(released) != 1 || released[0] != 7 {
		t.Fatalf("python refs released: %v", released)
	}
}

func TestEncodedTakeHandsOver(t *testing.T) {
	enc, _, err := wire.EncodeC(nil, value.Tuple{int64(1), "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, n := enc.Take()
	b := append([]byte(nil), unsafe.Slice((*byte)(p), n)...)
	wire.Free(p)
	enc.Release() // nothing left to release
	got, err := (&wire.Decoder{}).Decode(b)
	if err != nil || !reflect.DeepEqual(got, value.Tuple{int64(1), "x"}) {
		t.Fatalf("got %#v, %v", got, err)
	}
}

// TestEncodeChecksText: a Go string that Python would not decode (not
// UTF-8, surrogates aside) fails the encode, naming where it is.
func TestEncodeChecksText(t *testing.T) {
	d := value.NewDict(2)
	d.Set("ok", "fine")
	d.Set("text", value.List{"a", "b\xffc"})
	bad := value.NewDict(1)
	bad.Set("k\xfe", int64(1))
	cases := []struct {
		name string
		in   any
		want string // "" when it encodes
	}{
		{"utf-8", "héllo ✓ 🙂", ""},
		{"surrogate (surrogatepass)", "x\xed\xa0\x80y", ""},
		{"bad byte", "a\xffb", "wire: text is not valid UTF-8 (byte 1 of 3)"},
		{"truncated rune", "ab\xe2\x9c", "wire: text is not valid UTF-8 (byte 2 of 4)"},
		{"overlong", "\xc0\xaf", "wire: text is not valid UTF-8 (byte 0 of 2)"},
		{"in a dict", d, `key "text": element 1: wire: text is not valid UTF-8 (byte 1 of 3)`},
		{"a key", bad, `key "k\xfe": wire: text is not valid UTF-8 (byte 1 of 2)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := wire.Encode(nil, tc.in)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := (&wire.Decoder{}).Decode(b); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
