package main

// Counters behind /metrics and the frame_stats / frame_dropped events. Everything here is counted by this
// program (on the wire, from the router's events, by its own dialer and pinger), never guessed.

import (
	"sort"
	"strings"
	"sync"
	"time"
)

const (
	dirReceived = 0
	dirSent     = 1
)

var dirNames = [2]string{"received", "sent"}

type cellKey struct {
	dir   int
	ftype string
	class string
}

type cell struct{ frames, bytes int64 }

// PING_BUCKETS_S of node/metrics.py.
var pingBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0}

type histogram struct {
	counts []int64 // per bucket (not cumulative)
	count  int64
	sum    float64
}

type stats struct {
	mu sync.Mutex

	frames     map[cellKey]*cell // totals since start
	pending    map[cellKey]*cell // since the last frame_stats
	since      time.Time
	drops      map[[2]string]int64 // (frame type, reason) -> frames, totals
	dropsNew   map[[2]string]int64 // since the last frame_dropped
	handshakes map[string]int64
	disconn    map[string]int64
	dialFail   int64
	delivered  int64
	rootChg    int64
	parentChg  int64
	bootSent   int64
	bootAcc    int64
	pings      map[[2]string]int64 // (mode, received|lost)
	rtt        map[string]*histogram
}

func newStats() *stats {
	return &stats{
		frames: map[cellKey]*cell{}, pending: map[cellKey]*cell{}, since: time.Now(),
		drops: map[[2]string]int64{}, dropsNew: map[[2]string]int64{}, handshakes: map[string]int64{},
		disconn: map[string]int64{}, pings: map[[2]string]int64{},
		rtt: map[string]*histogram{"snek": newHistogram(), "tree": newHistogram()},
	}
}

func newHistogram() *histogram { return &histogram{counts: make([]int64, len(pingBuckets))} }

func (s *stats) frame(dir, ftype, length int, class string) {
	k := cellKey{dir, frameTypeName(ftype), class}
	s.mu.Lock()
	for _, m := range []map[cellKey]*cell{s.frames, s.pending} {
		c := m[k]
		if c == nil {
			c = &cell{}
			m[k] = c
		}
		c.frames++
		c.bytes += int64(length)
	}
	s.mu.Unlock()
}

func (s *stats) add(what *int64, n int64) {
	s.mu.Lock()
	*what += n
	s.mu.Unlock()
}

func (s *stats) addTo(m map[string]int64, key string) {
	s.mu.Lock()
	m[key]++
	s.mu.Unlock()
}

func (s *stats) drop(ftype, reason string) {
	s.mu.Lock()
	s.drops[[2]string{ftype, reason}]++
	s.dropsNew[[2]string{ftype, reason}]++
	s.mu.Unlock()
}

func (s *stats) ping(mode string, received bool, rttS float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !received {
		s.pings[[2]string{mode, "lost"}]++
		return
	}
	s.pings[[2]string{mode, "received"}]++
	h := s.rtt[mode]
	h.count++
	h.sum += rttS
	for i, le := range pingBuckets {
		if rttS <= le {
			h.counts[i]++
			break
		}
	}
}

// flush writes one frame_stats event per non-empty (direction, frame type, link class) since the last flush,
// and one frame_dropped per (frame type, reason), as snekbed's node does.
func (s *stats) flush(log *eventLog) {
	s.mu.Lock()
	pending, drops := s.pending, s.dropsNew
	s.pending, s.dropsNew = map[cellKey]*cell{}, map[[2]string]int64{}
	now := time.Now()
	interval := now.Sub(s.since).Seconds()
	s.since = now
	s.mu.Unlock()
	if interval < 1e-6 {
		interval = 1e-6
	}
	keys := make([]cellKey, 0, len(pending))
	for k := range pending {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return strings.Join([]string{dirNames[a.dir], a.ftype, a.class}, "\x00") <
			strings.Join([]string{dirNames[b.dir], b.ftype, b.class}, "\x00")
	})
	for _, k := range keys {
		if k.ftype == unknownType { // frame_stats names only the schema's frame types
			continue
		}
		c := pending[k]
		log.emit("frame_stats", fields{"interval_s": round6(interval), "direction": dirNames[k.dir],
			"frame_type": k.ftype, "link_class": k.class, "frames": c.frames, "bytes": c.bytes})
	}
	dk := make([][2]string, 0, len(drops))
	for k := range drops {
		dk = append(dk, k)
	}
	sort.Slice(dk, func(i, j int) bool { return dk[i][0]+"\x00"+dk[i][1] < dk[j][0]+"\x00"+dk[j][1] })
	for _, k := range dk {
		log.emit("frame_dropped", fields{"frame_type": k[0], "reason": k[1], "count": drops[k]})
	}
}
