package main

// The admin API: the paths and JSON keys of snekbed's (node/admin.py) where the reference has the fact, plus
// GET /metrics. Errors are {"error": "..."}: 400 for bad JSON or a bad URI or port, 422 for a body that fails
// validation, 404 for no such peer, 501 for what a node on the reference's router cannot do.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/matrix-org/pinecone/types"
)

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, format string, args ...interface{}) {
	writeJSON(w, status, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// body decodes a JSON object into v, refusing unknown keys (as the pydantic models do). false: answered.
func body(w http.ResponseWriter, r *http.Request, v interface{}) bool {
	raw, err := readAll(w, r)
	if err != nil {
		writeError(w, 400, "request body is not valid JSON")
		return false
	}
	var probe interface{}
	if json.Unmarshal(raw, &probe) != nil {
		writeError(w, 400, "request body is not valid JSON")
		return false
	}
	if _, ok := probe.(map[string]interface{}); !ok {
		writeError(w, 400, "request body must be a JSON object")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, 422, "body: %v", err)
		return false
	}
	return true
}

func readAll(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(http.MaxBytesReader(w, r.Body, 1<<20))
	return b.Bytes(), err
}

func parseKey(text string) (types.PublicKey, bool) {
	var k types.PublicKey
	b, err := hex.DecodeString(text)
	if err != nil || len(b) != len(k) {
		return k, false
	}
	copy(k[:], b)
	return k, true
}

func (n *Node) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", n.get(n.healthz))
	mux.HandleFunc("/state", n.get(func(w http.ResponseWriter, r *http.Request) {
		doc, err := n.stateDoc()
		if err != nil {
			writeError(w, 500, "internal error: %v", err)
			return
		}
		writeJSON(w, 200, doc)
	}))
	mux.HandleFunc("/routes", n.get(func(w http.ResponseWriter, r *http.Request) {
		doc, err := n.routesDoc()
		if err != nil {
			writeError(w, 500, "internal error: %v", err)
			return
		}
		writeJSON(w, 200, doc)
	}))
	mux.HandleFunc("/metrics", n.get(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(n.renderMetrics())
	}))
	mux.HandleFunc("/peers", n.peersRoute)
	mux.HandleFunc("/peers/", n.peersRoute)
	mux.HandleFunc("/ping", n.post(n.pingRoute))
	mux.HandleFunc("/adversary", n.post(n.adversaryRoute))
	mux.HandleFunc("/traffic", n.post(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, 501, "POST /traffic is snekbed's benchmark load protocol (snekload acknowledgements), which "+
			"the reference node does not implement")
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, 404, "no such path: %s", r.URL.Path)
	})
	return mux
}

func (n *Node) get(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			writeError(w, 405, "%s: use GET", r.URL.Path)
			return
		}
		h(w, r)
	}
}

func (n *Node) post(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(w, 405, "%s: use POST", r.URL.Path)
			return
		}
		h(w, r)
	}
}

func (n *Node) healthz(w http.ResponseWriter, r *http.Request) {
	peers := 0
	for _, p := range n.r.Peers() {
		if p.Port != 0 { // the router lists itself, on port 0
			peers++
		}
	}
	writeJSON(w, 200, map[string]interface{}{"ok": !n.stopping.Load(), "public_key": n.key.String(),
		"peers": peers, "uptime_s": round3(time.Since(n.started).Seconds())})
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

func (n *Node) peersRoute(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/peers" && r.Method == http.MethodGet:
		m, err := n.manhole()
		if err != nil {
			writeError(w, 500, "internal error: %v", err)
			return
		}
		writeJSON(w, 200, n.peersDoc(m))
	case path == "/peers" && r.Method == http.MethodPost:
		var req struct {
			URI      *string  `json:"uri"`
			TimeoutS *float64 `json:"timeout_s"`
		}
		if !body(w, r, &req) {
			return
		}
		if req.URI == nil || *req.URI == "" {
			writeError(w, 422, "uri: field required")
			return
		}
		timeout := 10.0
		if req.TimeoutS != nil {
			timeout = *req.TimeoutS
		}
		if timeout < 0 || timeout > 120 {
			writeError(w, 422, "timeout_s: must be from 0 to 120")
			return
		}
		spec, err := parsePeerURI(*req.URI, "uri")
		if err != nil {
			writeError(w, 400, "%v", err)
			return
		}
		if n.stopping.Load() {
			writeError(w, 409, "the node is stopping")
			return
		}
		doc, status := n.addPeer(spec, time.Duration(timeout*float64(time.Second)))
		writeJSON(w, status, doc)
	case path == "/peers/redial" && r.Method == http.MethodPost:
		writeJSON(w, 200, map[string]int{"woken": n.redialNow()})
	case path == "/peers/shape" && r.Method == http.MethodPost:
		n.shapeRoute(w, r)
	case strings.HasPrefix(path, "/peers/") && r.Method == http.MethodDelete:
		raw := strings.TrimPrefix(path, "/peers/")
		port, err := strconv.Atoi(raw)
		if err != nil || port < 1 || port > maxPorts {
			writeError(w, 400, "port %q: expected a peer port 1..%d", raw, maxPorts)
			return
		}
		key := n.dropPeer(port)
		if key == "" {
			writeError(w, 404, "port %d: no peer on this port", port)
			return
		}
		writeJSON(w, 200, map[string]interface{}{"port": port, "key": key, "status": "closed"})
	default:
		writeError(w, 405, "%s %s: not an admin request", r.Method, r.URL.Path)
	}
}

func (n *Node) pingRoute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Key      *string  `json:"key"`
		Mode     *string  `json:"mode"`
		Count    *int     `json:"count"`
		TimeoutS *float64 `json:"timeout_s"`
	}
	if !body(w, r, &req) {
		return
	}
	if req.Key == nil {
		writeError(w, 422, "key: field required")
		return
	}
	key, ok := parseKey(strings.ToLower(*req.Key))
	if !ok {
		writeError(w, 422, "key: must be 64 hex digits (an ed25519 public key)")
		return
	}
	mode, count, timeout := "snek", 1, 5.0
	if req.Mode != nil {
		mode = *req.Mode
	}
	if mode != "snek" && mode != "tree" {
		writeError(w, 422, "mode: must be 'snek' or 'tree'")
		return
	}
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > 1000 {
		writeError(w, 422, "count: must be from 1 to 1000")
		return
	}
	if req.TimeoutS != nil {
		timeout = *req.TimeoutS
	}
	if !(timeout > 0 && timeout <= 60) {
		writeError(w, 422, "timeout_s: must be more than 0 and at most 60")
		return
	}
	writeJSON(w, 200, n.pinger.ping(key, mode, count, time.Duration(timeout*float64(time.Second))))
}

// refusedStrategy: why the reference node refuses an adversary strategy other than drop (snekbed node's
// node.core.attacks; docs/attacks.md): its simulator models one adversary, GeneralAdversary, which drops frames.
func refusedStrategy(name string) string {
	return fmt.Sprintf("%s: the reference node has only the drop strategy (the simulator's GeneralAdversary); "+
		"greyhole, sybil, root_takeover, bootstrap_flood, announcement_flood, replay, forge and none are "+
		"snekbed node's (docs/attacks.md)", name)
}

func (n *Node) adversaryRoute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Strategy *string             `json:"strategy"`
		Drop     *map[string]float64 `json:"drop"`
		Peer     *string             `json:"peer"`
	}
	raw, err := readAll(w, r)
	if err != nil {
		writeError(w, 400, "request body is not valid JSON")
		return
	}
	var probe map[string]interface{}
	if json.Unmarshal(raw, &probe) == nil {
		if s, ok := probe["strategy"]; ok && s != "drop" {
			writeError(w, 422, "strategy: %s", refusedStrategy(fmt.Sprint(s)))
			return
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if !body(w, r, &req) {
		return
	}
	if req.Drop == nil {
		writeError(w, 422, "drop: field required")
		return
	}
	rates, bad := parseRates(*req.Drop)
	if bad != "" {
		writeError(w, 422, "drop: %s", bad)
		return
	}
	var peer *types.PublicKey
	if req.Peer != nil {
		k, ok := parseKey(strings.ToLower(*req.Peer))
		if !ok {
			writeError(w, 422, "peer: must be 64 hex digits (an ed25519 public key)")
			return
		}
		peer = &k
	}
	n.adversary.configure(rates, peer)
	n.adversary.mu.Lock()
	dropped := n.adversary.dropped
	n.adversary.mu.Unlock()
	writeJSON(w, 200, map[string]interface{}{"dropped": dropped, "active": n.adversary.active()})
}

// shapeFields are the fields of a link shape (contract/links.py LinkShape) that POST /peers/shape may name.
var shapeFields = []string{"delay_ms", "jitter_ms", "loss_pct", "rate_mbit", "duplicate_pct", "corrupt_pct",
	"reorder_pct", "queue_limit_pkts"}

// shapeRoute: POST /peers/shape. There is no userspace shaper here, so the only shape it can take is none: a
// body whose shaping names every field as null or 0 (what the orchestrator sends a kernel-shaped link end) answers
// {"ports", "shapes"} as snekbed's does; anything else that validates is 501.
func (n *Node) shapeRoute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Peer    *string             `json:"peer"`
		Class   *string             `json:"class"`
		Shaping map[string]*float64 `json:"shaping"`
	}
	if !body(w, r, &req) {
		return
	}
	if req.Peer == nil {
		writeError(w, 422, "peer: field required")
		return
	}
	key, ok := parseKey(*req.Peer)
	if !ok {
		writeError(w, 422, "peer: expected 64 hex characters (an ed25519 public key)")
		return
	}
	none := true
	for name, v := range req.Shaping {
		known := false
		for _, f := range shapeFields {
			known = known || f == name
		}
		if !known {
			writeError(w, 422, "shaping: unknown field %q (known: %s)", name, strings.Join(shapeFields, ", "))
			return
		}
		none = none && (v == nil || *v == 0)
	}
	if !none || len(req.Shaping) < len(shapeFields) {
		writeError(w, 501, "the reference node has no userspace shaper: shape its links outside the node (only a "+
			"shaping that names every field as null or 0 is accepted)")
		return
	}
	ports := []int{}
	for _, p := range n.r.Peers() {
		if p.Port != 0 && p.PublicKey == key.String() {
			ports = append(ports, p.Port)
		}
	}
	if len(ports) == 0 {
		writeError(w, 404, "peer %s...: not connected", key.String()[:16])
		return
	}
	shapes := map[string]map[string]float64{}
	for _, p := range ports {
		shapes[strconv.Itoa(p)] = map[string]float64{}
	}
	writeJSON(w, 200, map[string]interface{}{"ports": ports, "shapes": shapes})
}
