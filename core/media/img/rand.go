package img

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"sync/atomic"

	"github.com/spdl-go/spdl-go/core/value"
)

// Rand is a small deterministic generator (SplitMix64) for the draws of
// one item. It is not safe for concurrent use; each item gets its own.
type Rand struct{ s uint64 }

// NewRand returns a generator whose draws are a function of seed.
func NewRand(seed uint64) *Rand { return &Rand{s: mix(seed)} }

func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Uint64 returns the next 64 random bits.
func (r *Rand) Uint64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Float64 returns a uniform draw from [0, 1).
func (r *Rand) Float64() float64 { return float64(r.Uint64()>>11) / (1 << 53) }

// Intn returns a uniform draw from [0, n); n must be positive.
func (r *Rand) Intn(n int) int {
	// Lemire's multiply-shift with rejection: unbiased.
	un := uint64(n)
	hi, lo := bits.Mul64(r.Uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), un)
		}
	}
	return int(hi)
}

// randomizer makes the per-item generators of one random op.
//
// Without a key, item n (in the order Process is called) draws from
// stream(seed, op, n): the same seed and the same item order repeat the
// same draws, and successive epochs continue the count and so differ.
// With a key (rng_key), an item's draws depend only on (seed, op, the value
// of that dict key), whatever the order and the concurrency; they repeat
// every epoch unless the key (or the seed) changes with the epoch.
type randomizer struct {
	seed    uint64
	op      uint64 // the op's name, hashed: two ops with one seed draw differently
	key     string
	counter atomic.Uint64
}

func newRandomizer(op string, seed uint64, key string) *randomizer {
	h := fnv.New64a()
	h.Write([]byte(op))
	return &randomizer{seed: seed, op: h.Sum64(), key: key}
}

// forItem returns the generator for item, which must be a dict holding
// the key when the randomizer has one.
func (r *randomizer) forItem(item any) (*Rand, error) {
	if r.key == "" {
		n := r.counter.Add(1) - 1
		return &Rand{s: mix(r.seed ^ mix(r.op^mix(n)))}, nil
	}
	d, ok := item.(*value.Dict)
	if !ok {
		return nil, fmt.Errorf("rng_key %q needs dict items, got %s; drop rng_key or make items dicts", r.key, value.Describe(item))
	}
	v, ok := d.Get(r.key)
	if !ok {
		return nil, fmt.Errorf("rng_key %q: the item has no such key (keys: %v)", r.key, d.Keys)
	}
	k, err := keyHash(v)
	if err != nil {
		return nil, fmt.Errorf("rng_key %q: %w", r.key, err)
	}
	// A different constant from the counter path keeps key k and item k apart.
	return &Rand{s: mix(r.seed ^ mix(r.op^mix(k^0x5bd1e9955bd1e995)))}, nil
}

// keyHash hashes an rng_key value: int, float, bool, str or bytes.
func keyHash(v any) (uint64, error) {
	h := fnv.New64a()
	var b [9]byte
	switch x := v.(type) {
	case int64:
		b[0] = 'i'
		binary.LittleEndian.PutUint64(b[1:], uint64(x))
		h.Write(b[:])
	case int:
		b[0] = 'i'
		binary.LittleEndian.PutUint64(b[1:], uint64(x))
		h.Write(b[:])
	case float64:
		b[0] = 'f'
		binary.LittleEndian.PutUint64(b[1:], math.Float64bits(x))
		h.Write(b[:])
	case bool:
		b[0] = 'b'
		if x {
			b[1] = 1
		}
		h.Write(b[:2])
	case string:
		h.Write([]byte{'s'})
		h.Write([]byte(x))
	case []byte:
		h.Write([]byte{'y'})
		h.Write(x)
	default:
		return 0, fmt.Errorf("its value %s is not an int, float, bool, str or bytes", value.Describe(v))
	}
	return h.Sum64(), nil
}
