package value_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/value"
)

func TestOrigin(t *testing.T) {
	named := []byte("not really a jpeg")
	value.SetOrigin(named, "/data/a.jpg")
	other := []byte("not really a jpeg")
	emptyNamed := make([]byte, 0, 1)
	value.SetOrigin(emptyNamed, "/data/empty.jpg")
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"named bytes", named, `<17 bytes of "/data/a.jpg">`},
		{"in a tuple", value.Tuple{named, int64(3)}, `(<17 bytes of "/data/a.jpg">, 3)`},
		{"equal bytes elsewhere", other, "<17 bytes>"},
		{"a sub-slice", named[1:], "<16 bytes>"},
		{"empty, no capacity", []byte{}, "<0 bytes>"},
		{"empty, named", emptyNamed, `<0 bytes of "/data/empty.jpg">`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := value.Describe(tc.v); got != tc.want {
				t.Errorf("Describe = %s, want %s", got, tc.want)
			}
		})
	}
	runtime.KeepAlive(named)
	runtime.KeepAlive(emptyNamed)
}

func TestOriginKeepsTheLatestRecords(t *testing.T) {
	first := make([]byte, 64)
	value.SetOrigin(first, "first")
	keep := make([][]byte, 5000)
	for i := range keep {
		keep[i] = make([]byte, 64)
		value.SetOrigin(keep[i], fmt.Sprint("f", i))
	}
	if _, ok := value.Origin(first); ok {
		t.Error("the oldest record survived 5000 newer ones (the table must stay bounded)")
	}
	if name, ok := value.Origin(keep[4999]); !ok || name != "f4999" {
		t.Errorf("latest record: %q, %v", name, ok)
	}
	runtime.KeepAlive(keep)
}

func TestOriginDoesNotOutliveItsBytes(t *testing.T) {
	// Collected bytes match nothing, even if new ones take their address.
	for i := range 200 {
		b := make([]byte, 4096)
		value.SetOrigin(b, fmt.Sprint("gone", i))
	}
	runtime.GC()
	for range 200 {
		b := make([]byte, 4096)
		if d := value.Describe(b); strings.Contains(d, "gone") {
			t.Fatalf("fresh bytes described as %s", d)
		}
	}
}
