package pipeline

import (
	"encoding/json"
	"fmt"
	"time"
)

// Stats is a snapshot of the current (or last) epoch, for logs and
// dashboards. Counters are per epoch: Start begins them at zero.
type Stats struct {
	State        string       `json:"state"` // "built", "running", "done", "failed", "stopped"
	Epoch        int          `json:"epoch"` // epochs started
	ElapsedNs    int64        `json:"elapsed_ns"`
	Source       StageStats   `json:"source"` // ItemsOut = items the source yielded
	Stages       []StageStats `json:"stages"`
	Sink         SinkStats    `json:"sink"`
	Failures     int64        `json:"failures"`
	Error        string       `json:"error,omitempty"`         // the fatal error, if any
	RecentErrors []string     `json:"recent_errors,omitempty"` // last 16 item errors, oldest first
}

// StageStats are one stage's counters.
//
// QueueMeanOccupancy is the mean of len/cap of the stage's output queue,
// sampled just after each item the stage sends. Near 1, the stage usually
// finds its output full: something downstream is the bottleneck. Near 0,
// downstream takes items as fast as they come: this stage, or one before
// it, is the bottleneck.
type StageStats struct {
	Name           string `json:"name"`
	Kind           string `json:"kind"`                      // "source", "pipe", "aggregate", "disaggregate"
	Concurrency    int    `json:"concurrency"`               // workers allowed now (an auto stage's current choice)
	Auto           bool   `json:"auto,omitempty"`            // AutoConcurrency
	MaxConcurrency int    `json:"max_concurrency,omitempty"` // an auto stage's ceiling
	Tuning         string `json:"tuning,omitempty"`          // an auto stage's tuner state, in words
	ItemsIn        int64  `json:"items_in"`
	ItemsOut       int64  `json:"items_out"`
	Failures       int64  `json:"failures"`
	Abandoned      int64  `json:"abandoned,omitempty"` // calls given up after a Timeout (also counted in Failures)
	// OpStats are the op's own counters, if it keeps any (OpStatsReporter):
	// a read cache's hits and misses, for example. Cumulative, not per epoch.
	OpStats            map[string]int64 `json:"op_stats,omitempty"`
	BusyNs             int64            `json:"busy_ns"` // summed wall time inside Op.Process (and in Config.SinkEncode, where this stage runs it)
	Active             int64            `json:"active"`  // ops running now
	QueueLen           int              `json:"queue_len"`
	QueueCap           int              `json:"queue_cap"`
	QueueMeanOccupancy float64          `json:"queue_mean_occupancy"`

	// Percentiles of the time one Op.Process call took (pipe stages only;
	// zero before any item). Read from a log-spaced histogram with 8
	// buckets per power of two: within 12.5% of the exact value.
	LatencyP50Ns int64   `json:"latency_p50_ns"`
	LatencyP90Ns int64   `json:"latency_p90_ns"`
	LatencyP99Ns int64   `json:"latency_p99_ns"`
	ItemsPerS    float64 `json:"items_per_s"`   // ItemsOut / elapsed
	BusyFraction float64 `json:"busy_fraction"` // BusyNs / (elapsed * Concurrency), in [0, 1]

	// TuningLog is an auto stage's last 32 tuner decisions, oldest first.
	TuningLog []TuneStep `json:"tuning_log,omitempty"`
}

// TuneStep is one decision of an auto stage's tuner (autotune.go) and the
// window it rests on.
type TuneStep struct {
	AtNs      int64   `json:"at_ns"` // since its epoch started
	Epoch     int     `json:"epoch"`
	From      int     `json:"from"` // concurrency before
	To        int     `json:"to"`   // and after
	Reason    string  `json:"reason"`
	ItemsPerS float64 `json:"items_per_s"` // the stage's throughput in the window
	Busy      float64 `json:"busy"`        // its workers' busy fraction in the window
	CPU       float64 `json:"cpu"`         // cores the process used in the window; -1 if unknown
}

// SinkStats describe the prefetch buffer that Next reads.
type SinkStats struct {
	Len       int   `json:"len"`
	Cap       int   `json:"cap"`
	Delivered int64 `json:"delivered"` // items returned by Next
	Failures  int64 `json:"failures"`  // items failed by Config.SinkEncode
	// MeanOccupancy is the mean of len/cap of the buffer sampled just
	// after each Next took an item. Near 1, the pipeline keeps the buffer
	// full: the consumer calling Next is the bottleneck.
	MeanOccupancy float64 `json:"mean_occupancy"`
}

func (ep *epoch) stats(st *Stats) {
	s := status(ep.status.Load())
	st.State = s.String()
	if err := ep.firstErr(); err != nil {
		st.State, st.Error = statusFailed.String(), err.Error()
	}
	st.ElapsedNs = ep.elapsed.Load()
	if st.ElapsedNs == 0 {
		st.ElapsedNs = int64(time.Since(ep.start))
	}
	var lat [latBuckets]int64
	fill := func(dst *StageStats, c *stageCounters, q chan any) {
		var sent, occ int64
		lat = [latBuckets]int64{}
		for i := range c.slots {
			sl := &c.slots[i]
			dst.ItemsIn += sl.in.Load()
			sent += sl.out.Load()
			dst.BusyNs += sl.busy.Load()
			dst.Active += sl.active.Load()
			occ += sl.occ.Load()
			if sl.lat != nil {
				for b := range sl.lat.n {
					lat[b] += sl.lat.n[b].Load()
				}
			}
		}
		ps := quantiles(&lat, 0.5, 0.9, 0.99)
		dst.LatencyP50Ns, dst.LatencyP90Ns, dst.LatencyP99Ns = ps[0], ps[1], ps[2]
		if st.ElapsedNs > 0 {
			dst.ItemsPerS = float64(sent) / (float64(st.ElapsedNs) / 1e9)
			if dst.Concurrency > 0 {
				dst.BusyFraction = min(1, max(0, float64(dst.BusyNs)/(float64(st.ElapsedNs)*float64(dst.Concurrency))))
			}
		}
		dst.ItemsOut = sent
		dst.Failures = c.failures.Load()
		dst.Abandoned = c.abandoned.Load()
		dst.QueueLen, dst.QueueCap = len(q), cap(q)
		if sent > 0 && cap(q) > 0 {
			dst.QueueMeanOccupancy = float64(occ) / float64(sent) / float64(cap(q))
		}
	}
	fill(&st.Source, ep.counters[0], ep.queues[0])
	for i := range st.Stages {
		fill(&st.Stages[i], ep.counters[i+1], ep.queues[i+1])
	}
	st.Sink = SinkStats{Len: len(ep.sink), Cap: cap(ep.sink), Delivered: ep.delivered.Load(), Failures: ep.sinkCounters.failures.Load()}
	if d := st.Sink.Delivered; d > 0 && st.Sink.Cap > 0 {
		st.Sink.MeanOccupancy = float64(ep.sinkOcc.Load()) / float64(d) / float64(st.Sink.Cap)
	}
	st.Failures = ep.failures.Load()
	ep.recentMu.Lock()
	n := min(ep.recentN, maxRecent)
	for i := ep.recentN - n; i < ep.recentN; i++ {
		st.RecentErrors = append(st.RecentErrors, ep.recent[i%maxRecent])
	}
	ep.recentMu.Unlock()
}

// Report names the stage that limits a pipeline's throughput.
type Report struct {
	Stage  string `json:"stage"` // "consumer", "source", a stage name, or "" if unclear
	Reason string `json:"reason"`
	Advice string `json:"advice"`
}

// Thresholds of Bottleneck: a queue is mostly full above full, mostly
// empty below empty; a worker is saturated above saturated.
const (
	full      = 0.5
	empty     = 0.5
	saturated = 0.8
	// backlog: a queue this full on average still has items waiting most
	// of the time a stage looks (queues are short: 2 by default).
	backlog = 0.25
)

// Bottleneck reads the queue occupancies and busy fractions and names the
// stage that limits throughput. A full sink buffer means the consumer
// (the loop calling Next) is slowest. Otherwise the limiting stage is the
// one whose input queue is mostly full and output queue mostly empty (or,
// failing that, the one with the largest backlog before it); if every
// queue is nearly empty, the source is.
//
// Stats also carries the report in its JSON, as "bottleneck".
func (s Stats) Bottleneck() Report {
	if s.Sink.Delivered == 0 {
		return Report{Reason: "no item delivered yet"}
	}
	if o := s.Sink.MeanOccupancy; o >= full {
		return Report{
			Stage:  "consumer",
			Reason: fmt.Sprintf("the prefetch buffer is %.0f%% full on average when Next takes an item", o*100),
			Advice: "the pipeline is faster than the code calling Next (the training loop); speeding up the pipeline will not help",
		}
	}
	// pick finds the stage with the largest drop in occupancy across it,
	// among those whose input holds at least minIn. A lighter backlog
	// counts only before pipe stages: an aggregate's input looks busy
	// just after its many senders' sends, before its goroutine runs.
	pick := func(minIn float64) int {
		in := s.Source.QueueMeanOccupancy
		best, bestGap := -1, 0.0
		for i, st := range s.Stages {
			out := st.QueueMeanOccupancy
			if i == len(s.Stages)-1 {
				out = s.Sink.MeanOccupancy
			}
			eligible := in >= full || (in >= minIn && st.Kind == KindPipe.String())
			if eligible && out < empty && in-out > bestGap {
				best, bestGap = i, in-out
			}
			in = st.QueueMeanOccupancy
		}
		return best
	}
	best := pick(full)
	if best < 0 {
		best = pick(backlog)
	}
	if best >= 0 {
		st := s.Stages[best]
		r := Report{
			Stage:  st.Name,
			Reason: fmt.Sprintf("items wait before it (its input queue is %.0f%% full on average) and not after it; its %d worker(s) are busy %.0f%% of the time", inputOccupancy(s, best)*100, st.Concurrency, st.BusyFraction*100),
		}
		switch {
		case st.Kind != KindPipe.String():
			r.Advice = "this stage runs in one goroutine; make its work cheaper"
		case st.Auto && st.Concurrency >= st.MaxConcurrency:
			r.Advice = fmt.Sprintf("its concurrency is tuned automatically and has reached its ceiling (%d): raise max_concurrency or the CPU budget if CPU allows, or make its op faster", st.MaxConcurrency)
		case st.Auto:
			r.Advice = fmt.Sprintf("its concurrency is tuned automatically (%s): more threads did not raise its throughput, so CPU or a shared lock is the limit; make its op cheaper", st.Tuning)
		case st.BusyFraction >= saturated:
			r.Advice = fmt.Sprintf("raise its concurrency (now %d) if CPU allows, or make its op faster", st.Concurrency)
		default:
			r.Advice = "its workers are often idle while items wait: they are held back by something else (the NumThreads cap, a lock, the GIL); raise NumThreads or release the lock"
		}
		return r
	}
	if s.Source.QueueMeanOccupancy < backlog {
		return Report{
			Stage:  "source",
			Reason: fmt.Sprintf("the source's output queue is %.0f%% full on average and every later queue is mostly empty", s.Source.QueueMeanOccupancy*100),
			Advice: "make the source yield faster (read ahead, shard it, or move work out of it into a concurrent pipe stage)",
		}
	}
	return Report{Reason: "no single stage stands out"}
}

func inputOccupancy(s Stats, i int) float64 {
	if i == 0 {
		return s.Source.QueueMeanOccupancy
	}
	return s.Stages[i-1].QueueMeanOccupancy
}

// MarshalJSON writes the fields of s and its Bottleneck report.
func (s Stats) MarshalJSON() ([]byte, error) {
	type plain Stats // without this method
	return json.Marshal(struct {
		plain
		Bottleneck Report `json:"bottleneck"`
	}{plain(s), s.Bottleneck()})
}
