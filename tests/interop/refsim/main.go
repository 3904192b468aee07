// refsim: the same partition and heal on the Pinecone reference's routers (github.com/matrix-org/pinecone/router,
// used only through its public API: NewRouter, Connect, ManholeHandler, Close), in one process, each link a
// net.Pipe with no delay. snekbed's own code (issue 28, docs/chaos.md "What a heal of many components needs").
//
// Input (JSON, the file named by the only argument): {"nodes": [names], "links": [[a, b], ...], "cut": [[a, b],
// ...], "repeat": N, "seed": S, "horizon_s": H, "poll_s": P}. For each repetition: build the network, wait until
// every component's tree and snake are converged, cut the links in "cut" (both ends closed at once), wait until
// converged again, heal (the same links made again), and time the tree and the snake from the heal. Prints one
// JSON document on stdout. Converged: in each component of the live links every node's root is the component's
// highest key, and every node's descending entry (not expired) is the next lower key of its component.
//
// Exit codes: 0 done (a repetition that did not converge within the horizon has null times), 2 bad input.
package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"sort"
	"time"

	"github.com/matrix-org/pinecone/router"
)

type spec struct {
	Nodes    []string    `json:"nodes"`
	Links    [][2]string `json:"links"`
	Cut      [][2]string `json:"cut"`
	Repeat   int         `json:"repeat"`
	Seed     int         `json:"seed"`
	HorizonS float64     `json:"horizon_s"`
	PollS    float64     `json:"poll_s"`
}

const entryLifetime = 10 * time.Second // a descending entry's life without refresh

type manhole struct {
	Root *struct {
		Key string `json:"root_public_key"`
	} `json:"root"`
	SNEK struct {
		Descending *struct {
			PublicKey string    `json:"public_key"`
			LastSeen  time.Time `json:"last_seen"`
		} `json:"descending"`
	} `json:"snek"`
}

type link struct {
	a, b   string
	ca, cb net.Conn
}

type network struct {
	routers map[string]*router.Router
	keys    map[string]string // name -> hex public key
	links   map[[2]string]*link
}

func build(s *spec, rep int) *network {
	n := &network{routers: map[string]*router.Router{}, keys: map[string]string{}, links: map[[2]string]*link{}}
	quiet := log.New(io.Discard, "", 0)
	for _, name := range s.Nodes {
		seed := sha256.Sum256([]byte(fmt.Sprintf("refsim/%d/%d/%s", s.Seed, rep, name)))
		sk := ed25519.NewKeyFromSeed(seed[:])
		r := router.NewRouter(quiet, sk)
		n.routers[name] = r
		pk := r.PublicKey()
		n.keys[name] = hex.EncodeToString(pk[:])
	}
	for _, l := range s.Links {
		n.connect(l[0], l[1])
	}
	return n
}

func (n *network) connect(a, b string) {
	ca, cb := net.Pipe()
	ra, rb := n.routers[a], n.routers[b]
	// Public keys given: no handshake (a synchronous pipe would deadlock on two simultaneous writes).
	remote := router.ConnectionPeerType(router.PeerTypeRemote)
	if _, err := ra.Connect(ca, router.ConnectionPublicKey(rb.PublicKey()), remote, router.ConnectionURI(b)); err != nil {
		log.Fatalf("connect %s-%s: %v", a, b, err)
	}
	if _, err := rb.Connect(cb, router.ConnectionPublicKey(ra.PublicKey()), remote, router.ConnectionURI(a)); err != nil {
		log.Fatalf("connect %s-%s: %v", b, a, err)
	}
	n.links[key(a, b)] = &link{a: a, b: b, ca: ca, cb: cb}
}

func (n *network) cut(a, b string) {
	if l := n.links[key(a, b)]; l != nil {
		l.ca.Close()
		l.cb.Close()
		delete(n.links, key(a, b))
	}
}

func key(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

func (n *network) components() [][]string {
	adj := map[string][]string{}
	for k := range n.links {
		adj[k[0]] = append(adj[k[0]], k[1])
		adj[k[1]] = append(adj[k[1]], k[0])
	}
	seen := map[string]bool{}
	var out [][]string
	for name := range n.routers {
		if seen[name] {
			continue
		}
		comp, stack := []string{}, []string{name}
		seen[name] = true
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			comp = append(comp, x)
			for _, y := range adj[x] {
				if !seen[y] {
					seen[y] = true
					stack = append(stack, y)
				}
			}
		}
		out = append(out, comp)
	}
	return out
}

func read(r *router.Router) manhole {
	rec := httptest.NewRecorder()
	r.ManholeHandler(rec, nil)
	var m manhole
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		log.Fatalf("manhole: %v", err)
	}
	return m
}

// converged: (tree converged, snake ordered) over every component.
func (n *network) converged() (bool, bool) {
	tree, snake := true, true
	now := time.Now()
	for _, comp := range n.components() {
		ks := make([]string, len(comp))
		for i, name := range comp {
			ks[i] = n.keys[name]
		}
		sort.Strings(ks)
		below := map[string]string{}
		for i := 1; i < len(ks); i++ {
			below[ks[i]] = ks[i-1]
		}
		top := ks[len(ks)-1]
		for _, name := range comp {
			m := read(n.routers[name])
			root := n.keys[name]
			if m.Root != nil {
				root = m.Root.Key
			}
			if root != top {
				tree = false
			}
			desc := ""
			if d := m.SNEK.Descending; d != nil && now.Sub(d.LastSeen) < entryLifetime {
				desc = d.PublicKey
			}
			if desc != below[n.keys[name]] {
				snake = false
			}
		}
	}
	return tree, snake
}

// wait polls until converged; returns seconds to the tree and to the snake (-1 when not within the horizon).
func (n *network) wait(start time.Time, s *spec) (float64, float64) {
	treeAt, snakeAt := -1.0, -1.0
	for time.Since(start).Seconds() < s.HorizonS {
		tree, snake := n.converged()
		el := time.Since(start).Seconds()
		if tree && treeAt < 0 {
			treeAt = el
		}
		if tree && snake {
			snakeAt = el
			return treeAt, snakeAt
		}
		time.Sleep(time.Duration(s.PollS * float64(time.Second)))
	}
	return treeAt, snakeAt
}

func orNull(v float64) interface{} {
	if v < 0 {
		return nil
	}
	return float64(int(v*10+0.5)) / 10
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: refsim SPEC.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "refsim: %v\n", err)
		os.Exit(2)
	}
	s := &spec{Repeat: 1, HorizonS: 300, PollS: 0.25}
	if err := json.Unmarshal(raw, s); err != nil {
		fmt.Fprintf(os.Stderr, "refsim: %s: %v\n", os.Args[1], err)
		os.Exit(2)
	}
	names := map[string]bool{}
	for _, x := range s.Nodes {
		names[x] = true
	}
	for field, ls := range map[string][][2]string{"links": s.Links, "cut": s.Cut} {
		for i, l := range ls {
			if !names[l[0]] || !names[l[1]] {
				fmt.Fprintf(os.Stderr, "refsim: %s: %s[%d]: unknown node in %v\n", os.Args[1], field, i, l)
				os.Exit(2)
			}
		}
	}
	var reps []map[string]interface{}
	for rep := 0; rep < s.Repeat; rep++ {
		n := build(s, rep)
		t0 := time.Now()
		_, boot := n.wait(t0, s)
		for _, c := range s.Cut {
			n.cut(c[0], c[1])
		}
		comps := len(n.components())
		t1 := time.Now()
		splitTree, splitSnake := n.wait(t1, s)
		for _, c := range s.Cut {
			n.connect(c[0], c[1])
		}
		t2 := time.Now()
		healTree, healSnake := n.wait(t2, s)
		reps = append(reps, map[string]interface{}{
			"rep": rep, "boot_s": orNull(boot), "components": comps,
			"partition_tree_s": orNull(splitTree), "partition_snake_s": orNull(splitSnake),
			"heal_tree_s": orNull(healTree), "heal_snake_s": orNull(healSnake),
		})
		fmt.Fprintf(os.Stderr, "rep %d: %v\n", rep, reps[len(reps)-1])
		for _, r := range n.routers {
			r.Close()
		}
	}
	out := map[string]interface{}{"implementation": "pinecone reference router", "nodes": len(s.Nodes),
		"links": len(s.Links), "cut": len(s.Cut), "reps": reps}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
