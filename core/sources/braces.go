package sources

import (
	"fmt"
	"strconv"
	"strings"
)

// maxExpansion bounds what one pattern may expand to.
const maxExpansion = 1 << 20

// ExpandBraces expands shard patterns as WebDataset writes them:
// "shard-{000000..000127}.tar" is a numeric range, zero-padded to the
// width of its first bound, and "{train,val}" a list. Several groups
// multiply out, left to right. A pattern without braces is itself.
func ExpandBraces(pattern string) ([]string, error) {
	out := []string{""}
	rest := pattern
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return nil, fmt.Errorf("shards: unmatched } in %q", pattern)
			}
			for i := range out {
				out[i] += rest
			}
			return out, nil
		}
		if c := strings.IndexByte(rest[:open], '}'); c >= 0 {
			return nil, fmt.Errorf("shards: unmatched } in %q", pattern)
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("shards: unmatched { in %q", pattern)
		}
		end += open
		alts, err := alternatives(rest[open+1:end], pattern)
		if err != nil {
			return nil, err
		}
		if len(out)*len(alts) > maxExpansion {
			return nil, fmt.Errorf("shards: %q expands to more than %d names", pattern, maxExpansion)
		}
		next := make([]string, 0, len(out)*len(alts))
		for _, o := range out {
			for _, a := range alts {
				next = append(next, o+rest[:open]+a)
			}
		}
		out, rest = next, rest[end+1:]
	}
}

func alternatives(group, pattern string) ([]string, error) {
	if strings.IndexByte(group, '{') >= 0 {
		return nil, fmt.Errorf("shards: nested braces in %q", pattern)
	}
	if lo, hi, ok := strings.Cut(group, ".."); ok {
		a, err1 := strconv.ParseInt(lo, 10, 64)
		b, err2 := strconv.ParseInt(hi, 10, 64)
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("shards: bad range {%s} in %q; want {first..last} with 0 <= first <= last", group, pattern)
		}
		if b-a >= maxExpansion {
			return nil, fmt.Errorf("shards: range {%s} in %q is longer than %d", group, pattern, maxExpansion)
		}
		width := len(lo)
		out := make([]string, 0, b-a+1)
		for i := a; i <= b; i++ {
			out = append(out, fmt.Sprintf("%0*d", width, i))
		}
		return out, nil
	}
	alts := strings.Split(group, ",")
	if len(alts) < 2 {
		return nil, fmt.Errorf("shards: {%s} in %q is neither a range {a..b} nor a list {x,y}", group, pattern)
	}
	return alts, nil
}
