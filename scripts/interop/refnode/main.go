// refnode: one node on the Pinecone reference router (github.com/matrix-org/pinecone/router), for
// snekbed's interoperability check (scripts/interop/run.py, docs/interop.md). snekbed's own code; it uses
// only the reference's public API and is built against a checkout of the reference that the user supplies.
//
// It peers over TCP (listens, and dials -connect; with -multicast it also discovers LAN peers with the
// reference's multicast package, Appendix A of PROTOCOL.md), serves the reference's manhole (its JSON state) over HTTP,
// answers pings and pings others with the reference simulator's convention (PROTOCOL.md section 8: a 75-byte
// "pineping" payload in a Traffic frame; every node that forwards a ping increments its hop count).
//
// Standard output, one line each: "KEY <hex>", "LISTEN <addr>", "MANHOLE <addr>", then
// "PONG <target hex> hops=<n> t=<seconds since start>" per answered ping and
// "STRAY type=<0|1> origin=<hex> dest=<hex> t=<s>" per ping or pong delivered to the wrong node.
package main

import (
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/matrix-org/pinecone/multicast"
	"github.com/matrix-org/pinecone/router"
	"github.com/matrix-org/pinecone/types"
)

const preamble = "pineping"
const pingLen = 75

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "TCP address for peers")
	connect := flag.String("connect", "", "comma-separated HOST:PORT of peers to dial")
	seed := flag.String("seed", "", "ed25519 seed, 64 hex digits (random if empty)")
	manhole := flag.String("manhole", "127.0.0.1:0", "HTTP address of the manhole (the router's JSON state)")
	pingTo := flag.String("ping", "", "comma-separated hex keys to ping once a second")
	lan := flag.Bool("multicast", false, "LAN discovery on every suitable interface (the reference's multicast package)")
	flag.Parse()

	var sk ed25519.PrivateKey
	if *seed != "" {
		b, err := hex.DecodeString(*seed)
		if err != nil || len(b) != ed25519.SeedSize {
			log.Fatalf("-seed: want %d bytes as hex", ed25519.SeedSize)
		}
		sk = ed25519.NewKeyFromSeed(b)
	} else {
		var err error
		if _, sk, err = ed25519.GenerateKey(nil); err != nil {
			log.Fatal(err)
		}
	}
	logger := log.New(os.Stderr, "", log.Lmicroseconds)
	r := router.NewRouter(logger, sk)
	self := r.PublicKey()
	// the forwarding hook of the reference simulator: a forwarded ping counts one more hop
	r.InjectPacketFilter(func(from types.PublicKey, f *types.Frame) bool {
		p := f.Payload
		if f.Type == types.TypeTraffic && len(p) >= pingLen && string(p[:8]) == preamble && p[8] == 0 {
			binary.BigEndian.PutUint16(p[9:11], binary.BigEndian.Uint16(p[9:11])+1)
		}
		return false
	})

	if *lan {
		multicast.NewMulticast(logger, r).Start()
	}
	peers, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	state, err := net.Listen("tcp", *manhole)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("KEY %s\nLISTEN %s\nMANHOLE %s\n", hex.EncodeToString(self[:]), peers.Addr(), state.Addr())
	go func() { _ = http.Serve(state, http.HandlerFunc(r.ManholeHandler)) }()
	go func() {
		for {
			c, err := peers.Accept()
			if err != nil {
				return
			}
			uri := router.ConnectionURI(c.RemoteAddr().String())
			if _, err := r.Connect(c, router.ConnectionPeerType(router.PeerTypeRemote), uri); err != nil {
				logger.Println("inbound peering:", err)
			}
		}
	}()
	for _, addr := range strings.Split(*connect, ",") {
		if addr == "" {
			continue
		}
		go func(addr string) {
			for {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					_, err = r.Connect(c, router.ConnectionPeerType(router.PeerTypeRemote), router.ConnectionURI(addr))
					if err == nil {
						return
					}
				}
				logger.Println("dial", addr, err)
				time.Sleep(time.Second)
			}
		}(addr)
	}

	start := time.Now()
	since := func() float64 { return time.Since(start).Seconds() }
	go func() {
		buf := make([]byte, 65535)
		for {
			_ = r.SetReadDeadline(time.Now().Add(time.Hour)) // without a deadline ReadFrom returns at once
			n, _, err := r.ReadFrom(buf)
			if err != nil {
				return
			}
			p := buf[:n]
			if n < pingLen || string(p[:8]) != preamble {
				continue
			}
			var origin, dest types.PublicKey
			copy(origin[:], p[11:43])
			copy(dest[:], p[43:75])
			switch {
			case p[8] == 0 && dest == self:
				pong := append([]byte(nil), p[:pingLen]...)
				pong[8] = 1
				_, _ = r.WriteTo(pong, origin)
			case p[8] == 1 && origin == self:
				fmt.Printf("PONG %s hops=%d t=%.1f\n", hex.EncodeToString(dest[:]), binary.BigEndian.Uint16(p[9:11]), since())
			default:
				fmt.Printf("STRAY type=%d origin=%s dest=%s t=%.1f\n", p[8], hex.EncodeToString(origin[:]),
					hex.EncodeToString(dest[:]), since())
			}
		}
	}()
	var targets []types.PublicKey
	for _, k := range strings.Split(*pingTo, ",") {
		if k == "" {
			continue
		}
		b, err := hex.DecodeString(k)
		if err != nil || len(b) != len(types.PublicKey{}) {
			log.Fatalf("-ping: bad key %q", k)
		}
		var t types.PublicKey
		copy(t[:], b)
		targets = append(targets, t)
	}
	for {
		time.Sleep(time.Second)
		for _, t := range targets {
			ping := make([]byte, pingLen)
			copy(ping, preamble)
			binary.BigEndian.PutUint16(ping[9:11], 1)
			copy(ping[11:43], self[:])
			copy(ping[43:75], t[:])
			_, _ = r.WriteTo(ping, t)
		}
	}
}
