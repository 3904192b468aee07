package main

// Pings with the reference simulator's convention (PROTOCOL.md section 8): a 75-byte "pineping" payload in
// ordinary traffic, sent with the router's WriteTo, hops = 1 at the start and one more at every node that
// forwards it (the router's packet filter hook, called for every frame it forwards, the origin's first step
// included), answered by the target's application as a pong with the hops kept.
//
// The reference chooses the routing of what the application sends itself: WriteTo tree-routes when it holds
// the target's coordinates (learnt from traffic the target sent us, within the last minute) and SNEK-routes
// otherwise. So "snek" is what the reference simulator's pings are (the first ping to a target goes by SNEK,
// later ones by the tree once its pong brought the coordinates), and "tree" first sends one uncounted ping
// when the coordinates are not known, as snekbed's node does. How each counted ping really left is read off
// the wire and reported ("routed").

import (
	"encoding/binary"
	"encoding/json"
	"math/big"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/matrix-org/pinecone/types"
)

const (
	pingPreamble = "pineping"
	pingLen      = 75
	pingType     = 0
	pongType     = 1
)

func isPing(p []byte) bool { return len(p) >= pingLen && string(p[:8]) == pingPreamble }

type pinger struct {
	n       *Node
	mu      sync.Mutex
	locks   map[types.PublicKey]*sync.Mutex // one outstanding ping per target (the reference's rule)
	pending map[types.PublicKey]chan uint16 // target -> where its pong's hops go
	routed  map[types.PublicKey]string      // target -> how our last ping to it left: "tree" or "snek"
}

func newPinger(n *Node) *pinger {
	return &pinger{n: n, locks: map[types.PublicKey]*sync.Mutex{}, pending: map[types.PublicKey]chan uint16{},
		routed: map[types.PublicKey]string{}}
}

// leaving: a traffic frame written to a peer; notes how our own pings leave.
func (p *pinger) leaving(f *types.Frame) {
	pl := f.Payload
	if !isPing(pl) || pl[8] != pingType {
		return
	}
	var origin, dest types.PublicKey
	copy(origin[:], pl[11:43])
	copy(dest[:], pl[43:75])
	if origin != p.n.key {
		return
	}
	how := "snek"
	if len(f.Destination) > 0 {
		how = "tree"
	}
	p.mu.Lock()
	if _, ok := p.routed[dest]; !ok {
		p.routed[dest] = how
	}
	p.mu.Unlock()
}

// readLoop is the node's application: answers pings, takes pongs, counts what is delivered to it.
func (p *pinger) readLoop() {
	r := p.n.r
	buf := make([]byte, 65535)
	for {
		// the router's ReadFrom returns at once, with nothing, when its read deadline has passed
		_ = r.SetReadDeadline(time.Now().Add(time.Hour))
		n, _, err := r.ReadFrom(buf)
		select {
		case <-p.n.ctx.Done():
			return
		default:
		}
		if err != nil || n == 0 {
			continue
		}
		p.n.stats.add(&p.n.stats.delivered, 1)
		pl := buf[:n]
		if !isPing(pl) {
			continue
		}
		var origin, dest types.PublicKey
		copy(origin[:], pl[11:43])
		copy(dest[:], pl[43:75])
		switch {
		case pl[8] == pingType && dest == p.n.key:
			pong := append([]byte(nil), pl[:pingLen]...)
			pong[8] = pongType
			_, _ = r.WriteTo(pong, origin)
		case pl[8] == pongType && origin == p.n.key:
			p.mu.Lock()
			ch := p.pending[dest]
			p.mu.Unlock()
			if ch != nil {
				select {
				case ch <- binary.BigEndian.Uint16(pl[9:11]):
				default:
				}
			}
		default:
			p.n.logf("stray ping payload: type %d origin %s target %s", pl[8], short(origin.String()), short(dest.String()))
		}
	}
}

type pingOutcome struct {
	received bool
	rttS     float64
	hops     int
	routed   interface{} // "tree", "snek" or nil (never left: no route at the first hop)
}

func (p *pinger) once(target types.PublicKey, timeout time.Duration) pingOutcome {
	ch := make(chan uint16, 1)
	p.mu.Lock()
	p.pending[target] = ch
	delete(p.routed, target)
	p.mu.Unlock()
	payload := make([]byte, pingLen)
	copy(payload, pingPreamble)
	payload[8] = pingType
	binary.BigEndian.PutUint16(payload[9:11], 1)
	copy(payload[11:43], p.n.key[:])
	copy(payload[43:75], target[:])
	start := time.Now()
	_, _ = p.n.r.WriteTo(payload, target)
	out := pingOutcome{}
	select {
	case hops := <-ch:
		out = pingOutcome{received: true, rttS: time.Since(start).Seconds(), hops: int(hops)}
	case <-time.After(timeout):
	case <-p.n.ctx.Done():
	}
	p.mu.Lock()
	delete(p.pending, target)
	if how, ok := p.routed[target]; ok {
		out.routed = how
	}
	p.mu.Unlock()
	return out
}

// coordsKnown: whether the router holds the target's coordinates (its manhole's coords_cache).
func (p *pinger) coordsKnown(target types.PublicKey) bool {
	rec := httptest.NewRecorder()
	p.n.r.ManholeHandler(rec, nil)
	var doc struct {
		Cache map[string]json.RawMessage `json:"coords_cache"`
	}
	if json.Unmarshal(rec.Body.Bytes(), &doc) != nil {
		return false
	}
	_, ok := doc.Cache[target.String()]
	return ok
}

// ping: POST /ping.
func (p *pinger) ping(target types.PublicKey, mode string, count int, timeout time.Duration) map[string]interface{} {
	p.mu.Lock()
	lock := p.locks[target]
	if lock == nil {
		lock = &sync.Mutex{}
		p.locks[target] = lock
	}
	p.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	if mode == "tree" && target != p.n.key && !p.coordsKnown(target) {
		p.once(target, timeout) // its pong brings the target's coordinates
	}
	rtts, hops, routed := []float64{}, []int{}, []interface{}{}
	for i := 0; i < count; i++ {
		o := p.once(target, timeout)
		routed = append(routed, o.routed)
		var rtt, h interface{}
		if o.received {
			ms := float64(int64(o.rttS*1e7+0.5)) / 1e4
			rtts = append(rtts, ms)
			hops = append(hops, o.hops)
			rtt, h = ms, o.hops
		}
		p.n.stats.ping(mode, o.received, o.rttS)
		p.n.events.emit("ping_result", fields{"target": target.String(), "mode": mode, "received": o.received,
			"rtt_ms": rtt, "hops": h})
	}
	return map[string]interface{}{"sent": count, "received": len(rtts), "rtt_ms": rtts, "hops": hops, "routed": routed}
}

// adversaryTypes: the frame types filter counts as dropped by the adversary (snek_dropped_frames_total, which
// starts at 0 for each): frameTypeName's names.
var adversaryTypes = append(append([]string{}, frameTypeNames...), unknownType)

// filter is the router's packet filter (router.InjectPacketFilter): called for every frame the router
// forwards or floods, with the key of the peer it came from (forwarding; our own key for what this node
// originates) or the peer it is flooded to (wakeup broadcasts). Returning true drops the frame.
func (n *Node) filter(from types.PublicKey, f *types.Frame) bool {
	if from != n.key && n.adversary.drops(from, f.Type) {
		n.stats.drop(frameTypeName(int(f.Type)), "adversary")
		return true
	}
	if f.Type == types.TypeTraffic && isPing(f.Payload) && f.Payload[8] == pingType {
		binary.BigEndian.PutUint16(f.Payload[9:11], binary.BigEndian.Uint16(f.Payload[9:11])+1)
	}
	return false
}

// ---------------------------------------------------------------- adversary

// Drop kinds of POST /adversary (node/core/adversary.py): frame type per kind, -1 for every frame.
var dropKinds = map[string]int{"all": -1, "keepalive": int(types.TypeKeepalive),
	"tree_announcement": int(types.TypeTreeAnnouncement), "bootstrap": int(types.TypeBootstrap),
	"wakeup_broadcast": int(types.TypeWakeupBroadcast), "traffic": int(types.TypeTraffic)}

type ratio struct{ a, b uint64 } // drop the first a of every b

type dropRates struct {
	overall ratio
	byType  map[int]ratio
}

// adversary: the reference simulator's GeneralAdversary rule (cmd/pineconesim/simulator/adversary),
// reimplemented: rates per frame type plus an overall one, as defaults or for one peer (a peer's own rates
// replace the defaults for it); a rate r % = a/b in lowest terms drops the first a of every b frames of that type
// that the filter sees with that peer's key, and the overall rate the first a of every b frames of any type.
// A frame goes when either says so. Rates may be fractional here (a/b from r/100 to 1/10000), whole in the
// simulator.
type adversary struct {
	mu       sync.Mutex
	defaults dropRates
	perPeer  map[types.PublicKey]dropRates
	seenType map[types.PublicKey]map[int]uint64
	seenAll  map[types.PublicKey]uint64
	dropped  int64
}

func newAdversary() *adversary {
	return &adversary{perPeer: map[types.PublicKey]dropRates{}, seenType: map[types.PublicKey]map[int]uint64{},
		seenAll: map[types.PublicKey]uint64{}}
}

func percentRatio(pct float64) (ratio, bool) {
	if !(pct >= 0 && pct <= 100) {
		return ratio{}, false
	}
	num := new(big.Rat).SetFrac64(int64(pct*100+0.5), 10000) // to 1/10000 of a percent step: r/100 exactly for whole r
	if num.Sign() == 0 {
		return ratio{0, 1}, true
	}
	return ratio{num.Num().Uint64(), num.Denom().Uint64()}, true
}

func parseRates(drop map[string]float64) (dropRates, string) {
	r := dropRates{overall: ratio{0, 1}, byType: map[int]ratio{}}
	for kind, pct := range drop {
		t, ok := dropKinds[kind]
		if !ok {
			return r, "unknown frame kind " + quote(kind) + " (known: all, bootstrap, keepalive, traffic, " +
				"tree_announcement, wakeup_broadcast)"
		}
		ab, ok := percentRatio(pct)
		if !ok {
			return r, "a drop rate is a percentage from 0 to 100"
		}
		if t < 0 {
			r.overall = ab
		} else {
			r.byType[t] = ab
		}
	}
	return r, ""
}

func (a *adversary) configure(r dropRates, peer *types.PublicKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if peer == nil {
		a.defaults = r
	} else {
		a.perPeer[*peer] = r
	}
}

func (a *adversary) active() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	all := []dropRates{a.defaults}
	for _, r := range a.perPeer {
		all = append(all, r)
	}
	for _, r := range all {
		if r.overall.a > 0 {
			return true
		}
		for _, ab := range r.byType {
			if ab.a > 0 {
				return true
			}
		}
	}
	return false
}

func (a *adversary) drops(from types.PublicKey, ft types.FrameType) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.perPeer[from]
	if !ok {
		r = a.defaults
	}
	if r.overall.b == 0 && len(r.byType) == 0 && len(a.perPeer) == 0 {
		return false // never configured
	}
	drop := false
	if ab := r.overall; ab.a > 0 {
		n := a.seenAll[from]
		a.seenAll[from] = n + 1
		drop = n%ab.b < ab.a
	}
	if ab, ok := r.byType[int(ft)]; ok && ab.a > 0 {
		m := a.seenType[from]
		if m == nil {
			m = map[int]uint64{}
			a.seenType[from] = m
		}
		n := m[int(ft)]
		m[int(ft)] = n + 1
		drop = drop || n%ab.b < ab.a
	}
	if drop {
		a.dropped++
	}
	return drop
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
