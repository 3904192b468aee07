package main

// What the node sees of its peerings' bytes: every connection handed to the router goes through a wireConn,
// which splits each direction of the stream into frames exactly as the router writes and reads them
// (PROTOCOL.md section 4.3: a 104-byte handshake, then frames with a 10-byte header giving the total length).
// That is how frames and bytes are counted per type and link class (the router keeps only byte totals), how
// the node's own bootstraps and pings are seen leaving, and why a peering ended (the router's reason stays
// inside it).

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/matrix-org/pinecone/types"
)

const handshakeLen = 8 + 32 + 64 // version, capabilities, key, signature (PROTOCOL.md section 3.2)

// Frame type names by wire number (contract/frames.py); anything else is "unknown".
var frameTypeNames = []string{"keepalive", "tree_announcement", "bootstrap", "traffic", "wakeup_broadcast"}

const unknownType = "unknown"

// Why a peering ends (peer_down's reason, snek_peer_disconnects_total's, which starts at 0 for each): what the
// connection saw (ended, and the stream parser's bad), what this node asked for (dropPeer, stopPeers), or
// closed when the router ended it for a reason it keeps to itself (Close). Spelled as snekbed's node spells
// them (node/view.py DISCONNECT_REASONS), but connection_reset, which snekbed counts as io_error.
var disconnectReasons = []string{"admin_removed", "bad_magic", "closed", "connection_reset", "eof", "io_error",
	"node_stopping", "read_timeout", "short_length", "write_timeout"}

func frameTypeName(t int) string {
	if t >= 0 && t < len(frameTypeNames) {
		return frameTypeNames[t]
	}
	return unknownType
}

var framesMagic = []byte{0x70, 0x69, 0x6e, 0x65}

// streamParser follows one direction of a peering: skips the handshake, then reports each complete frame.
type streamParser struct {
	skip    int      // handshake bytes still to pass
	hdr     [10]byte // the header being read
	hdrN    int
	left    int    // body bytes still to come
	keep    bool   // gather the frame's bytes for onFrame
	buf     []byte // the frame so far, when keep
	ftype   int
	flen    int
	bad     string // why the stream stopped making sense (bad_magic, short_length)
	want    func(ftype int) bool
	onFrame func(ftype, length int, frame []byte)
	shake   []byte // the handshake bytes, kept (the peer's key is in them)
}

func newStreamParser(want func(int) bool, onFrame func(int, int, []byte)) *streamParser {
	return &streamParser{skip: handshakeLen, want: want, onFrame: onFrame}
}

func (s *streamParser) feed(p []byte) {
	for len(p) > 0 && s.bad == "" {
		if s.skip > 0 {
			n := min(s.skip, len(p))
			s.shake = append(s.shake, p[:n]...)
			s.skip -= n
			p = p[n:]
			continue
		}
		if s.hdrN < len(s.hdr) {
			n := copy(s.hdr[s.hdrN:], p)
			s.hdrN += n
			p = p[n:]
			if s.hdrN < len(s.hdr) {
				return
			}
			if string(s.hdr[:4]) != string(framesMagic) {
				s.bad = "bad_magic"
				return
			}
			s.ftype = int(s.hdr[5])
			s.flen = int(binary.BigEndian.Uint16(s.hdr[8:10]))
			if s.flen < len(s.hdr) {
				s.bad = "short_length"
				return
			}
			s.left = s.flen - len(s.hdr)
			s.keep = s.want != nil && s.want(s.ftype)
			if s.keep {
				s.buf = append(s.buf[:0], s.hdr[:]...)
			}
		}
		n := min(s.left, len(p))
		if s.keep {
			s.buf = append(s.buf, p[:n]...)
		}
		s.left -= n
		p = p[n:]
		if s.left == 0 {
			var frame []byte
			if s.keep {
				frame = s.buf
			}
			s.onFrame(s.ftype, s.flen, frame)
			s.hdrN = 0
		}
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// wireConn is the connection the router gets: reads and writes go through, and are followed frame by frame.
type wireConn struct {
	net.Conn
	n      *Node
	link   linkSpec
	remote string  // tcp://HOST:PORT of the other end
	dialer *dialer // the dialer that made it, or nil (accepted)
	port   atomic.Int32
	rx, tx *streamParser
	txf    *types.Frame // decoding buffer for frames we send (the router's writer is one goroutine per peer)

	mu     sync.Mutex
	reason string // why the peering ended: the first cause seen
	up     bool   // the router took it (Connect returned a port)
}

func newWireConn(n *Node, c net.Conn, link linkSpec, dialer *dialer) *wireConn {
	w := &wireConn{Conn: c, n: n, link: link, remote: "tcp://" + c.RemoteAddr().String(), dialer: dialer,
		txf: &types.Frame{Payload: make([]byte, 0, types.MaxPayloadSize)}}
	w.rx = newStreamParser(nil, func(t, l int, _ []byte) { n.stats.frame(dirReceived, t, l, link.class) })
	w.tx = newStreamParser(func(t int) bool { return t == int(types.TypeBootstrap) || t == int(types.TypeTraffic) },
		w.sent)
	return w
}

// peerKey: the key the other end sent in its handshake (valid once the handshake was read).
func (w *wireConn) peerKey() (k types.PublicKey, ok bool) {
	if len(w.rx.shake) < 8+32 {
		return k, false
	}
	copy(k[:], w.rx.shake[8:40])
	return k, true
}

func (w *wireConn) sent(t, length int, frame []byte) {
	w.n.stats.frame(dirSent, t, length, w.link.class)
	if frame == nil {
		return
	}
	f := w.txf
	if _, err := f.UnmarshalBinary(frame); err != nil {
		return
	}
	switch f.Type {
	case types.TypeBootstrap:
		if f.DestinationKey == w.n.key { // ours: a bootstrap carries its origin's key as destination
			var b types.VirtualSnakeBootstrap
			if _, err := b.UnmarshalBinary(f.Payload); err == nil {
				w.n.bootstrapSent(int64(b.Sequence), int(w.port.Load()))
			}
		}
	case types.TypeTraffic:
		w.n.pinger.leaving(f)
	}
}

func (w *wireConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	w.rx.feed(p[:n])
	if err != nil {
		w.ended(err, "read")
	} else if w.rx.bad != "" {
		w.setReason(w.rx.bad)
	}
	return n, err
}

func (w *wireConn) Write(p []byte) (int, error) {
	// followed before it is written: once written, its answer may be back before this goroutine runs again
	w.tx.feed(p)
	n, err := w.Conn.Write(p)
	if err != nil {
		w.ended(err, "write")
	}
	return n, err
}

func (w *wireConn) Close() error {
	w.setReason("closed") // the router ended it for a reason of its own (a bad frame...), or we did
	return w.Conn.Close()
}

func (w *wireConn) setReason(reason string) {
	w.mu.Lock()
	if w.reason == "" {
		w.reason = reason
	}
	w.mu.Unlock()
}

func (w *wireConn) endReason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reason == "" {
		return "closed"
	}
	return w.reason
}

// ended notes why a read or write failed, in the words of snekbed's peer_down reasons.
func (w *wireConn) ended(err error, op string) {
	var ne net.Error
	switch {
	case errors.Is(err, net.ErrClosed):
		return // we (or the router) closed it: the reason is already set
	case errors.Is(err, io.EOF):
		w.setReason("eof")
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		w.setReason(op + "_timeout")
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		w.setReason("connection_reset")
	default:
		w.setReason("io_error")
	}
}

// handshakeReason: why router.Connect refused a connection, as snek_handshake_failures_total names it.
func handshakeReason(err error) string {
	var ne net.Error
	msg := err.Error()
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	case errors.Is(err, io.EOF):
		return "eof"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case contains(msg, "mismatched node version"):
		return "bad_version"
	case contains(msg, "mismatched node capabilities"):
		return "bad_capabilities"
	case contains(msg, "invalid signature"):
		return "bad_signature"
	case contains(msg, "no free switch ports"):
		return "no_free_port"
	}
	return "io_error"
}
