// pinecone-node: a node on the Pinecone reference router (github.com/matrix-org/pinecone/router, used only
// through its public API) that behaves like a snekbed node to the orchestrator: `snekbed node`'s options where
// they mean something here, the same admin API paths and JSON keys where the reference has the fact, the
// snek_* metrics it can fill honestly, and an event log in the run-dataset contract. snekbed's own code; the
// reference is built with it from a copy the user supplies (orchestrator/backends/reference.py, docs/interop.md).
//
// Exit codes: 0 after a clean stop (SIGTERM, SIGINT), 2 for bad options, 1 when an address cannot be bound.
package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/matrix-org/pinecone/multicast"
	"github.com/matrix-org/pinecone/router"
	"github.com/matrix-org/pinecone/router/events"
	"github.com/matrix-org/pinecone/types"
)

// referenceVersion is set by the builder (-ldflags -X main.referenceVersion=...): the reference's commit, or a
// hash of its sources when it is not a git checkout.
var referenceVersion = "unknown"

func version() string { return "pinecone-" + referenceVersion }

type config struct {
	listen        string
	peers         []peerSpec
	inbound       []inboundRule
	listenLink    linkSpec
	multicast     []string
	admin         string
	metrics       string
	events        string
	runID         string
	name          string
	readyFile     string
	statsInterval time.Duration
	backoffMax    time.Duration
	variant       variantSpec
	adversary     []string
	logLevel      string
}

type Node struct {
	cfg       *config
	r         *router.Router
	key       types.PublicKey
	ctx       context.Context
	cancel    context.CancelFunc
	started   time.Time
	stopping  atomic.Bool
	events    *eventLog
	stats     *stats
	peers     *peerTable
	pinger    *pinger
	adversary *adversary
	logger    *log.Logger
}

func (n *Node) logf(format string, args ...interface{}) {
	if n.cfg.logLevel == "debug" || n.cfg.logLevel == "info" {
		n.logger.Printf(format, args...)
	}
}

func (n *Node) bootstrapSent(seq int64, port int) {
	n.stats.add(&n.stats.bootSent, 1)
	n.events.emit("bootstrap_sent", fields{"seq": seq, "port": port})
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func parseArgs(args []string) (*config, ed25519.PrivateKey, string, error) {
	fs := flag.NewFlagSet("pinecone-node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var peers, inbound, mcast, knobs, adv multi
	listen := fs.String("listen", "0.0.0.0:7000", "TCP address for peers (tcp://HOST:PORT or HOST:PORT; port 0 = any; off)")
	fs.Var(&peers, "peer", "peer to dial and redial: tcp://HOST:PORT[?class=CLASS] (repeatable)")
	fs.Var(&inbound, "inbound", "class of connections accepted from tcp://IP?class=.. or tcp://NET/PREFIX?class=.. (repeatable)")
	listenClass := fs.String("listen-class", "remote", "link class of accepted connections no --inbound rule matches")
	fs.Var(&mcast, "multicast", "LAN multicast discovery on this interface (the reference's multicast package; repeatable)")
	keyFile := fs.String("key-file", "", "ed25519 seed file (32 bytes or 64 hex digits); created when missing")
	keySeed := fs.String("key-seed", "", "ed25519 seed as 64 hex digits")
	runSeed := fs.String("run-seed", "", "derive the key from this run seed and --name, as the orchestrator does")
	admin := fs.String("admin", "127.0.0.1:8080", "admin API address, also serving /metrics (off to disable)")
	metrics := fs.String("metrics", "off", "a second address serving /metrics only")
	eventsPath := fs.String("events", "", "JSON-lines event log ('-' = stdout)")
	runID := fs.String("run-id", "adhoc", "run id written on every event")
	name := fs.String("name", "", "node name written on every event")
	ready := fs.String("ready-file", "", "write the bound addresses as JSON here once up")
	statsS := fs.Float64("stats-interval-s", 10, "period of frame_stats events")
	backoffS := fs.Float64("backoff-max-s", 3600, "longest wait between redials (the reference's connection manager: an hour)")
	variant := fs.String("variant", "snek", "protocol variant: snek only, with ,hop_limiting=1 / ,wakeup_broadcasts=0")
	fs.Var(&knobs, "knob", "variant knob KEY=VALUE (hop_limiting, wakeup_broadcasts; the others only at the reference's values)")
	hop := fs.Bool("hop-limiting", false, "decrement traffic hop limits (the router's EnableHopLimiting)")
	noBroadcasts := fs.Bool("no-broadcasts", false, "no wakeup broadcasts (the router's DisableWakeupBroadcasts)")
	_ = fs.Bool("broadcasts", true, "send wakeup broadcasts (the default)")
	fs.Var(&adv, "adversary", "drop frames: KIND=PERCENT[,KIND=PERCENT][@PEERKEY] (repeatable)")
	_ = fs.String("shaping-seed", "", "accepted for snekbed's command line; the reference node does no shaping")
	logLevel := fs.String("log-level", "info", "debug, info, warning or error (the router's own lines: debug)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			os.Exit(0)
		}
		return nil, nil, "", err
	}
	if fs.NArg() > 0 {
		return nil, nil, "", fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg := &config{runID: *runID, name: *name, readyFile: *ready, events: *eventsPath, logLevel: *logLevel,
		multicast: mcast, adversary: adv}
	var err error
	if cfg.listen, err = parseHostPort(*listen, "--listen"); err != nil {
		return nil, nil, "", err
	}
	if cfg.admin, err = parseHostPort(*admin, "--admin"); err != nil {
		return nil, nil, "", err
	}
	if cfg.metrics, err = parseHostPort(*metrics, "--metrics"); err != nil {
		return nil, nil, "", err
	}
	for _, u := range peers {
		p, err := parsePeerURI(u, "--peer")
		if err != nil {
			return nil, nil, "", err
		}
		cfg.peers = append(cfg.peers, p)
	}
	for _, u := range inbound {
		r, err := parseInbound(u)
		if err != nil {
			return nil, nil, "", err
		}
		cfg.inbound = append(cfg.inbound, r)
	}
	if cfg.listenLink, err = parseClass(*listenClass, "--listen-class", *listenClass); err != nil {
		return nil, nil, "", err
	}
	if !(*statsS > 0) {
		return nil, nil, "", badOption("--stats-interval-s", fmt.Sprint(*statsS), "must be more than 0")
	}
	cfg.statsInterval = time.Duration(*statsS * float64(time.Second))
	if !(*backoffS >= 1) {
		return nil, nil, "", badOption("--backoff-max-s", fmt.Sprint(*backoffS), "must be at least 1")
	}
	cfg.backoffMax = time.Duration(*backoffS * float64(time.Second))
	if cfg.variant, err = parseVariant(*variant, knobs, *hop, *noBroadcasts); err != nil {
		return nil, nil, "", err
	}
	switch cfg.logLevel {
	case "debug", "info", "warning", "error":
	default:
		return nil, nil, "", badOption("--log-level", cfg.logLevel, "expected debug, info, warning or error")
	}
	for _, a := range adv {
		if _, _, err := parseAdversarySpec(a); err != nil {
			return nil, nil, "", err
		}
	}
	sk, source, err := loadKey(*keySeed, *keyFile, *runSeed, *name)
	if err != nil {
		return nil, nil, "", err
	}
	return cfg, sk, source, nil
}

// parseAdversarySpec: --adversary KIND=PERCENT[,KIND=PERCENT...][@PEERKEYHEX], as snekbed node takes it.
// A strategy other than drop (STRATEGY[:NAME=VALUE,...], snekbed node's) is refused with its reason.
var snekbedStrategies = map[string]bool{"greyhole": true, "sybil": true, "root_takeover": true,
	"bootstrap_flood": true, "announcement_flood": true, "replay": true, "forge": true, "none": true}

func parseAdversarySpec(spec string) (dropRates, *types.PublicKey, error) {
	head, rest, named := strings.Cut(spec, ":")
	if named && strings.TrimSpace(head) == "drop" {
		spec = rest
	} else if h := strings.TrimSpace(head); snekbedStrategies[h] {
		return dropRates{}, nil, badOption("--adversary", spec, "%s", refusedStrategy(h))
	}
	body, peerHex, _ := strings.Cut(spec, "@")
	drop := map[string]float64{}
	for _, part := range strings.Split(body, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kind, val, ok := strings.Cut(part, "=")
		var pct float64
		if _, err := fmt.Sscanf(strings.TrimSpace(val), "%g", &pct); !ok || err != nil {
			return dropRates{}, nil, badOption("--adversary", spec, "%q: expected KIND=PERCENT", part)
		}
		drop[strings.TrimSpace(kind)] = pct
	}
	if len(drop) == 0 {
		return dropRates{}, nil, badOption("--adversary", spec, "an adversary spec names at least one KIND=PERCENT")
	}
	rates, bad := parseRates(drop)
	if bad != "" {
		return dropRates{}, nil, badOption("--adversary", spec, "%s", bad)
	}
	if peerHex == "" {
		return rates, nil, nil
	}
	k, ok := parseKey(strings.ToLower(peerHex))
	if !ok {
		return dropRates{}, nil, badOption("--adversary", spec, "the peer after '@' is a 64-hex-digit public key")
	}
	return rates, &k, nil
}

func main() {
	cfg, sk, source, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(2)
	}
	os.Exit(run(cfg, sk, source))
}

func run(cfg *config, sk ed25519.PrivateKey, source string) int {
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	routerLog := log.New(io.Discard, "", 0)
	if cfg.logLevel == "debug" {
		routerLog = log.New(os.Stderr, "router: ", log.LstdFlags|log.Lmicroseconds)
	}
	n := &Node{cfg: cfg, started: time.Now(), stats: newStats(), peers: newPeerTable(), adversary: newAdversary(),
		logger: logger}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.r = router.NewRouter(routerLog, sk)
	n.key = n.r.PublicKey()
	n.pinger = newPinger(n)
	n.logf("identity %s (%s), %s", n.key.String(), source, version())
	if cfg.variant.hopLimiting {
		n.r.EnableHopLimiting()
	}
	if !cfg.variant.broadcasts {
		n.r.DisableWakeupBroadcasts()
	}
	for _, a := range cfg.adversary {
		rates, peer, _ := parseAdversarySpec(a)
		n.adversary.configure(rates, peer)
	}
	n.r.InjectPacketFilter(n.filter)
	var err error
	if n.events, err = openEventLog(cfg.events, cfg.runID, n.key.String(), cfg.name); err != nil {
		logger.Printf("cannot open the event log: %v", err)
		return 1
	}
	ch := make(chan events.Event, 4096)
	n.r.Subscribe(ch)
	go n.watchRouter(ch)

	info := map[string]interface{}{"public_key": n.key.String(), "pid": os.Getpid(), "implementation": "reference",
		"version": version()}
	listen := []string{}
	var listeners []net.Listener
	if cfg.listen != "" {
		l, err := net.Listen("tcp", cfg.listen)
		if err != nil {
			logger.Printf("cannot start: --listen %s: %v", cfg.listen, err)
			return 1
		}
		listeners = append(listeners, l)
		info["listen"] = l.Addr().String()
		info["listen_all"] = []string{l.Addr().String()}
		listen = append(listen, l.Addr().String())
	}
	var servers []*http.Server
	serve := func(addr, what string, h http.Handler) (string, bool) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			logger.Printf("cannot start: %s %s: %v", what, addr, err)
			return "", false
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(l) }()
		return l.Addr().String(), true
	}
	if cfg.admin != "" {
		addr, ok := serve(cfg.admin, "--admin", n.adminHandler())
		if !ok {
			return 1
		}
		info["admin"], info["metrics"] = addr, addr
	}
	if cfg.metrics != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_, _ = w.Write(n.renderMetrics())
		})
		addr, ok := serve(cfg.metrics, "--metrics", mux)
		if !ok {
			return 1
		}
		info["metrics"] = addr
	}
	var mc *multicast.Multicast
	if len(cfg.multicast) > 0 {
		if mc, err = startMulticast(n, routerLog, cfg.multicast); err != nil {
			logger.Printf("cannot start: --multicast: %v", err)
			return 1
		}
	}
	for _, l := range listeners {
		go n.accept(l)
	}
	n.events.emit("node_started", fields{"listen": listen, "variant": cfg.variant.String(), "version": version()})
	if cfg.readyFile != "" {
		data, _ := json.Marshal(info)
		tmp := fmt.Sprintf("%s.tmp%d", cfg.readyFile, os.Getpid())
		if err := os.WriteFile(tmp, data, 0o644); err != nil || os.Rename(tmp, cfg.readyFile) != nil {
			logger.Printf("cannot write --ready-file %s", cfg.readyFile)
			return 1
		}
	}
	infoJSON, _ := json.Marshal(info)
	n.logf("node %s up: %s", short(n.key.String()), infoJSON)
	go n.pinger.readLoop()
	go n.dialLoop()
	for _, p := range cfg.peers {
		n.addDialer(p)
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(cfg.statsInterval)
	var reason string
	for reason == "" {
		select {
		case s := <-sigs:
			reason = map[os.Signal]string{syscall.SIGTERM: "sigterm", syscall.SIGINT: "sigint"}[s]
		case <-tick.C:
			n.stats.flush(n.events)
		}
	}
	tick.Stop()
	go func() { // a second signal: exit without waiting
		<-sigs
		logger.Printf("second signal: exiting without waiting")
		os.Exit(1)
	}()
	n.logf("%s: stopping", reason)
	n.stopping.Store(true)
	for _, l := range listeners {
		_ = l.Close()
	}
	if mc != nil {
		mc.Stop()
	}
	n.stopPeers("node_stopping")
	n.stats.flush(n.events)
	n.events.emit("node_stopping", fields{"reason": reason})
	n.events.close()
	n.cancel()
	_ = n.r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Shutdown(ctx)
	}
	return 0
}

// startMulticast: the reference's LAN discovery (PROTOCOL.md Appendix A) on the named interfaces only.
func startMulticast(n *Node, logger types.Logger, names []string) (*multicast.Multicast, error) {
	infos := []multicast.InterfaceInfo{}
	for _, name := range names {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return nil, fmt.Errorf("interface %q: %v", name, err)
		}
		addrs, _ := ifc.Addrs()
		text := []string{}
		for _, a := range addrs {
			text = append(text, a.String())
		}
		infos = append(infos, multicast.InterfaceInfo{Name: ifc.Name, Index: ifc.Index, Mtu: ifc.MTU,
			Up: ifc.Flags&net.FlagUp != 0, Broadcast: ifc.Flags&net.FlagBroadcast != 0,
			Loopback: ifc.Flags&net.FlagLoopback != 0, PointToPoint: ifc.Flags&net.FlagPointToPoint != 0,
			Multicast: ifc.Flags&net.FlagMulticast != 0, Addrs: strings.Join(text, " ")})
	}
	mc := multicast.NewMulticast(logger, n.r)
	mc.RegisterNetworkCallback(func() []multicast.InterfaceInfo { return infos })
	mc.Start()
	return mc, nil
}
