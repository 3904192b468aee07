package main

// Peerings: the TCP listener, the dialers of --peer and POST /peers URIs, and the table of live peerings by
// port. The redial rule is the reference's own connection manager's (connections/manager.go), reimplemented
// here because that package also pulls in a websocket library Debian does not package: a worker looks every
// 5 s for configured URIs that are not connected and whose wait is over; a failed attempt doubles the wait
// (2^attempts seconds, capped: an hour in the reference, --backoff-max-s here), a successful one resets it, so a
// peering that drops is redialled at the worker's next round. POST /peers/redial ends every wait at once, and
// starts a dial in flight over (one begun while the path was down can hang until its 5 s timeout: a SYN lost
// where a link was cut).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/matrix-org/pinecone/router"
	"github.com/matrix-org/pinecone/types"
)

const (
	redialInterval = 5 * time.Second // the reference connection manager's worker interval and dial timeout
	maxPorts       = 253             // ports 1..253 (the reference's portCount is 254, port 0 is the router)
)

type dialer struct {
	spec     peerSpec
	attempts int // failed attempts in a row
	next     time.Time
	lastErr  string
	conn     *wireConn // the live peering it made, or nil
	dialing  bool
	cancel   context.CancelFunc // ends the dial in flight (POST /peers/redial)
	again    bool               // the dial in flight was ended to dial at once: no backoff
	removed  bool
	upCh     chan struct{} // closed and replaced whenever a peering comes up
}

type peerTable struct {
	mu      sync.Mutex
	byPort  map[int]*wireConn   // live peerings the router announced (PeerAdded)
	waiting map[int][]*wireConn // Connect returned this port, PeerAdded not yet handled
	dialers map[string]*dialer  // by URI
	wake    chan struct{}
}

func newPeerTable() *peerTable {
	return &peerTable{byPort: map[int]*wireConn{}, waiting: map[int][]*wireConn{}, dialers: map[string]*dialer{},
		wake: make(chan struct{}, 1)}
}

// attach hands a connection to the router (the handshake is the router's) and records the peering.
func (n *Node) attach(c net.Conn, link linkSpec, d *dialer) (*wireConn, error) {
	w := newWireConn(n, c, link, d)
	port, err := n.r.Connect(w, router.ConnectionPeerType(link.linkType), router.ConnectionURI(w.remote))
	if err != nil {
		_ = c.Close()
		reason := handshakeReason(err)
		n.stats.addTo(n.stats.handshakes, reason)
		n.events.emit("handshake_failed", fields{"reason": reason, "remote": w.remote})
		n.logf("handshake with %s failed (%s): %v", w.remote, reason, err)
		return nil, err
	}
	w.port.Store(int32(port))
	t := n.peers
	t.mu.Lock()
	w.up = true
	t.waiting[int(port)] = append(t.waiting[int(port)], w)
	t.mu.Unlock()
	return w, nil
}

// peerAdded: the router's PeerAdded event. The peering is ours (attach) unless the multicast package made it
// (it connects without a URI; ours always pass one).
func (n *Node) peerAdded(port int, peerID string) {
	ours := true
	for _, p := range n.r.Peers() {
		if p.Port == port && p.URI == "" {
			ours = false
		}
	}
	t := n.peers
	t.mu.Lock()
	deadline := time.Now().Add(2 * time.Second)
	var w *wireConn
	for ours {
		if q := t.waiting[port]; len(q) > 0 {
			i := 0
			for j, c := range q { // the one with this key, if several wait on one port
				if k, ok := c.peerKey(); ok && k.String() == peerID {
					i = j
					break
				}
			}
			w = q[i]
			t.waiting[port] = append(q[:i:i], q[i+1:]...)
			break
		}
		if time.Now().After(deadline) {
			break
		}
		t.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // Connect is returning on another goroutine: microseconds
		t.mu.Lock()
	}
	class := ""
	if w != nil {
		t.byPort[port] = w
		class = w.link.class
		if d := w.dialer; d != nil {
			d.conn = w
			d.attempts, d.next, d.lastErr = 0, time.Now(), ""
			close(d.upCh)
			d.upCh = make(chan struct{})
		}
	}
	t.mu.Unlock()
	if w == nil { // the multicast package's peering: its class is its link type
		class = "multicast"
		for _, p := range n.r.Peers() {
			if p.Port == port {
				class = linkTypeName(p.PeerType)
			}
		}
	}
	n.events.emit("peer_up", fields{"port": port, "peer": peerID, "link_class": class})
	n.logf("peer up: port %d key %s class %s", port, short(peerID), class)
}

func (n *Node) peerRemoved(port int, peerID string) {
	t := n.peers
	t.mu.Lock()
	w := t.byPort[port]
	delete(t.byPort, port)
	reason := "closed"
	if w != nil {
		reason = w.endReason()
		if d := w.dialer; d != nil && d.conn == w {
			d.conn = nil
		}
	}
	t.mu.Unlock()
	n.stats.addTo(n.stats.disconn, reason)
	n.events.emit("peer_down", fields{"port": port, "peer": peerID, "reason": reason})
	n.logf("peer down: port %d key %s (%s)", port, short(peerID), reason)
	// a dialler redials at the worker's next round, as the reference's connection manager does
}

func short(k string) string {
	if len(k) > 16 {
		return k[:16]
	}
	return k
}

// portOf: the port of a live peering with that key (the lowest), 0 when none.
func (n *Node) portOf(peerHex string) int {
	t := n.peers
	t.mu.Lock()
	defer t.mu.Unlock()
	best := 0
	for port, w := range t.byPort {
		if k, ok := w.peerKey(); ok && k.String() == peerHex && (best == 0 || port < best) {
			best = port
		}
	}
	if best == 0 {
		for _, p := range n.r.Peers() {
			if p.PublicKey == peerHex && (best == 0 || p.Port < best) {
				best = p.Port
			}
		}
	}
	return best
}

// accept serves the peer listener: each connection gets the class of the --inbound rule matching its address.
func (n *Node) accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			n.logf("accept: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		link := n.cfg.listenLink
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			for _, r := range n.cfg.inbound {
				if r.matches(a.IP) {
					link = r.link
					break
				}
			}
		}
		go func() { _, _ = n.attach(c, link, nil) }()
	}
}

// addDialer starts redialling uri (the same dialer when it is already configured) and dials it now.
func (n *Node) addDialer(spec peerSpec) *dialer {
	t := n.peers
	t.mu.Lock()
	d := t.dialers[spec.uri]
	if d == nil {
		d = &dialer{spec: spec, next: time.Now(), upCh: make(chan struct{})}
		t.dialers[spec.uri] = d
	}
	t.mu.Unlock()
	n.wakeDialers()
	return d
}

func (n *Node) wakeDialers() {
	select {
	case n.peers.wake <- struct{}{}:
	default:
	}
}

// redialNow ends the wait of every dialer that is waiting out its backoff, and starts every dial in flight
// over; returns how many.
func (n *Node) redialNow() int {
	t := n.peers
	t.mu.Lock()
	woken := 0
	now := time.Now()
	for _, d := range t.dialers {
		if d.conn == nil && d.dialing && d.cancel != nil {
			d.again = true
			d.cancel()
			woken++
		} else if d.conn == nil && !d.dialing && d.next.After(now) {
			d.next = now
			woken++
		}
	}
	t.mu.Unlock()
	n.wakeDialers()
	return woken
}

// dialLoop is the connection manager's worker: every redialInterval, or when woken.
func (n *Node) dialLoop() {
	tick := time.NewTicker(redialInterval)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		case <-n.peers.wake:
		}
		t := n.peers
		t.mu.Lock()
		now := time.Now()
		for _, d := range t.dialers {
			if d.conn == nil && !d.dialing && !d.removed && !now.Before(d.next) {
				ctx, cancel := context.WithCancel(n.ctx)
				d.dialing, d.cancel = true, cancel
				go n.dialOnce(ctx, d)
			}
		}
		t.mu.Unlock()
	}
}

func (n *Node) dialOnce(ctx context.Context, d *dialer) {
	dl := net.Dialer{Timeout: redialInterval}
	c, err := dl.DialContext(ctx, "tcp", d.spec.addr) // ctx bounds the dial only, not the connection
	if err == nil {
		_, err = n.attach(c, d.spec.link, d)
	}
	t := n.peers
	t.mu.Lock()
	defer t.mu.Unlock()
	d.cancel()
	d.dialing, d.cancel = false, nil
	if err != nil && d.again && n.ctx.Err() == nil { // ended by POST /peers/redial: dial again now
		d.again = false
		d.next = time.Now()
		n.wakeDialers()
		return
	}
	d.again = false
	if err != nil {
		n.stats.add(&n.stats.dialFail, 1)
		d.attempts++
		wait := time.Duration(math.Exp2(float64(d.attempts)) * float64(time.Second))
		if wait > n.cfg.backoffMax {
			wait = n.cfg.backoffMax
		}
		d.next = time.Now().Add(wait)
		d.lastErr = err.Error()
		n.logf("dial %s failed (attempt %d, next in %s): %v", d.spec.uri, d.attempts, wait, err)
	}
}

// dropPeer closes the peering on port; a dialled URI is not redialled any more. Returns its key, or "".
func (n *Node) dropPeer(port int) string {
	t := n.peers
	t.mu.Lock()
	w := t.byPort[port]
	if w != nil {
		w.setReason("admin_removed")
		if d := w.dialer; d != nil {
			d.removed = true
			delete(t.dialers, d.spec.uri)
		}
	}
	t.mu.Unlock()
	if w == nil {
		for _, p := range n.r.Peers() { // a multicast peering
			if p.Port == port {
				n.r.Disconnect(types.SwitchPortID(port), fmt.Errorf("removed through the admin API"))
				return p.PublicKey
			}
		}
		return ""
	}
	k, _ := w.peerKey()
	n.r.Disconnect(types.SwitchPortID(port), fmt.Errorf("removed through the admin API"))
	return k.String()
}

// addPeer: POST /peers. Waits up to timeout for the peering to come up.
func (n *Node) addPeer(spec peerSpec, timeout time.Duration) (map[string]interface{}, int) {
	d := n.addDialer(spec)
	t := n.peers
	t.mu.Lock()
	up := d.upCh
	conn := d.conn
	t.mu.Unlock()
	if conn == nil && timeout > 0 {
		select {
		case <-up:
		case <-time.After(timeout):
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := d.conn; w != nil {
		k, _ := w.peerKey()
		return map[string]interface{}{"uri": spec.uri, "status": "connected", "port": int(w.port.Load()),
			"key": k.String(), "class": linkTypeName(w.link.linkType)}, 201
	}
	var last interface{}
	if d.lastErr != "" {
		last = d.lastErr
	}
	return map[string]interface{}{"uri": spec.uri, "status": "dialing", "attempts": d.attempts, "last_error": last}, 202
}

// livePorts: the ports of the peerings the router announced, in order.
func (n *Node) livePorts() []int {
	t := n.peers
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int, 0, len(t.byPort))
	for p := range t.byPort {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// stopPeers closes every peering (shutdown) and waits briefly for the router to report them down.
func (n *Node) stopPeers(reason string) {
	t := n.peers
	t.mu.Lock()
	for _, d := range t.dialers {
		d.removed = true
	}
	for _, w := range t.byPort {
		w.setReason(reason)
	}
	t.mu.Unlock()
	for _, p := range n.r.Peers() {
		n.r.Disconnect(types.SwitchPortID(p.Port), fmt.Errorf("node stopping"))
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		t.mu.Lock()
		left := len(t.byPort)
		t.mu.Unlock()
		if left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
