package sources_test

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

// eventLog records a test's opens, closes and samples in order.
type eventLog struct {
	mu     sync.Mutex
	events []string
	opened chan string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

type loggedFile struct {
	*os.File
	log  *eventLog
	name string
}

func (f loggedFile) Close() error { f.log.add("close " + f.name); return f.File.Close() }

func (l *eventLog) open(_ context.Context, name string) (io.ReadCloser, error) {
	base := filepath.Base(name)
	l.add("open " + base)
	l.opened <- base
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return loggedFile{File: f, log: l, name: base}, nil
}

// The next shard is opened while the current one is read (Prefetch), or
// only once it is done (Prefetch < 0); either way, closing the iterator
// closes every shard it opened and stops its goroutines.
func TestTarShardsOpenAhead(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	shards := writeShards(t, dir, tar.FormatPAX, 3, 3)
	for _, c := range []struct {
		name     string
		prefetch int
	}{{"default", 0}, {"none", -1}, {"one", 1}} {
		t.Run(c.name, func(t *testing.T) {
			log := &eventLog{opened: make(chan string, 10)}
			src := mustTar(t, sources.TarOptions{Shards: shards, Prefetch: c.prefetch, Open: log.open})
			it, err := src.Open(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			v, err := it.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			key, _ := v.(*value.Dict).Get("__key__")
			value.Release(v)
			if key != "s0/000000" {
				t.Fatalf("first sample %v", key)
			}
			wantOpen := max(c.prefetch, 0)
			if c.prefetch == 0 {
				wantOpen = 2 // the default
			}
			// The opens ahead happen in their goroutines: wait for them.
			got := []string{<-log.opened}
			for range wantOpen {
				select {
				case s := <-log.opened:
					got = append(got, s)
				case <-time.After(10 * time.Second):
					t.Fatalf("after the first sample, opened %v; want %d shards ahead", got, wantOpen)
				}
			}
			select {
			case s := <-log.opened:
				t.Fatalf("opened %s too: more than %d ahead", s, wantOpen)
			case <-time.After(50 * time.Millisecond):
			}
			slices.Sort(got) // opened in parallel
			if !slices.Equal(got, []string{"s0.tar", "s1.tar", "s2.tar"}[:1+wantOpen]) {
				t.Fatalf("opened %v in that order", got)
			}
			it.Close()
			ev := log.snapshot()
			for _, s := range got {
				if !slices.Contains(ev, "close "+s) {
					t.Errorf("%s opened but not closed: %v", s, ev)
				}
			}
		})
	}
}

// Prefetching changes nothing of what an epoch gives, nor where its
// failures are reported.
func TestTarPrefetchKeepsTheEpoch(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	shards := writeShards(t, dir, tar.FormatGNU, 4, 5)
	shards = slices.Insert(shards, 2, filepath.Join(dir, "missing.tar"))
	var size int64
	for _, s := range shards {
		if st, err := os.Stat(s); err == nil {
			size += st.Size()
		}
	}
	var runs [][]string
	for _, prefetch := range []int{-1, 0, 3} {
		src := mustTar(t, sources.TarOptions{Shards: shards, Prefetch: prefetch, ReadAheadBytes: 1, Sampling: sampler.Options{Shuffle: true, Seed: 3}})
		r := readAll(t, src)
		if len(r.failures) != 1 || !strings.Contains(r.failures[0], "missing.tar: open") {
			t.Fatalf("prefetch %d: failures %v", prefetch, r.failures)
		}
		runs = append(runs, r.keys)
		if st := src.OpStats(); st["shards_opened"] != 4 || st["bytes_read"] != size || st["read_wait_ms"] < 0 {
			t.Errorf("prefetch %d: op stats %v, want 4 shards and %d bytes", prefetch, st, size)
		}
	}
	if !slices.Equal(runs[0], runs[1]) || !slices.Equal(runs[0], runs[2]) || len(runs[0]) != 20 {
		t.Fatalf("epochs differ with prefetch:\n%v\n%v\n%v", runs[0], runs[1], runs[2])
	}
}
