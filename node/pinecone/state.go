package main

// The router's state, read through its manhole (router.ManholeHandler, the reference's own JSON dump of its
// state, taken in one step of its state actor) and reshaped into the documents of snekbed's admin API.

import (
	"encoding/json"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"time"
)

const entryLifetime = 10 * time.Second // virtualSnakeNeighExpiryPeriod: a routing entry's life without refresh

type mhPeerRef struct {
	Port      int    `json:"port"`
	PublicKey string `json:"public_key"`
}

type mhEntry struct {
	PublicKey   string     `json:"public_key"`
	Source      *mhPeerRef `json:"source"`
	Destination *mhPeerRef `json:"destination"`
	LastSeen    time.Time  `json:"last_seen"`
}

type mhQueue struct {
	Count int `json:"count"`
}

type mhPeer struct {
	Coords  string  `json:"coords"`
	Port    int     `json:"port"`
	Type    int     `json:"type"`
	URI     string  `json:"uri"`
	Proto   mhQueue `json:"proto_queue"`
	Traffic mhQueue `json:"traffic_queue"`
}

type manhole struct {
	PublicKey string `json:"public_key"`
	Coords    string `json:"coords"`
	Root      *struct {
		Key      string `json:"root_public_key"`
		Sequence int64  `json:"root_sequence"`
	} `json:"root"`
	Parent *mhPeerRef          `json:"parent"`
	Peers  map[string][]mhPeer `json:"peers"`
	SNEK   struct {
		Descending *mhEntry   `json:"descending"`
		Paths      []*mhEntry `json:"paths"`
	} `json:"snek"`
	at time.Time
}

func (n *Node) manhole() (*manhole, error) {
	rec := httptest.NewRecorder()
	n.r.ManholeHandler(rec, nil)
	m := &manhole{at: time.Now()}
	if err := json.Unmarshal(rec.Body.Bytes(), m); err != nil {
		return nil, err
	}
	return m, nil
}

// parseCoords reads the reference's coordinates text, "[1 2 3]".
func parseCoords(s string) []int {
	out := []int{}
	for _, f := range strings.Fields(strings.Trim(s, "[]")) {
		if v, err := strconv.Atoi(f); err == nil {
			out = append(out, v)
		}
	}
	return out
}

func (m *manhole) rootKey() string {
	if m.Root == nil {
		return m.PublicKey
	}
	return m.Root.Key
}

func (m *manhole) rootSeq() int64 {
	if m.Root == nil {
		return 0
	}
	return m.Root.Sequence
}

// descending: the descending neighbour's key, "" when none or when its entry has expired (as snekbed's /state
// says it: the router clears it at its next maintenance, within a second, and no longer routes by it).
func (m *manhole) descending() string {
	d := m.SNEK.Descending
	if d == nil || m.at.Sub(d.LastSeen) >= entryLifetime {
		return ""
	}
	return d.PublicKey
}

func (n *Node) peersDoc(m *manhole) []map[string]interface{} {
	out := []map[string]interface{}{}
	for key, ps := range m.Peers {
		for _, p := range ps {
			if p.Port == 0 {
				continue
			}
			doc := map[string]interface{}{"port": p.Port, "key": key, "class": linkTypeName(p.Type),
				"coords": parseCoords(p.Coords), "link_class": linkTypeName(p.Type), "remote": p.URI}
			n.peers.mu.Lock()
			if w := n.peers.byPort[p.Port]; w != nil {
				doc["link_class"], doc["remote"] = w.link.class, w.remote
			}
			n.peers.mu.Unlock()
			out = append(out, doc)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["port"].(int) < out[j]["port"].(int) })
	return out
}

// stateDoc: GET /state, with snekbed's keys where the reference has the fact (docs/interop.md).
func (n *Node) stateDoc() (map[string]interface{}, error) {
	m, err := n.manhole()
	if err != nil {
		return nil, err
	}
	var parent interface{}
	if m.Parent != nil && m.Parent.PublicKey != "" {
		parent = m.Parent.PublicKey
	}
	return map[string]interface{}{
		"public_key":         m.PublicKey,
		"root":               map[string]interface{}{"key": m.rootKey(), "sequence": m.rootSeq()},
		"parent":             parent,
		"coords":             parseCoords(m.Coords),
		"descending":         nullable(m.descending()),
		"peers":              n.peersDoc(m),
		"routing_table_size": len(m.SNEK.Paths),
		"variant":            "snek",
		"variant_spec":       n.cfg.variant.String(),
		"knobs":              n.cfg.variant.knobs(),
		"implementation":     "reference",
	}, nil
}

// routesDoc: GET /routes, the routing-table entries still valid, lowest key first.
func (n *Node) routesDoc() ([]map[string]interface{}, error) {
	m, err := n.manhole()
	if err != nil {
		return nil, err
	}
	out := []map[string]interface{}{}
	for _, e := range m.SNEK.Paths {
		left := entryLifetime - m.at.Sub(e.LastSeen)
		if left <= 0 {
			continue
		}
		src, dst := -1, -1
		if e.Source != nil {
			src = e.Source.Port
		}
		if e.Destination != nil {
			dst = e.Destination.Port
		}
		out = append(out, map[string]interface{}{"key": e.PublicKey, "source": src, "destination": dst,
			"expires_in_s": float64(left.Milliseconds()) / 1000})
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["key"].(string) < out[j]["key"].(string) })
	return out, nil
}
