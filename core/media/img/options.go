package img

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/value"
)

// optReader is options.Reader plus the option shapes image ops share.
type optReader struct {
	*options.Reader
}

// numbers reads a list or tuple of n numbers (any length if n is 0).
func (o *optReader) numbers(name string, n int, def []float64) ([]float64, error) {
	v, ok := o.Get(name)
	if !ok {
		return def, nil
	}
	s, ok := options.AsSeq(v)
	if !ok || (n > 0 && len(s) != n) || len(s) == 0 {
		what := "a list of numbers"
		if n > 0 {
			what = fmt.Sprintf("a list of %d numbers", n)
		}
		return nil, fmt.Errorf("option %q must be %s, not %s", name, what, value.Describe(v))
	}
	out := make([]float64, len(s))
	for i, e := range s {
		if out[i], ok = options.AsFloat(e); !ok {
			return nil, fmt.Errorf("option %q must be a list of numbers, not %s", name, value.Describe(v))
		}
	}
	return out, nil
}

func (o *optReader) pair(name string, def [2]float64) ([2]float64, error) {
	s, err := o.numbers(name, 2, def[:])
	if err != nil {
		return def, err
	}
	return [2]float64{s[0], s[1]}, nil
}

// size reads [height, width], or an int meaning a square when square is
// set. It returns 0, 0 when the option is absent.
func (o *optReader) size(name string, square bool) (int, int, error) {
	v, ok := o.Get(name)
	if !ok {
		return 0, 0, nil
	}
	if n, ok := options.AsInt(v); ok && square {
		if n <= 0 || n > math.MaxInt32 {
			return 0, 0, fmt.Errorf("option %q must be positive, not %d", name, n)
		}
		return int(n), int(n), nil
	}
	s, ok := options.AsSeq(v)
	if ok && len(s) == 2 {
		h, okH := options.AsInt(s[0])
		w, okW := options.AsInt(s[1])
		if okH && okW && h > 0 && w > 0 && h <= math.MaxInt32 && w <= math.MaxInt32 {
			return int(h), int(w), nil
		}
	}
	if _, isInt := options.AsInt(v); isInt {
		return 0, 0, fmt.Errorf("option %q must be [height, width], not %s; for torchvision's Resize(n) use short_side=n", name, value.Describe(v))
	}
	return 0, 0, fmt.Errorf("option %q must be [height, width] of positive ints, not %s", name, value.Describe(v))
}

// seed reads the seed option; without one, draws differ from run to run.
func (o *optReader) seed() (uint64, error) {
	v, ok := o.Get("seed")
	if !ok {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	if u, ok := options.AsUint64(v); ok { // JSON keeps seeds >= 2**63 exact
		return u, nil
	}
	n, ok := options.AsInt(v)
	if !ok {
		return 0, fmt.Errorf("option \"seed\" must be an int or None, not %s", value.Describe(v))
	}
	return uint64(n), nil
}

// randomizer reads seed and rng_key for an op named op.
func (o *optReader) randomizer(op string) (*randomizer, error) {
	seed, err := o.seed()
	if err != nil {
		return nil, err
	}
	key, err := o.String("rng_key", "")
	if err != nil {
		return nil, err
	}
	return newRandomizer(op, seed, key), nil
}

func (o *optReader) interp() (Interp, error) {
	s, err := o.String("interpolation", "bilinear")
	if err != nil {
		return 0, err
	}
	return ParseInterp(s)
}
