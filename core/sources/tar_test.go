package sources_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

type member struct {
	name string
	data string
}

// shard writes a tar of members in the given format.
func shard(t testing.TB, path string, format tar.Format, members ...member) {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range members {
		hdr := &tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg, Format: format}
		if strings.HasSuffix(m.name, "/") {
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// samples writes n samples (jpg, cls, json) for shard s.
// writeShards writes n shards s0.tar, s1.tar, ... of per samples each
// into dir and returns their paths.
func writeShards(t testing.TB, dir string, format tar.Format, n, per int) []string {
	t.Helper()
	var shards []string
	for s := range n {
		p := filepath.Join(dir, fmt.Sprintf("s%d.tar", s))
		shard(t, p, format, samples(s, per)...)
		shards = append(shards, p)
	}
	return shards
}

func samples(s, n int) []member {
	var out []member
	for i := range n {
		k := fmt.Sprintf("s%d/%06d", s, i)
		out = append(out, member{k + ".jpg", "image " + k}, member{k + ".cls", fmt.Sprintf("%d\n", i%3)},
			member{k + ".json", fmt.Sprintf(`{"id": %d, "tags": ["a", "b"], "w": 0.5}`, i)})
	}
	return out
}

type result struct {
	keys     []string
	items    []*value.Dict
	failures []string
}

// drainSource reads one epoch of src: its dicts, and the items it failed.
func drainSource(t testing.TB, src pipeline.Source) (items []*value.Dict, failures []string) {
	t.Helper()
	it, err := src.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for range 100000 {
		v, err := it.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return items, failures
		}
		var f *pipeline.ItemFailure
		if errors.As(err, &f) {
			failures = append(failures, f.Error())
			continue
		}
		if err != nil {
			t.Fatalf("fatal error from the source: %v", err)
		}
		items = append(items, v.(*value.Dict))
	}
	t.Fatal("the source never ended")
	return nil, nil
}

func readAll(t testing.TB, src pipeline.Source) result {
	t.Helper()
	var r result
	r.items, r.failures = drainSource(t, src)
	for _, d := range r.items {
		k, _ := d.Get("__key__")
		r.keys = append(r.keys, k.(string))
	}
	return r
}

func mustTar(t testing.TB, o sources.TarOptions) *sources.TarSource {
	t.Helper()
	s, err := sources.NewTarSource(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTarSamplesAndFields(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("deep/", 30) + "000007" // > 100 bytes: needs GNU or PAX long names
	for _, format := range []tar.Format{tar.FormatGNU, tar.FormatPAX} {
		t.Run(format.String(), func(t *testing.T) {
			p := filepath.Join(dir, format.String()+".tar")
			ms := append(samples(0, 2), member{"s0/", ""}, member{"README", "no extension: skipped"},
				member{"s0/._000009.jpg", "macOS resource fork: skipped"},
				member{long + ".jpg", "long"}, member{long + ".cls", "2"}, member{long + ".json", "{}"})
			shard(t, p, format, ms...)
			r := readAll(t, mustTar(t, sources.TarOptions{
				Shards: []string{p}, Required: []string{"jpg", "cls"},
				Decode: map[string]string{"cls": "int", "json": "json", "jpg": "bytes"},
			}))
			if len(r.failures) != 0 {
				t.Fatalf("failures: %v", r.failures)
			}
			if want := []string{"s0/000000", "s0/000001", long}; !slices.Equal(r.keys, want) {
				t.Fatalf("keys %v, want %v", r.keys, want)
			}
			d := r.items[1]
			if got := value.Describe(d); got != fmt.Sprintf(`{"__key__": "s0/000001", "__url__": %q, "jpg": <15 bytes>, "cls": 1, "json": {"id": 1, "tags": ["a", "b"], "w": 0.5}}`, p) {
				t.Errorf("sample 1 is %s", got)
			}
			if jpg, _ := d.Get("jpg"); string(jpg.([]byte)) != "image s0/000001" {
				t.Errorf("jpg member is %q", jpg)
			}
		})
	}
}

func TestTarBadInputFailsItsItemOrShard(t *testing.T) {
	dir := t.TempDir()
	good, missingPair, dup, truncated, notInt := filepath.Join(dir, "good.tar"), filepath.Join(dir, "pair.tar"),
		filepath.Join(dir, "dup.tar"), filepath.Join(dir, "truncated.tar"), filepath.Join(dir, "int.tar")
	shard(t, good, tar.FormatPAX, samples(0, 2)...)
	shard(t, missingPair, tar.FormatPAX, member{"a.jpg", "x"}, member{"a.cls", "1"}, member{"b.jpg", "y"}, member{"c.jpg", "z"}, member{"c.cls", "0"})
	shard(t, dup, tar.FormatPAX, member{"a.jpg", "x"}, member{"a.jpg", "x2"}, member{"a.cls", "1"}, member{"b.jpg", "y"}, member{"b.cls", "2"})
	shard(t, notInt, tar.FormatPAX, member{"a.jpg", "x"}, member{"a.cls", "cat"})
	shard(t, truncated, tar.FormatPAX, samples(1, 5)...)
	b, _ := os.ReadFile(truncated)
	os.WriteFile(truncated, b[:512*7+5], 0o644) // inside s1/000001.jpg's data: 1 sample survives
	cutClean := filepath.Join(dir, "cut-at-block.tar")
	os.WriteFile(cutClean, b[:512*10], 0o644) // after s1/000001.cls's data block: no end marker
	empty := filepath.Join(dir, "empty.tar")
	os.WriteFile(empty, nil, 0o644)
	cases := []struct {
		shard    string
		keys     []string
		failures []string
	}{
		{missingPair, []string{"a", "c"}, []string{missingPair + ": sample b: no .cls member (it has .jpg)"}},
		{dup, []string{"b"}, []string{dup + ": sample a: two members named a.jpg"}},
		{notInt, nil, []string{notInt + `: sample a: .cls: not an int: "cat"`}},
		{truncated, []string{"s1/000000"}, []string{truncated + ": shard broken after sample s1/000000, rest skipped: truncated: reading member s1/000001.jpg: unexpected EOF"}},
		{cutClean, []string{"s1/000000"}, []string{cutClean + ": shard broken after sample s1/000000, rest skipped: truncated: no end-of-archive marker after 5120 bytes"}},
		{empty, nil, []string{empty + ": shard broken at its start, rest skipped: empty file, not a tar archive"}},
		{filepath.Join(dir, "missing.tar"), nil, []string{filepath.Join(dir, "missing.tar") + ": open " + filepath.Join(dir, "missing.tar") + ": no such file or directory"}},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.shard), func(t *testing.T) {
			// The bad shard sits between two good ones: they are read in full.
			r := readAll(t, mustTar(t, sources.TarOptions{
				Shards: []string{good, c.shard, good}, Required: []string{"jpg", "cls"}, Decode: map[string]string{"cls": "int"},
			}))
			want := append(append([]string{"s0/000000", "s0/000001"}, c.keys...), "s0/000000", "s0/000001")
			if !slices.Equal(r.keys, want) {
				t.Errorf("keys %v, want %v", r.keys, want)
			}
			if !slices.Equal(r.failures, c.failures) {
				t.Errorf("failures\n%q\nwant\n%q", r.failures, c.failures)
			}
		})
	}
}

func TestTarShardsSplitOverRanksAndShuffle(t *testing.T) {
	dir := t.TempDir()
	var shards []string
	for s := range 5 {
		p := filepath.Join(dir, fmt.Sprintf("shard-%06d.tar", s))
		shard(t, p, tar.FormatPAX, samples(s, 3)...)
		shards = append(shards, p)
	}
	expanded, err := sources.ExpandBraces(filepath.Join(dir, "shard-{000000..000004}.tar"))
	if err != nil || !slices.Equal(expanded, shards) {
		t.Fatalf("ExpandBraces = %v, %v", expanded, err)
	}
	read := func(o sources.TarOptions) []string {
		o.Shards = shards
		return readAll(t, mustTar(t, o)).keys
	}
	all := read(sources.TarOptions{})
	if len(all) != 15 {
		t.Fatalf("%d samples", len(all))
	}
	// drop_last: 5 shards over 2 ranks -> 2 each, one shard left out.
	r0 := read(sources.TarOptions{Sampling: sampler.Options{Shuffle: true, Seed: 7, World: 2, Rank: 0, DropLast: true}})
	r1 := read(sources.TarOptions{Sampling: sampler.Options{Shuffle: true, Seed: 7, World: 2, Rank: 1, DropLast: true}})
	if len(r0) != 6 || len(r1) != 6 || len(slices.Concat(r0, r1)) != len(uniq(slices.Concat(r0, r1))) {
		t.Errorf("ranks got %v and %v", r0, r1)
	}
	// Padded: 3 shards each, every shard read by some rank.
	p0 := read(sources.TarOptions{Sampling: sampler.Options{Shuffle: true, Seed: 7, World: 2, Rank: 0}})
	p1 := read(sources.TarOptions{Sampling: sampler.Options{Shuffle: true, Seed: 7, World: 2, Rank: 1}})
	if len(p0) != 9 || len(p1) != 9 || len(uniq(slices.Concat(p0, p1))) != 15 {
		t.Errorf("padded ranks got %d and %d samples, %d distinct", len(p0), len(p1), len(uniq(slices.Concat(p0, p1))))
	}
	// Samples shuffled through a buffer: a seeded permutation of the same samples.
	b1 := read(sources.TarOptions{ShuffleBuffer: 4, Sampling: sampler.Options{Seed: 1}})
	b2 := read(sources.TarOptions{ShuffleBuffer: 4, Sampling: sampler.Options{Seed: 1}})
	b3 := read(sources.TarOptions{ShuffleBuffer: 4, Sampling: sampler.Options{Seed: 2}})
	if !slices.Equal(b1, b2) || slices.Equal(b1, all) || slices.Equal(b1, b3) || !slices.Equal(sorted(b1), sorted(all)) {
		t.Errorf("shuffle buffer: %v / %v / %v", b1, b2, b3)
	}
	// Each Open is the next epoch: a new shard order.
	src := mustTar(t, sources.TarOptions{Shards: shards, Sampling: sampler.Options{Shuffle: true, Seed: 3}})
	e0, e1 := readAll(t, src).keys, readAll(t, src).keys
	if slices.Equal(e0, e1) || !slices.Equal(sorted(e0), sorted(e1)) {
		t.Errorf("epochs 0 and 1: %v, %v", e0, e1)
	}
}

func TestTarOptionsAreChecked(t *testing.T) {
	for _, c := range []struct {
		o   sources.TarOptions
		err string
	}{
		{sources.TarOptions{}, "no shards"},
		{sources.TarOptions{Shards: []string{"a"}, Decode: map[string]string{"cls": "yaml"}}, `decode "cls": unknown decoder "yaml"`},
		{sources.TarOptions{Shards: []string{"a"}, Required: []string{".jpg"}}, "without the dot"},
		{sources.TarOptions{Shards: []string{"a"}, Sampling: sampler.Options{World: 2, Rank: 2}}, "rank"},
		{sources.TarOptions{Shards: []string{"a"}, ShuffleBuffer: -1}, "shuffle buffer"},
	} {
		if _, err := sources.NewTarSource(c.o); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%+v: err = %v, want %q", c.o, err, c.err)
		}
	}
}

func TestExpandBraces(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{"a.tar", []string{"a.tar"}, ""},
		{"s-{08..11}.tar", []string{"s-08.tar", "s-09.tar", "s-10.tar", "s-11.tar"}, ""},
		{"{train,val}/{0..1}.tar", []string{"train/0.tar", "train/1.tar", "val/0.tar", "val/1.tar"}, ""},
		{"s-{3..1}.tar", nil, "bad range"},
		{"s-{1..x}.tar", nil, "bad range"},
		{"s-{1.tar", nil, "unmatched {"},
		{"s-1}.tar", nil, "unmatched }"},
		{"s-{a}.tar", nil, "neither a range"},
		{"s-{a,{b,c}}.tar", nil, "nested braces"},
		{"{0..1048576}", nil, "longer than"},
	} {
		got, err := sources.ExpandBraces(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// FuzzTarShard feeds arbitrary bytes as a shard: the source must neither
// panic nor return a fatal error; damage fails items.
func FuzzTarShard(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed.tar")
	shard(f, seed, tar.FormatGNU, append(samples(0, 2), member{strings.Repeat("x/", 70) + "k.jpg", "v"})...)
	b, _ := os.ReadFile(seed)
	f.Add(b)
	f.Add(b[:700])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		const p = "fuzz.tar"
		open := func(context.Context, string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		r := readAll(t, mustTar(t, sources.TarOptions{Shards: []string{p}, Required: []string{"cls"},
			Decode: map[string]string{"cls": "int", "json": "json"}, Open: open}))
		for _, f := range r.failures {
			if !strings.HasPrefix(f, p) {
				t.Errorf("failure %q does not name the shard", f)
			}
		}
	})
}

func uniq(s []string) []string { return slices.Compact(sorted(s)) }

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
