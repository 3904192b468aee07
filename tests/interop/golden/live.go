package main

// The "router" vectors: three reference routers in a line, root - middle - leaf (the root is the highest key,
// at one end), each link a pair of in-memory pipes with a relay between them that records every byte each
// router writes. Then the leaf sends traffic to the root with WriteTo (SNEK-routed: no coordinates known) and
// the root answers (tree-routed: the leaf's coordinates came with its traffic). What is recorded: the
// handshakes (router.Connect writes them; they are not exported otherwise), the tree announcements of one and
// two hops, wakeup broadcasts as sent and as forwarded, bootstraps, traffic of both routings as sent and as
// forwarded (watermark rewritten), and keepalives when asked to wait for them.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/matrix-org/pinecone/router"
	"github.com/matrix-org/pinecone/types"
)

const handshakeLen = 8 + 32 + 64

// typeName: snekbed's names for the frame types (contract/frames.py), for the vectors' names.
func typeName(t byte) string {
	names := []string{"keepalive", "tree_announcement", "bootstrap", "traffic", "wakeup_broadcast"}
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("type-%d", t)
}

type direction struct {
	name string // "root->middle"
	from identity
	mu   sync.Mutex
	buf  []byte
}

func (d *direction) snapshot() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]byte(nil), d.buf...)
}

// relay copies src to dst, keeping a copy of every byte.
func relay(d *direction, src, dst net.Conn) {
	b := make([]byte, 65536)
	for {
		n, err := src.Read(b)
		if n > 0 {
			d.mu.Lock()
			d.buf = append(d.buf, b[:n]...)
			d.mu.Unlock()
			if _, werr := dst.Write(b[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// split cuts a recorded direction into its handshake and its complete frames (PROTOCOL.md 4.3 framing: the
// 10-byte header's last two bytes give the total length); a frame cut off by the end of the run is left out.
func split(b []byte) (hs []byte, frames [][]byte) {
	if len(b) < handshakeLen {
		return nil, nil
	}
	hs, b = b[:handshakeLen], b[handshakeLen:]
	for len(b) >= types.FrameHeaderLength {
		n := int(binary.BigEndian.Uint16(b[8:10]))
		if n < types.FrameHeaderLength || n > len(b) {
			break
		}
		frames = append(frames, b[:n])
		b = b[n:]
	}
	return hs, frames
}

type liveNode struct {
	id  identity
	r   *router.Router
	tag string
}

func connect(a, b *liveNode, dirs *[]*direction) error {
	a1, a2 := net.Pipe()
	b1, b2 := net.Pipe()
	ab := &direction{name: a.tag + "->" + b.tag, from: a.id}
	ba := &direction{name: b.tag + "->" + a.tag, from: b.id}
	*dirs = append(*dirs, ab, ba)
	go relay(ab, a2, b2)
	go relay(ba, b2, a2)
	errs := make(chan error, 2)
	for _, c := range []struct {
		n    *liveNode
		conn net.Conn
		uri  string
	}{{a, a1, "pipe://" + b.tag}, {b, b1, "pipe://" + a.tag}} {
		c := c
		go func() {
			_, err := c.n.r.Connect(c.conn, router.ConnectionPeerType(router.PeerTypeRemote), router.ConnectionURI(c.uri))
			errs <- err
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			return fmt.Errorf("Connect %s: %w", ab.name, err)
		}
	}
	return nil
}

func waitFor(deadline time.Time, what string, cond func() bool) error {
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func emitLive(wantKeepalive bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ids := []identity{newIdentity("live-0"), newIdentity("live-1"), newIdentity("live-2")}
	sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i].pub[:], ids[j].pub[:]) > 0 })
	quiet := log.New(io.Discard, "", 0)
	nodes := make([]*liveNode, 3)
	for i, tag := range []string{"root", "middle", "leaf"} {
		nodes[i] = &liveNode{id: ids[i], r: router.NewRouter(quiet, ids[i].priv), tag: tag}
	}
	root, middle, leaf := nodes[0], nodes[1], nodes[2]
	defer func() {
		for _, n := range nodes {
			n.r.Close()
		}
	}()
	var dirs []*direction
	if err := connect(root, middle, &dirs); err != nil {
		return err
	}
	if err := connect(middle, leaf, &dirs); err != nil {
		return err
	}
	if err := waitFor(deadline, "the leaf's coordinates", func() bool { return len(leaf.r.Coords()) == 2 }); err != nil {
		return err
	}

	// Traffic: the leaf to the root until one arrives, then the root's answer, tree-routed.
	got := make(chan net.Addr, 1)
	_ = root.r.SetReadDeadline(deadline)
	go func() {
		b := make([]byte, 65535)
		if _, from, err := root.r.ReadFrom(b); err == nil && from != nil {
			got <- from
		}
	}()
	var from net.Addr
	for k := 0; from == nil; k++ {
		if _, err := leaf.r.WriteTo([]byte(fmt.Sprintf("golden traffic from the leaf #%d", k)), root.id.pub); err != nil {
			return fmt.Errorf("leaf WriteTo: %w", err)
		}
		select {
		case from = <-got:
		case <-time.After(200 * time.Millisecond):
			if time.Now().After(deadline) {
				return fmt.Errorf("timed out waiting for the leaf's traffic at the root")
			}
		}
	}
	if _, err := root.r.WriteTo(pingPayload(1, 3, root.id, leaf.id), from); err != nil {
		return fmt.Errorf("root WriteTo: %w", err)
	}

	seen := func(pred func(f []byte) bool, where func(d *direction) bool) bool {
		for _, d := range dirs {
			if !where(d) {
				continue
			}
			_, frames := split(d.snapshot())
			found := false
			for _, f := range frames {
				if pred(f) {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
	anyDir := func(t types.FrameType, extra func(f []byte) bool) func() bool {
		return func() bool {
			for _, d := range dirs {
				if seen(func(f []byte) bool { return f[5] == byte(t) && (extra == nil || extra(f)) },
					func(x *direction) bool { return x == d }) {
					return true
				}
			}
			return false
		}
	}
	treeRouted := func(f []byte) bool { return len(f) > 14 && binary.BigEndian.Uint16(f[12:14]) != 0 }
	snekRouted := func(f []byte) bool { return len(f) > 14 && binary.BigEndian.Uint16(f[12:14]) == 0 }
	for _, w := range []struct {
		what string
		cond func() bool
	}{
		{"a tree announcement", anyDir(types.TypeTreeAnnouncement, nil)},
		{"a wakeup broadcast", anyDir(types.TypeWakeupBroadcast, nil)},
		{"a bootstrap", anyDir(types.TypeBootstrap, nil)},
		{"SNEK-routed traffic", anyDir(types.TypeTraffic, snekRouted)},
		{"tree-routed traffic", anyDir(types.TypeTraffic, treeRouted)},
	} {
		if err := waitFor(deadline, w.what, w.cond); err != nil {
			return err
		}
	}
	if wantKeepalive {
		every := func() bool {
			return seen(func(f []byte) bool { return f[5] == byte(types.TypeKeepalive) }, func(*direction) bool { return true })
		}
		if err := waitFor(deadline, "a keepalive on every link direction", every); err != nil {
			return err
		}
	}

	snaps := make([][]byte, len(dirs))
	for i, d := range dirs {
		snaps[i] = d.snapshot()
	}
	for i, d := range dirs {
		hs, frames := split(snaps[i])
		if hs == nil {
			return fmt.Errorf("%s: no handshake recorded", d.name)
		}
		emit(vector{Name: "handshake/router/" + d.name, Kind: "handshake", Source: "router", Router: true, Hex: hx(hs),
			Fields: map[string]interface{}{"key": hx(d.from.pub[:]), "seed": hx(d.from.seed)}})
		stream := append([]byte(nil), hs...)
		for j, b := range frames {
			stream = append(stream, b...)
			f, ok := roundtrip(b)
			fields := map[string]interface{}{"type": int(b[5])}
			if f != nil {
				fields = frameFields(f)
			}
			emit(vector{Name: fmt.Sprintf("router/%s/%03d/%s", d.name, j, typeName(b[5])), Kind: "frame",
				Source: "router", Router: true, Hex: hx(b), GoRoundtrip: &ok, Fields: fields})
		}
		emit(vector{Name: "stream/router/" + d.name, Kind: "stream", Source: "router", Router: true, Hex: hx(stream),
			Fields: map[string]interface{}{"frames": len(frames), "key": hx(d.from.pub[:])}})
	}
	return nil
}
