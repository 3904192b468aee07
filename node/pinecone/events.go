package main

// The event log: JSON lines of the run-dataset contract (contract/dataset.py, schema v1, docs/events.md), from
// the reference router's own events (router/events: its subscriber API) and from what this program does.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/matrix-org/pinecone/router/events"
	"golang.org/x/sys/unix"
)

const schemaVersion = 1

type fields map[string]interface{}

// monoS is time.monotonic() of Python on Linux: CLOCK_MONOTONIC, so lines of several processes on one host
// compare (the pipeline orders a run's events by it).
func monoS() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

type eventLog struct {
	mu      sync.Mutex
	w       io.Writer
	f       *os.File // owned, closed at the end
	runID   string
	node    string
	name    interface{} // string or nil (JSON null)
	closed  bool
	written map[string]int64
}

func openEventLog(path, runID, nodeHex, name string) (*eventLog, error) {
	l := &eventLog{runID: runID, node: nodeHex, written: map[string]int64{}}
	if name != "" {
		l.name = name
	}
	switch path {
	case "":
	case "-":
		l.w = os.Stdout
	default:
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		l.w, l.f = f, f
	}
	return l, nil
}

// emit writes one line now. Each line is one write(2) on an O_APPEND file, so nothing emitted is lost to a
// kill -9 and a line is never torn.
func (l *eventLog) emit(kind string, extra fields) {
	obj := fields{"v": schemaVersion, "event": kind, "run_id": l.runID, "node": l.node, "node_name": l.name,
		"mono_s": round6(monoS()), "wall_ts": round6(float64(time.Now().UnixNano()) / 1e9)}
	for k, v := range extra {
		obj[k] = v
	}
	line, err := json.Marshal(obj)
	if err != nil {
		fmt.Fprintf(os.Stderr, "event %s not written: %v\n", kind, err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil || l.closed {
		return
	}
	_, _ = l.w.Write(append(line, '\n'))
	l.written[kind]++
}

func (l *eventLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f != nil {
		_ = l.f.Close()
	}
}

func nullable(hexKey string) interface{} {
	if hexKey == "" {
		return nil
	}
	return hexKey
}

// watchRouter turns the router's events into the contract's: peer_up / peer_down, root_changed,
// coords_changed, parent_changed, descending_changed, bootstrap_accepted. The router publishes some of them
// again when nothing changed (a refreshed descending entry, a repeated announcement): only changes are logged.
func (n *Node) watchRouter(ch <-chan events.Event) {
	self := n.key.String()
	root, parent, desc := self, "", ""
	coords := []int64{}
	for ev := range ch {
		switch e := ev.(type) {
		case events.PeerAdded:
			n.peerAdded(int(e.Port), e.PeerID)
		case events.PeerRemoved:
			n.peerRemoved(int(e.Port), e.PeerID)
		case events.TreeRootAnnUpdate:
			if e.Root != root {
				n.events.emit("root_changed", fields{"root": e.Root, "root_seq": int64(e.Sequence), "prev_root": root})
				n.stats.add(&n.stats.rootChg, 1)
				root = e.Root
			}
			c := make([]int64, len(e.Coords))
			for i, p := range e.Coords {
				c[i] = int64(p)
			}
			if !equalCoords(c, coords) {
				n.events.emit("coords_changed", fields{"coords": c})
				coords = c
			}
		case events.TreeParentUpdate:
			if e.PeerID != parent {
				n.events.emit("parent_changed", fields{"parent": nullable(e.PeerID), "prev_parent": nullable(parent)})
				n.stats.add(&n.stats.parentChg, 1)
				parent = e.PeerID
			}
		case events.SnakeDescUpdate:
			if e.PeerID != desc {
				n.events.emit("descending_changed", fields{"descending": nullable(e.PeerID), "prev": nullable(desc)})
				desc = e.PeerID
			}
		case events.SnakeEntryAdded:
			// the router installs a routing entry exactly when it accepts a bootstrap (at any hop); the event
			// names the origin and the peer it came from, not the port it went on to
			n.events.emit("bootstrap_accepted", fields{"origin": e.EntryID, "from_port": n.portOf(e.PeerID),
				"to_port": nil})
			n.stats.add(&n.stats.bootAcc, 1)
		}
	}
}

func equalCoords(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
