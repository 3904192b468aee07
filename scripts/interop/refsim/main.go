// refsim: a topology of Pinecone reference routers in one process, measured the way `snekbed sim` measures
// its own (scripts/interop/compare.py puts the two side by side; docs/interop.md). snekbed's own code on
// the reference's public router API, built against a checkout of the reference that the user supplies.
//
// Every link is an in-memory pipe with up to 1 ms of read jitter, as in the reference simulator. Node keys are
// snekbed's (derive_seed(seed, name) of node/core/crypto.py), so that both run the same key order: the same
// root, the same snake. Real time, not virtual: the timers are the reference's own.
//
// Prints one JSON object: tree_converged_s, snake_converged_s (seconds from the links coming up until every
// node names the highest key as root / every descending key is the next lower key), pings (sent, delivered:
// SNEK pings of random pairs after convergence, PROTOCOL.md section 8), stretch (mean and median of path
// links / shortest-path links), and with -kill-root the same after the root is stopped.
package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/matrix-org/pinecone/router"
	"github.com/matrix-org/pinecone/types"
	"github.com/matrix-org/pinecone/util"
)

const preamble = "pineping"
const pingLen = 75

type node struct {
	name  string
	key   types.PublicKey
	r     *router.Router
	pipes []net.Conn
	mu    sync.Mutex
	pongs map[types.PublicKey]uint16 // target -> hops of its last pong
}

func deriveSeed(parts ...string) []byte {
	h := sha256.New()
	h.Write([]byte("snekbed-key-v1"))
	for _, p := range parts {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}

func loadWalks(path string) ([]string, [][2]string) {
	data, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	var names []string
	seen := map[string]bool{}
	linked := map[[2]string]bool{}
	var links [][2]string
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		walk := strings.Fields(line)
		for i, n := range walk {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
			if i == 0 || walk[i-1] == n {
				continue
			}
			a, b := walk[i-1], n
			if a > b {
				a, b = b, a
			}
			if !linked[[2]string{a, b}] {
				linked[[2]string{a, b}] = true
				links = append(links, [2]string{walk[i-1], n})
			}
		}
	}
	return names, links
}

type manhole struct { // keys are hex strings in the manhole's JSON
	Root *struct {
		Key string `json:"root_public_key"`
	} `json:"root"`
	Snek struct {
		Descending *struct {
			Key string `json:"public_key"`
		} `json:"descending"`
	} `json:"snek"`
}

func parseKey(s string) (k types.PublicKey, ok bool) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(k) {
		return k, false
	}
	copy(k[:], b)
	return k, true
}

func (n *node) state() (root, desc types.PublicKey, hasRoot, hasDesc bool) {
	rec := httptest.NewRecorder()
	n.r.ManholeHandler(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	var m manhole
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		log.Fatal(err)
	}
	if m.Root != nil {
		root, hasRoot = parseKey(m.Root.Key)
	}
	if m.Snek.Descending != nil {
		desc, hasDesc = parseKey(m.Snek.Descending.Key)
	}
	return
}

// converged: (tree, snake) over the live nodes, judged per connected component of the live graph (as
// snekbed's observer does): each component's nodes name its highest key as root, and its snake is ordered.
func converged(live []*node, adj map[string][]string, nodes map[string]*node) (bool, bool) {
	alive := map[string]bool{}
	for _, n := range live {
		alive[n.name] = true
	}
	tree, snake := true, true
	seen := map[string]bool{}
	for _, start := range live {
		if seen[start.name] {
			continue
		}
		var comp []*node
		for name := range shortest(adj, alive, start.name) {
			seen[name] = true
			comp = append(comp, nodes[name])
		}
		sort.Slice(comp, func(i, j int) bool { return comp[i].key.CompareTo(comp[j].key) < 0 })
		top := comp[len(comp)-1].key
		for i, n := range comp {
			root, desc, hasRoot, hasDesc := n.state()
			if !hasRoot || root != top {
				tree = false
			}
			if i == 0 {
				snake = snake && !hasDesc
			} else {
				snake = snake && hasDesc && desc == comp[i-1].key
			}
		}
	}
	return tree, snake
}

func waitConverged(live []*node, adj map[string][]string, nodes map[string]*node, start time.Time,
	max time.Duration) (treeS, snakeS *float64) {
	for time.Since(start) < max {
		tree, snake := converged(live, adj, nodes)
		t := time.Since(start).Seconds()
		if tree && treeS == nil {
			treeS = &t
		}
		if tree && snake {
			snakeS = &t
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	return
}

func (n *node) serve() {
	buf := make([]byte, 65535)
	for {
		_ = n.r.SetReadDeadline(time.Now().Add(time.Hour))
		c, _, err := n.r.ReadFrom(buf)
		if err != nil {
			return
		}
		p := buf[:c]
		if c < pingLen || string(p[:8]) != preamble {
			continue
		}
		var origin, dest types.PublicKey
		copy(origin[:], p[11:43])
		copy(dest[:], p[43:75])
		if p[8] == 0 && dest == n.key {
			pong := append([]byte(nil), p[:pingLen]...)
			pong[8] = 1
			_, _ = n.r.WriteTo(pong, origin)
		} else if p[8] == 1 && origin == n.key {
			n.mu.Lock()
			n.pongs[dest] = binary.BigEndian.Uint16(p[9:11])
			n.mu.Unlock()
		}
	}
}

func shortest(adj map[string][]string, alive map[string]bool, from string) map[string]int {
	dist := map[string]int{from: 0}
	queue := []string{from}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		for _, y := range adj[x] {
			if _, ok := dist[y]; !ok && alive[y] {
				dist[y] = dist[x] + 1
				queue = append(queue, y)
			}
		}
	}
	return dist
}

type pingResult struct {
	Sent      int                `json:"sent"`
	Delivered int                `json:"delivered"`
	Stretch   map[string]float64 `json:"stretch"`
}

func pingPairs(live []*node, adj map[string][]string, rng *rand.Rand, count int) pingResult {
	alive := map[string]bool{}
	for _, n := range live {
		alive[n.name] = true
		n.mu.Lock()
		n.pongs = map[types.PublicKey]uint16{}
		n.mu.Unlock()
	}
	type pair struct{ a, b *node }
	var pairs []pair
	used := map[[2]string]bool{}
	for tries := 0; len(pairs) < count && tries < 100*count; tries++ { // pairs inside one component
		a, b := live[rng.Intn(len(live))], live[rng.Intn(len(live))]
		if a == b || used[[2]string{a.name, b.name}] {
			continue
		}
		if _, ok := shortest(adj, alive, a.name)[b.name]; !ok {
			continue
		}
		used[[2]string{a.name, b.name}] = true
		pairs = append(pairs, pair{a, b})
	}
	for _, p := range pairs {
		ping := make([]byte, pingLen)
		copy(ping, preamble)
		binary.BigEndian.PutUint16(ping[9:11], 1)
		copy(ping[11:43], p.a.key[:])
		copy(ping[43:75], p.b.key[:])
		_, _ = p.a.r.WriteTo(ping, p.b.key)
	}
	time.Sleep(5 * time.Second)
	res := pingResult{Sent: len(pairs), Stretch: map[string]float64{}}
	var ratios []float64
	for _, p := range pairs {
		p.a.mu.Lock()
		hops, ok := p.a.pongs[p.b.key]
		p.a.mu.Unlock()
		if !ok {
			continue
		}
		res.Delivered++
		if d := shortest(adj, alive, p.a.name)[p.b.name]; d > 0 {
			ratios = append(ratios, float64(hops-1)/float64(d))
		}
	}
	if len(ratios) > 0 {
		sort.Float64s(ratios)
		sum := 0.0
		for _, r := range ratios {
			sum += r
		}
		res.Stretch["mean"] = sum / float64(len(ratios))
		res.Stretch["median"] = ratios[len(ratios)/2]
		if len(ratios)%2 == 0 {
			res.Stretch["median"] = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
		}
	}
	return res
}

func main() {
	topo := flag.String("topology", "", "edge-list topology file (each line a walk)")
	seed := flag.Int("seed", 0, "key seed (snekbed's derive_seed(seed, name)) and ping-pair seed")
	pairs := flag.Int("pairs", 100, "SNEK pings of random pairs after convergence")
	maxS := flag.Float64("max-time", 300, "give up on convergence after this many seconds")
	killRoot := flag.Bool("kill-root", false, "after convergence, stop the root and measure again")
	flag.Parse()
	if *topo == "" {
		log.Fatal("-topology is required")
	}
	names, links := loadWalks(*topo)
	quiet := log.New(io.Discard, "", 0)
	nodes := map[string]*node{}
	var live []*node
	for _, name := range names {
		sk := ed25519.NewKeyFromSeed(deriveSeed(fmt.Sprint(*seed), name))
		n := &node{name: name, r: router.NewRouter(quiet, sk), pongs: map[types.PublicKey]uint16{}}
		n.key = n.r.PublicKey()
		// the reference simulator's forwarding hook: a forwarded ping counts one more hop
		n.r.InjectPacketFilter(func(from types.PublicKey, f *types.Frame) bool {
			p := f.Payload
			if f.Type == types.TypeTraffic && len(p) >= pingLen && string(p[:8]) == preamble && p[8] == 0 {
				binary.BigEndian.PutUint16(p[9:11], binary.BigEndian.Uint16(p[9:11])+1)
			}
			return false
		})
		nodes[name] = n
		live = append(live, n)
		go n.serve()
	}
	adj := map[string][]string{}
	start := time.Now()
	for _, l := range links {
		a, b := nodes[l[0]], nodes[l[1]]
		adj[a.name] = append(adj[a.name], b.name)
		adj[b.name] = append(adj[b.name], a.name)
		pa, pb := net.Pipe()
		ca := &util.SlowConn{Conn: pa, ReadJitter: time.Millisecond}
		cb := &util.SlowConn{Conn: pb, ReadJitter: time.Millisecond}
		a.pipes, b.pipes = append(a.pipes, ca), append(b.pipes, cb)
		go func() {
			_, _ = a.r.Connect(ca, router.ConnectionPublicKey(b.key), router.ConnectionKeepalives(false),
				router.ConnectionPeerType(router.PeerTypePipe))
		}()
		go func() {
			_, _ = b.r.Connect(cb, router.ConnectionPublicKey(a.key), router.ConnectionKeepalives(false),
				router.ConnectionPeerType(router.PeerTypePipe))
		}()
	}
	rng := rand.New(rand.NewSource(int64(*seed)))
	out := map[string]any{"implementation": "reference", "nodes": len(names), "links": len(links), "seed": *seed}
	tree, snake := waitConverged(live, adj, nodes, start, time.Duration(*maxS*float64(time.Second)))
	out["tree_converged_s"], out["snake_converged_s"] = tree, snake
	if snake != nil {
		out["pings"] = pingPairs(live, adj, rng, *pairs)
	}
	if *killRoot && snake != nil {
		sort.Slice(live, func(i, j int) bool { return live[i].key.CompareTo(live[j].key) < 0 })
		root := live[len(live)-1]
		live = live[:len(live)-1]
		killed := time.Now()
		_ = root.r.Close()
		for _, p := range root.pipes {
			_ = p.Close()
		}
		t2, s2 := waitConverged(live, adj, nodes, killed, time.Duration(*maxS*float64(time.Second)))
		rk := map[string]any{"killed": root.name, "key": hex.EncodeToString(root.key[:]), "tree_reconverged_s": t2,
			"snake_reconverged_s": s2}
		if s2 != nil {
			rk["pings"] = pingPairs(live, adj, rng, *pairs)
		}
		out["root_kill"] = rk
	}
	enc := json.NewEncoder(os.Stdout)
	_ = enc.Encode(out)
	os.Exit(0)
}
