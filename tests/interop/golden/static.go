package main

// The "types" vectors: each frame type built as the router builds it, with varied field values, and marshalled
// with the reference's encoder. Which router code each builder follows is named in its comment.

import (
	"crypto/ed25519"
	"fmt"

	"github.com/matrix-org/pinecone/types"
)

const unixMs = 1700000000000 // a Unix-ms timestamp: what bootstrap and broadcast sequences are (6-byte varu64)
const maxU64 = ^uint64(0)    // the largest varu64: 10 bytes

var (
	alice = newIdentity("alice")
	bob   = newIdentity("bob")
	carol = newIdentity("carol")
)

func chain(n int) []identity {
	ids := make([]identity, n)
	for i := range ids {
		ids[i] = newIdentity(fmt.Sprintf("hop-%02d", i))
	}
	return ids
}

// announcement is the root's own announcement (state_tree.go _rootAnnouncement: no hops) re-signed hop by hop as
// forPeer does: signers[0] (the root) signs for ports[0], signers[1] for ports[1], ...
func announcement(root identity, seq uint64, signers []identity, ports []uint64) types.SwitchAnnouncement {
	a := types.SwitchAnnouncement{Root: types.Root{RootPublicKey: root.pub, RootSequence: types.Varu64(seq)}}
	for i, s := range signers {
		if err := a.Sign(s.priv, types.SwitchPortID(ports[i])); err != nil {
			panic(err)
		}
	}
	return a
}

// treeFrame: forPeer's frame (type TreeAnnouncement, hop limit 0, the announcement marshalled as payload).
func treeFrame(a types.SwitchAnnouncement, hop uint8) *types.Frame {
	var buf [65535]byte
	n, err := a.MarshalBinary(buf[:])
	if err != nil {
		panic(err)
	}
	return &types.Frame{Type: types.TypeTreeAnnouncement, HopLimit: hop, Payload: append([]byte(nil), buf[:n]...)}
}

// bootstrapPayload / broadcastPayload: _bootstrapNow / _createBroadcastFrame (sequence, root, signature over
// ProtectedPayload; an all-zero signature when the router runs with PINECONE_DISABLE_SIGNATURES).
func bootstrapPayload(signer identity, seq uint64, root identity, rootSeq uint64, sign bool) []byte {
	b := types.VirtualSnakeBootstrap{Sequence: types.Varu64(seq),
		Root: types.Root{RootPublicKey: root.pub, RootSequence: types.Varu64(rootSeq)}}
	if sign {
		protected, err := b.ProtectedPayload()
		if err != nil {
			panic(err)
		}
		copy(b.Signature[:], ed25519.Sign(signer.priv, protected))
	}
	var buf [types.MaxFrameSize]byte
	n, err := b.MarshalBinary(buf[:])
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), buf[:n]...)
}

func broadcastPayload(signer identity, seq uint64, root identity, rootSeq uint64) []byte {
	w := types.WakeupBroadcast{Sequence: types.Varu64(seq),
		Root: types.Root{RootPublicKey: root.pub, RootSequence: types.Varu64(rootSeq)}}
	protected, err := w.ProtectedPayload()
	if err != nil {
		panic(err)
	}
	copy(w.Signature[:], ed25519.Sign(signer.priv, protected))
	var buf [types.MaxFrameSize]byte
	n, err := w.MarshalBinary(buf[:])
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), buf[:n]...)
}

func bootstrapFrame(from identity, wm types.VirtualSnakeWatermark, hop uint8, payload []byte) *types.Frame {
	return &types.Frame{Type: types.TypeBootstrap, HopLimit: hop, DestinationKey: from.pub, Watermark: wm, Payload: payload}
}

// trafficFrame: WriteTo's frame (hop limit MaxHopLimit, destination coordinates when cached, the sender's
// coordinates, watermark FullMask/0), or a forwarder's (hop limit decremented, watermark rewritten).
func trafficFrame(dst, src identity, dc, sc types.Coordinates, wm types.VirtualSnakeWatermark, hop uint8, payload []byte) *types.Frame {
	return &types.Frame{Type: types.TypeTraffic, HopLimit: hop, Destination: dc, DestinationKey: dst.pub,
		Source: sc, SourceKey: src.pub, Watermark: wm, Payload: payload}
}

func wm(key types.PublicKey, seq uint64) types.VirtualSnakeWatermark {
	return types.VirtualSnakeWatermark{PublicKey: key, Sequence: types.Varu64(seq)}
}

var initialWM = wm(types.FullMask, 0)

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + 7)
	}
	return b
}

// pingPayload: snekbed's ping convention (PROTOCOL.md section 8; node/pinecone/ping.go): ordinary traffic payload.
func pingPayload(kind byte, hops uint16, origin, dest identity) []byte {
	b := append([]byte("pineping"), kind, byte(hops>>8), byte(hops))
	b = append(b, origin.pub[:]...)
	return append(b, dest.pub[:]...)
}

func ports(n int, f func(i int) uint64) types.Coordinates {
	c := make(types.Coordinates, n)
	for i := range c {
		c[i] = types.SwitchPortID(f(i))
	}
	return c
}

// routerPort: a port number the router can give a peer (1..253), spread so that some take two varu64 bytes.
func routerPort(i int) uint64 { return uint64((i*97+1)%253 + 1) }

func u64s(c types.Coordinates) []uint64 { return coordsJSON(c) }

func emitStatic() {
	// Keepalive: peer.go's writer, getFrame() with Type = TypeKeepalive and nothing else.
	emitFrame("keepalive", "types", true, &types.Frame{Type: types.TypeKeepalive})
	emitFrame("keepalive/hop-limit-255", "types", false, &types.Frame{Type: types.TypeKeepalive, HopLimit: 255})

	// TreeAnnouncement: forPeer. The root's own announcement signed for one peer, then chains re-signed per hop.
	hops := chain(40)
	emitFrame("tree_announcement/root/seq-1/port-1", "types", true,
		treeFrame(announcement(alice, 1, []identity{alice}, []uint64{1}), 0))
	emitFrame("tree_announcement/root/seq-0/port-253", "types", true,
		treeFrame(announcement(alice, 0, []identity{alice}, []uint64{253}), 0))
	emitFrame("tree_announcement/root/seq-max/port-128", "types", true,
		treeFrame(announcement(alice, maxU64, []identity{alice}, []uint64{128}), 0))
	emitFrame("tree_announcement/chain-2/seq-unix-ms", "types", true,
		treeFrame(announcement(alice, unixMs, []identity{alice, bob}, []uint64{3, 1}), 0))
	emitFrame("tree_announcement/chain-3", "types", true,
		treeFrame(announcement(alice, 7, []identity{alice, bob, carol}, []uint64{1, 127, 128}), 0))
	for _, n := range []int{8, 40} {
		signers := append([]identity{alice}, hops[:n-1]...)
		ps := u64s(ports(n, routerPort))
		emitFrame(fmt.Sprintf("tree_announcement/chain-%d", n), "types", true,
			treeFrame(announcement(alice, uint64(300*n), signers, ps), 0))
	}
	emitFrame("tree_announcement/chain-4/ports-above-253", "types", false,
		treeFrame(announcement(alice, 2, []identity{alice, bob, carol, hops[0]}, []uint64{300, 16384, 1 << 32, maxU64}), 0))
	emitFrame("tree_announcement/no-hops", "types", false, treeFrame(announcement(alice, 5, nil, nil), 0))
	emitFrame("tree_announcement/hop-limit-255", "types", false,
		treeFrame(announcement(alice, 1, []identity{alice, bob}, []uint64{2, 9}), 255))

	// Bootstrap: _bootstrapNow (destination key = own key, watermark FullMask/0, hop limit 0), then as a
	// forwarder rewrote its watermark (state_forward.go: f.Watermark = the next hop's watermark).
	bp := bootstrapPayload(bob, unixMs, alice, 1, true)
	emitFrame("bootstrap/initial-watermark", "types", true, bootstrapFrame(bob, initialWM, 0, bp))
	emitFrame("bootstrap/watermark-key-seq-0", "types", true, bootstrapFrame(bob, wm(alice.pub, 0), 0, bp))
	emitFrame("bootstrap/watermark-seq-42", "types", true, bootstrapFrame(bob, wm(carol.pub, 42), 0, bp))
	emitFrame("bootstrap/watermark-seq-unix-ms", "types", true, bootstrapFrame(bob, wm(carol.pub, unixMs+123), 0, bp))
	emitFrame("bootstrap/watermark-seq-max", "types", true, bootstrapFrame(bob, wm(carol.pub, maxU64), 0, bp))
	emitFrame("bootstrap/seq-0/root-seq-0", "types", true,
		bootstrapFrame(carol, initialWM, 0, bootstrapPayload(carol, 0, alice, 0, true)))
	emitFrame("bootstrap/seq-max/root-seq-max", "types", true,
		bootstrapFrame(carol, initialWM, 0, bootstrapPayload(carol, maxU64, alice, maxU64, true)))
	emitFrame("bootstrap/root-seq-300", "types", true,
		bootstrapFrame(hops[3], wm(bob.pub, 300), 0, bootstrapPayload(hops[3], unixMs, alice, 300, true)))
	emitFrame("bootstrap/zero-signature", "types", true, // a router run with PINECONE_DISABLE_SIGNATURES
		bootstrapFrame(bob, initialWM, 0, bootstrapPayload(bob, unixMs, alice, 1, false)))
	emitFrame("bootstrap/hop-limit-255", "types", false, bootstrapFrame(bob, initialWM, 255, bp))

	// Traffic: WriteTo (hop limit 10; SNEK-routed with the watermark, or tree-routed to cached coordinates),
	// then as forwarders pass it on (watermark rewritten; hop limit decremented with hop limiting on).
	ping := pingPayload(0, 1, bob, alice)
	pong := pingPayload(1, 3, alice, bob)
	mh := uint8(types.MaxHopLimit)
	emitFrame("traffic/snek/root-source/payload-0", "types", true,
		trafficFrame(bob, alice, nil, nil, initialWM, mh, []byte{}))
	emitFrame("traffic/snek/src-1/payload-1", "types", true,
		trafficFrame(alice, bob, nil, types.Coordinates{1}, initialWM, mh, pattern(1)))
	emitFrame("traffic/snek/src-4321/payload-7", "types", true, // types/frame_test.go's 124-byte frame
		trafficFrame(alice, bob, nil, types.Coordinates{4, 3, 2, 1}, initialWM, mh, []byte("ABCDEFG")))
	emitFrame("traffic/snek/ping-75", "types", true,
		trafficFrame(alice, bob, nil, types.Coordinates{1, 2}, wm(alice.pub, 0), mh, ping))
	emitFrame("traffic/snek/watermark-seq-unix-ms/payload-1024", "types", true,
		trafficFrame(alice, bob, nil, types.Coordinates{2, 200}, wm(carol.pub, unixMs), mh, pattern(1024)))
	emitFrame("traffic/snek/watermark-seq-max/hop-limit-1", "types", true,
		trafficFrame(alice, bob, nil, types.Coordinates{7}, wm(carol.pub, maxU64), 1, pattern(33)))
	emitFrame("traffic/snek/src-long-64", "types", true,
		trafficFrame(alice, carol, nil, ports(64, routerPort), wm(bob.pub, 9), 4, pattern(100)))
	emitFrame("traffic/tree/dst-1-2-3-4-5000/payload-7", "types", false, // types/frame_test.go's 97-byte frame (port 5000)
		trafficFrame(alice, bob, types.Coordinates{1, 2, 3, 4, 5000}, types.Coordinates{4, 3, 2, 1}, initialWM, 0, []byte("ABCDEFG")))
	emitFrame("traffic/tree/dst-1/root-source/pong-75", "types", true,
		trafficFrame(bob, alice, types.Coordinates{1}, nil, initialWM, mh, pong))
	emitFrame("traffic/tree/dst-3-253/payload-4096", "types", true,
		trafficFrame(bob, carol, types.Coordinates{3, 253}, types.Coordinates{1, 128, 2}, initialWM, mh, pattern(4096)))
	emitFrame("traffic/tree/long-100/hop-limit-2", "types", true,
		trafficFrame(bob, carol, ports(100, routerPort), ports(100, func(i int) uint64 { return routerPort(i + 50) }), initialWM, 2, pattern(300)))
	emitFrame("traffic/snek/ports-above-253", "types", false,
		trafficFrame(bob, carol, nil, types.Coordinates{300, 16384, 1 << 32, 1 << 63, types.SwitchPortID(maxU64)}, initialWM, mh, pattern(5)))
	emitFrame("traffic/tree/ports-above-253/hop-limit-255", "types", false,
		trafficFrame(bob, carol, types.Coordinates{types.SwitchPortID(maxU64), 254, 0}, types.Coordinates{1 << 40}, initialWM, 255, pattern(2)))
	emitFrame("traffic/tree/hop-limit-0", "types", false,
		trafficFrame(bob, carol, types.Coordinates{1}, types.Coordinates{2}, initialWM, 0, pattern(3)))
	// The largest frames the 16-bit length field allows: 65 535 bytes in all.
	for _, c := range []struct {
		name   string
		dc, sc types.Coordinates
		w      types.VirtualSnakeWatermark
	}{
		{"traffic/snek/max-frame-65535", nil, types.Coordinates{1, 2}, wm(alice.pub, unixMs)},
		{"traffic/tree/max-frame-65535", ports(30, routerPort), ports(20, routerPort), initialWM},
	} {
		f := trafficFrame(alice, bob, c.dc, c.sc, c.w, mh, nil)
		f.Payload = pattern(65535 - len(marshal(f)))
		emitFrame(c.name, "types", true, f)
	}

	// WakeupBroadcast: _createBroadcastFrame (source key, hop limit NetworkHorizonDistance = 5), then as the
	// flood decrements it (state_broadcast.go: HopLimit -= 1 while above 1).
	for _, h := range []uint8{types.NetworkHorizonDistance, 4, 1} {
		emitFrame(fmt.Sprintf("wakeup_broadcast/hop-limit-%d", h), "types", true,
			&types.Frame{Type: types.TypeWakeupBroadcast, SourceKey: carol.pub, HopLimit: h,
				Payload: broadcastPayload(carol, unixMs+uint64(h), alice, 1)})
	}
	emitFrame("wakeup_broadcast/seq-max/root-seq-0", "types", true,
		&types.Frame{Type: types.TypeWakeupBroadcast, SourceKey: bob.pub, HopLimit: types.NetworkHorizonDistance,
			Payload: broadcastPayload(bob, maxU64, bob, 0)})
	emitFrame("wakeup_broadcast/seq-0/root-seq-max", "types", true,
		&types.Frame{Type: types.TypeWakeupBroadcast, SourceKey: hops[5].pub, HopLimit: types.NetworkHorizonDistance,
			Payload: broadcastPayload(hops[5], 0, alice, maxU64)})
	emitFrame("wakeup_broadcast/hop-limit-255", "types", false,
		&types.Frame{Type: types.TypeWakeupBroadcast, SourceKey: carol.pub, HopLimit: 255,
			Payload: broadcastPayload(carol, unixMs, alice, 1)})

	// What the reference writes for a frame over 65 535 bytes (a WriteTo of a 65 535-byte payload): the length
	// field wraps (MarshalBinary's uint16(offset)), so no decoder can take it (PROTOCOL.md section 4.3).
	big := trafficFrame(alice, bob, nil, nil, initialWM, mh, pattern(65535))
	b := marshal(big)
	fields := frameFields(big)
	fields["payload"] = nil // 128 KiB of hex says nothing more
	fields["payload_len"] = len(big.Payload)
	fields["total_len"] = len(b)
	no := false
	emit(vector{Name: "reject/traffic/length-field-wraps", Kind: "reject", Source: "types", Router: true, Hex: hx(b),
		GoRoundtrip: &no, Fields: fields})
}
