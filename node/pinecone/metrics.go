package main

// GET /metrics: the snek_* series of node/metrics.py that this node can fill honestly (the same names, types
// and labels; docs/interop.md lists which, and why the others are absent), in Prometheus's text format as
// prometheus_client writes it, plus the process_* series read from /proc as its process collector does.

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

func fmtFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") && !strings.Contains(s, "Inf") && !strings.Contains(s, "NaN") {
		s += ".0"
	}
	return s
}

func escLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(v)
}

type expo struct{ b bytes.Buffer }

func (e *expo) family(name, typ, help string) {
	fmt.Fprintf(&e.b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample: labels as name, value pairs, in the order given.
func (e *expo) sample(name string, v float64, labels ...string) {
	e.b.WriteString(name)
	if len(labels) > 0 {
		e.b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				e.b.WriteByte(',')
			}
			fmt.Fprintf(&e.b, `%s="%s"`, labels[i], escLabel(labels[i+1]))
		}
		e.b.WriteByte('}')
	}
	e.b.WriteByte(' ')
	e.b.WriteString(fmtFloat(v))
	e.b.WriteByte('\n')
}

func (e *expo) gauge(name, help string, v float64, labels ...string) {
	e.family(name, "gauge", help)
	e.sample(name, v, labels...)
}

func (e *expo) counter(name, help string, v float64) {
	e.family(name+"_total", "counter", help)
	e.sample(name+"_total", v)
}

var handshakeReasons = []string{"bad_capabilities", "bad_signature", "bad_version", "eof", "io_error", "overload",
	"timeout", "truncated"}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (n *Node) renderMetrics() []byte {
	e := &expo{}
	m, err := n.manhole()
	if err != nil {
		m = &manhole{PublicKey: n.key.String()}
	}
	peers := map[string]int{}
	queued := [2]int{}
	for _, p := range n.peersDoc(m) { // before the stats lock: the peer table's lock is taken before it elsewhere
		peers[p["link_class"].(string)]++
	}
	for _, ps := range m.Peers {
		for _, p := range ps {
			if p.Port == 0 { // the router's own port: what waits there is for this node's application
				continue
			}
			queued[0] += p.Proto.Count
			queued[1] += p.Traffic.Count
		}
	}
	s := n.stats
	s.mu.Lock()
	defer s.mu.Unlock()

	e.family("snek_node_info", "gauge", "This node's identity and protocol variant.")
	e.sample("snek_node_info", 1, "key", n.key.String(), "name", n.cfg.name, "variant", "snek",
		"variant_spec", n.cfg.variant.String(), "version", version())
	e.family("snek_peers", "gauge", "Connected peers by link class.")
	classes := sortedClasses()
	for c := range peers {
		if _, ok := linkClassTypes[c]; !ok {
			classes = append(classes, c)
		}
	}
	for _, c := range classes {
		e.sample("snek_peers", float64(peers[c]), "link_class", c)
	}
	isRoot := 0.0
	if m.Parent == nil {
		isRoot = 1
	}
	e.gauge("snek_is_root", "1 when this node is the root of its spanning tree.", isRoot)
	e.gauge("snek_root_info", "The current root's key (its sequence is snek_root_sequence).", 1, "key", m.rootKey())
	e.gauge("snek_root_sequence", "Sequence number of the current root announcement.", float64(m.rootSeq()))
	e.gauge("snek_tree_depth", "Hops from the root (length of our coordinates).", float64(len(parseCoords(m.Coords))))
	desc := 0.0
	if m.descending() != "" {
		desc = 1
	}
	e.gauge("snek_descending_present", "1 when this node has a descending SNEK neighbour.", desc)
	e.gauge("snek_routing_table_entries", "Entries in the SNEK routing table.", float64(len(m.SNEK.Paths)))
	e.counter("snek_root_changes", "Root changes seen.", float64(s.rootChg))
	e.counter("snek_parent_changes", "Parent changes.", float64(s.parentChg))
	e.counter("snek_bootstraps_sent", "Bootstraps sent.", float64(s.bootSent))
	e.counter("snek_bootstraps_accepted", "Bootstraps accepted (at any hop).", float64(s.bootAcc))

	types := append(append([]string{}, frameTypeNames...), "legacy_bootstrap", "legacy_bootstrap_ack",
		"legacy_setup", "legacy_teardown", unknownType)
	byType := [2]map[string]int64{{}, {}}
	byClass := [2]map[string]int64{{}, {}}
	for k, c := range s.frames {
		byType[k.dir][k.ftype] += c.frames
		byClass[k.dir][k.class] += c.bytes
	}
	e.family("snek_received_frames_total", "counter", "Frames received from peers, by type.")
	for _, t := range types {
		e.sample("snek_received_frames_total", float64(byType[dirReceived][t]), "type", t)
	}
	e.family("snek_sent_frames_total", "counter", "Frames written to peers, by type.")
	for _, t := range types {
		e.sample("snek_sent_frames_total", float64(byType[dirSent][t]), "type", t)
	}
	for dir, name := range dirNames {
		fam := "snek_" + name + "_bytes_total"
		e.family(fam, "counter", "Frame bytes "+name+", by link class.")
		cls := sortedClasses()
		for c := range byClass[dir] {
			if _, ok := linkClassTypes[c]; !ok {
				cls = append(cls, c)
			}
		}
		for _, c := range cls {
			e.sample(fam, float64(byClass[dir][c]), "link_class", c)
		}
	}
	// every drop this node can count starts at 0 (the adversary's), and so does every disconnect reason
	e.family("snek_dropped_frames_total", "counter", "Frames dropped, by type and reason.")
	drops := map[[2]string]bool{}
	for _, t := range adversaryTypes {
		drops[[2]string{t, "adversary"}] = true
	}
	for k := range s.drops {
		drops[k] = true
	}
	keys := make([][2]string, 0, len(drops))
	for k := range drops {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"\x00"+keys[i][1] < keys[j][0]+"\x00"+keys[j][1] })
	for _, k := range keys {
		e.sample("snek_dropped_frames_total", float64(s.drops[k]), "type", k[0], "reason", k[1])
	}
	e.family("snek_handshake_failures_total", "counter", "Failed handshakes, by reason.")
	for _, r := range withKeys(handshakeReasons, s.handshakes) {
		e.sample("snek_handshake_failures_total", float64(s.handshakes[r]), "reason", r)
	}
	e.family("snek_peer_disconnects_total", "counter", "Peerings ended, by reason.")
	for _, r := range withKeys(disconnectReasons, s.disconn) {
		e.sample("snek_peer_disconnects_total", float64(s.disconn[r]), "reason", r)
	}
	e.counter("snek_dial_failures", "Outgoing connection attempts that failed.", float64(s.dialFail))
	e.counter("snek_delivered_frames", "Traffic frames delivered to this node's application.", float64(s.delivered))
	e.family("snek_queued_frames", "gauge", "Frames waiting in peer queues.")
	e.sample("snek_queued_frames", float64(queued[0]), "queue", "protocol")
	e.sample("snek_queued_frames", float64(queued[1]), "queue", "traffic")
	e.family("snek_pings_total", "counter", "Pings finished, by mode and result.")
	for _, mode := range []string{"snek", "tree"} {
		for _, res := range []string{"received", "lost"} {
			e.sample("snek_pings_total", float64(s.pings[[2]string{mode, res}]), "mode", mode, "result", res)
		}
	}
	n.processMetrics(e)
	e.family("snek_ping_rtt_seconds", "histogram", "Ping round-trip time (§8).")
	for _, mode := range []string{"snek", "tree"} {
		h := s.rtt[mode]
		cum := int64(0)
		for i, le := range pingBuckets {
			cum += h.counts[i]
			e.sample("snek_ping_rtt_seconds_bucket", float64(cum), "le", fmtFloat(le), "mode", mode)
		}
		e.sample("snek_ping_rtt_seconds_bucket", float64(h.count), "le", "+Inf", "mode", mode)
		e.sample("snek_ping_rtt_seconds_count", float64(h.count), "mode", mode)
		e.sample("snek_ping_rtt_seconds_sum", h.sum, "mode", mode)
	}
	return e.b.Bytes()
}

// withKeys: the known label values and any other key of seen, sorted.
func withKeys(known []string, seen map[string]int64) []string {
	out := append([]string{}, known...)
	for _, k := range sortedKeys(seen) {
		if !containsStr(out, k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func containsStr(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// processMetrics: what prometheus_client's process collector reads from /proc, read the same way.
func (n *Node) processMetrics(e *expo) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return
	}
	// the fields after the command name, which is in parentheses and may hold spaces
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 22 {
		return
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
	const ticks = 100.0 // sysconf(_SC_CLK_TCK) on Linux
	pageSize := float64(os.Getpagesize())
	e.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", num(20))
	e.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", num(21)*pageSize)
	if boot := bootTime(); boot > 0 {
		e.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
			boot+num(19)/ticks)
	}
	e.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
	e.sample("process_cpu_seconds_total", (num(11)+num(12))/ticks)
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		e.gauge("process_open_fds", "Number of open file descriptors.", float64(len(fds)))
	}
	if lim, err := os.ReadFile("/proc/self/limits"); err == nil {
		for _, line := range strings.Split(string(lim), "\n") {
			if strings.HasPrefix(line, "Max open files") {
				if fs := strings.Fields(line); len(fs) >= 4 {
					if v, err := strconv.ParseFloat(fs[3], 64); err == nil {
						e.gauge("process_max_fds", "Maximum number of open file descriptors.", v)
					}
				}
			}
		}
	}
}

func bootTime() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "btime ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(line[6:]), 64)
			return v
		}
	}
	return 0
}
