// Command golden prints golden wire vectors made by the Pinecone reference's own encoder, one JSON object a
// line on stdout, for tests/interop/test_golden_wire.py (docs/interop.md, "Golden wire tests").
//
// It uses only the reference's public API (github.com/matrix-org/pinecone/types and .../router) and is built
// offline in GOPATH mode by orchestrator.backends.reference.build_go_program. Two sources:
//
//   - "types" (static.go): every frame type built the way the router builds it (the same types, fields and
//     constants as router/state_tree.go forPeer, state_snek.go _bootstrapNow, state_broadcast.go
//     _createBroadcastFrame, packetconn.go WriteTo, peer.go's keepalive) with varied field values, and marshalled
//     with types.Frame.MarshalBinary as the router's peer writer does. A few variants the router itself never
//     sends but the types package encodes (hop limit 255, ports above 253, an announcement with no hops, an
//     all-zero signature) are marked "router": false.
//   - "router" (live.go): three real routers (router.NewRouter) in a line over in-memory pipes, with a relay that
//     records every byte each one writes: their handshakes (router.Connect is the only code that makes one: it
//     is not exported), tree announcements, wakeup broadcasts, bootstraps and traffic sent with WriteTo.
//
// Each line: {"name", "kind": "frame"|"handshake"|"stream"|"reject", "source": "types"|"router", "router": bool,
// "hex", "fields"}. "fields" says what was put in (types) or what the reference's own decoders
// (Frame.UnmarshalBinary, SwitchAnnouncement.UnmarshalBinary, which verifies every signature, ...) read back
// (router). Every frame is also decoded and re-encoded by the reference ("go_roundtrip": true when identical).
package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/matrix-org/pinecone/types"
)

// vector is one output line.
type vector struct {
	Name        string                 `json:"name"`
	Kind        string                 `json:"kind"`
	Source      string                 `json:"source"`
	Router      bool                   `json:"router"` // the router itself can put exactly this on the wire
	Hex         string                 `json:"hex"`
	GoRoundtrip *bool                  `json:"go_roundtrip,omitempty"`
	Fields      map[string]interface{} `json:"fields"`
}

var out = func() *json.Encoder {
	e := json.NewEncoder(os.Stdout)
	e.SetEscapeHTML(false) // names like "router/root->middle/000/..." as they are
	return e
}()

func emit(v vector) {
	if err := out.Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "golden:", err)
		os.Exit(1)
	}
}

// identity is a key pair from a fixed seed: SHA-256("snekbed-golden/" + name), so Python can rebuild it.
type identity struct {
	name string
	seed []byte
	priv ed25519.PrivateKey
	pub  types.PublicKey
}

func newIdentity(name string) identity {
	s := sha256.Sum256([]byte("snekbed-golden/" + name))
	priv := ed25519.NewKeyFromSeed(s[:])
	var pub types.PublicKey
	copy(pub[:], priv.Public().(ed25519.PublicKey))
	return identity{name: name, seed: s[:], priv: priv, pub: pub}
}

func hx(b []byte) string { return hex.EncodeToString(b) }

func coordsJSON(c types.Coordinates) []uint64 {
	out := make([]uint64, 0, len(c))
	for _, p := range c {
		out = append(out, uint64(p))
	}
	return out
}

// frameFields is what a frame carries on the wire, per type (PROTOCOL.md section 4.4), as the reference holds it.
func frameFields(f *types.Frame) map[string]interface{} {
	m := map[string]interface{}{
		"type": int(f.Type), "version": int(f.Version), "extra": int(f.Extra), "hop_limit": int(f.HopLimit),
	}
	switch f.Type {
	case types.TypeTreeAnnouncement:
		m["payload"] = hx(f.Payload)
		var a types.SwitchAnnouncement
		if _, err := a.UnmarshalBinary(f.Payload); err == nil { // verifies every hop's signature
			m["announcement"] = announcementFields(&a)
		}
	case types.TypeBootstrap:
		m["destination_key"] = hx(f.DestinationKey[:])
		m["watermark"] = map[string]interface{}{"key": hx(f.Watermark.PublicKey[:]), "seq": uint64(f.Watermark.Sequence)}
		m["payload"] = hx(f.Payload)
		var b types.VirtualSnakeBootstrap
		if _, err := b.UnmarshalBinary(f.Payload); err == nil {
			m["bootstrap"] = signedRootFields(b.Sequence, b.Root, b.Signature[:])
		}
	case types.TypeTraffic:
		m["destination_coords"] = coordsJSON(f.Destination)
		m["source_coords"] = coordsJSON(f.Source)
		m["destination_key"] = hx(f.DestinationKey[:])
		m["source_key"] = hx(f.SourceKey[:])
		if len(f.Destination) == 0 { // only SNEK-routed traffic carries a watermark
			m["watermark"] = map[string]interface{}{"key": hx(f.Watermark.PublicKey[:]), "seq": uint64(f.Watermark.Sequence)}
		}
		m["payload"] = hx(f.Payload)
	case types.TypeWakeupBroadcast:
		m["source_key"] = hx(f.SourceKey[:])
		m["payload"] = hx(f.Payload)
		var w types.WakeupBroadcast
		if _, err := w.UnmarshalBinary(f.Payload); err == nil {
			m["broadcast"] = signedRootFields(w.Sequence, w.Root, w.Signature[:])
		}
	}
	return m
}

func announcementFields(a *types.SwitchAnnouncement) map[string]interface{} {
	hops := make([]map[string]interface{}, 0, len(a.Signatures))
	for _, s := range a.Signatures {
		hops = append(hops, map[string]interface{}{"port": uint64(s.Hop), "key": hx(s.PublicKey[:]), "signature": hx(s.Signature[:])})
	}
	return map[string]interface{}{"root_key": hx(a.RootPublicKey[:]), "root_seq": uint64(a.RootSequence), "hops": hops}
}

func signedRootFields(seq types.Varu64, root types.Root, sig []byte) map[string]interface{} {
	return map[string]interface{}{"seq": uint64(seq), "root_key": hx(root.RootPublicKey[:]),
		"root_seq": uint64(root.RootSequence), "signature": hx(sig)}
}

// marshal encodes f as the router's peer writer does (peer.go _write: a MaxFrameSize buffer, MarshalBinary).
func marshal(f *types.Frame) []byte {
	var buf [types.MaxFrameSize]byte
	n, err := f.MarshalBinary(buf[:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "golden: MarshalBinary:", err)
		os.Exit(1)
	}
	return append([]byte(nil), buf[:n]...)
}

// roundtrip decodes b with the reference (as peer.go _receive does) and encodes it again.
func roundtrip(b []byte) (*types.Frame, bool) {
	f := &types.Frame{Payload: make([]byte, 0, types.MaxPayloadSize)}
	if _, err := f.UnmarshalBinary(b); err != nil {
		return nil, false
	}
	again := marshal(f)
	return f, string(again) == string(b)
}

func emitFrame(name, source string, routerMade bool, f *types.Frame) {
	b := marshal(f)
	_, ok := roundtrip(b)
	emit(vector{Name: name, Kind: "frame", Source: source, Router: routerMade, Hex: hx(b), GoRoundtrip: &ok,
		Fields: frameFields(f)})
}

func main() {
	live := flag.Bool("live", true, "also run three routers in a line and record what they write")
	keepalive := flag.Bool("keepalive", false, "with -live: wait for a keepalive on every link (3 s idle)")
	timeout := flag.Duration("timeout", 20*time.Second, "with -live: give up waiting after this long")
	flag.Parse()
	// The router and SwitchAnnouncement.Sign read this at run time: golden vectors carry real signatures.
	os.Unsetenv("PINECONE_DISABLE_SIGNATURES")
	emitStatic()
	if *live {
		if err := emitLive(*keepalive, *timeout); err != nil {
			fmt.Fprintln(os.Stderr, "golden: live routers:", err)
			os.Exit(1)
		}
	}
}
