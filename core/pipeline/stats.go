package pipeline

import "time"

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
	Name               string  `json:"name"`
	Kind               string  `json:"kind"` // "source", "pipe", "aggregate", "disaggregate"
	Concurrency        int     `json:"concurrency"`
	ItemsIn            int64   `json:"items_in"`
	ItemsOut           int64   `json:"items_out"`
	Failures           int64   `json:"failures"`
	BusyNs             int64   `json:"busy_ns"` // summed wall time inside Op.Process
	Active             int64   `json:"active"`  // ops running now
	QueueLen           int     `json:"queue_len"`
	QueueCap           int     `json:"queue_cap"`
	QueueMeanOccupancy float64 `json:"queue_mean_occupancy"`
}

// SinkStats describe the prefetch buffer that Next reads.
type SinkStats struct {
	Len       int   `json:"len"`
	Cap       int   `json:"cap"`
	Delivered int64 `json:"delivered"` // items returned by Next
}

func (ep *epoch) stats(st *Stats) {
	s := status(ep.status.Load())
	st.State = s.String()
	if s == statusFailed {
		st.Error = ep.err.Error() // err is written before the status store
	}
	st.ElapsedNs = ep.elapsed.Load()
	if st.ElapsedNs == 0 {
		st.ElapsedNs = int64(time.Since(ep.start))
	}
	fill := func(dst *StageStats, c *stageCounters, q chan any) {
		var sent, occ int64
		for i := range c.slots {
			sl := &c.slots[i]
			dst.ItemsIn += sl.in.Load()
			sent += sl.out.Load()
			dst.BusyNs += sl.busy.Load()
			dst.Active += sl.active.Load()
			occ += sl.occ.Load()
		}
		dst.ItemsOut = sent
		dst.Failures = c.failures.Load()
		dst.QueueLen, dst.QueueCap = len(q), cap(q)
		if sent > 0 && cap(q) > 0 {
			dst.QueueMeanOccupancy = float64(occ) / float64(sent) / float64(cap(q))
		}
	}
	fill(&st.Source, ep.counters[0], ep.queues[0])
	for i := range st.Stages {
		fill(&st.Stages[i], ep.counters[i+1], ep.queues[i+1])
	}
	st.Sink = SinkStats{Len: len(ep.sink), Cap: cap(ep.sink), Delivered: ep.delivered.Load()}
	st.Failures = ep.failures.Load()
	ep.recentMu.Lock()
	n := min(ep.recentN, maxRecent)
	for i := ep.recentN - n; i < ep.recentN; i++ {
		st.RecentErrors = append(st.RecentErrors, ep.recent[i%maxRecent])
	}
	ep.recentMu.Unlock()
}
