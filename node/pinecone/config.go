package main

// Configuration from the command line: the options of `snekbed node` that mean something for a node on the
// reference's router (docs/interop.md lists them, and what is refused and why). Every problem is a
// configError naming the option and the value; main exits with code 2 on one.

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
)

type configError struct{ what, value, reason string }

func (e *configError) Error() string { return fmt.Sprintf("%s %q: %s", e.what, e.value, e.reason) }

func badOption(what, value, format string, args ...interface{}) error {
	return &configError{what, value, fmt.Sprintf(format, args...)}
}

// Link classes (contract/classes.yaml) and the link type (the reference's peer type, PROTOCOL.md section 3.4)
// each one gives a peering. A class that names a link type is also accepted (the Docker plan writes those).
var linkClassTypes = map[string]int{
	"pipe": 0, "multicast": 1, "lan": 1, "bonjour": 2, "remote": 3, "custom": 3, "bluetooth": 4,
}

var linkTypeNames = []string{"pipe", "multicast", "bonjour", "remote", "bluetooth"}

func linkTypeName(t int) string {
	if t >= 0 && t < len(linkTypeNames) {
		return linkTypeNames[t]
	}
	return strconv.Itoa(t)
}

// sortedClasses: every default link class, in name order (the metrics pre-set one sample per class).
func sortedClasses() []string {
	out := make([]string, 0, len(linkClassTypes))
	for c := range linkClassTypes {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Shape parameters of a snekbed peer URI: the reference has no userspace shaper, so they are refused.
var shapeParams = map[string]bool{"shape": true, "delay_ms": true, "jitter_ms": true, "loss_pct": true,
	"rate_mbit": true, "queue_limit_pkts": true}

type linkSpec struct {
	class    string
	linkType int
}

type peerSpec struct {
	uri  string // as given
	addr string // HOST:PORT to dial
	link linkSpec
}

type inboundRule struct {
	ip   net.IP     // one address, or
	nett *net.IPNet // any address of a network
	link linkSpec
}

func (r inboundRule) matches(ip net.IP) bool {
	if r.nett != nil {
		return r.nett.Contains(ip)
	}
	return r.ip.Equal(ip)
}

func parseClass(name, what, value string) (linkSpec, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	t, ok := linkClassTypes[name]
	if !ok {
		return linkSpec{}, badOption(what, value, "unknown link class %q (known: %s)", name, strings.Join(sortedClasses(), ", "))
	}
	return linkSpec{name, t}, nil
}

// uriParams: the query of a tcp:// URI; only class is meaningful here.
func uriParams(u *url.URL, what, value string) (linkSpec, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return linkSpec{}, badOption(what, value, "bad query: %v", err)
	}
	for k, v := range q {
		switch {
		case k == "class":
			if len(v) != 1 {
				return linkSpec{}, badOption(what, value, "parameter %q given twice", k)
			}
		case shapeParams[k]:
			return linkSpec{}, badOption(what, value, "%s: the reference node has no userspace shaper (shape the link "+
				"outside the node, e.g. with netem, or run a snekbed node there)", k)
		default:
			return linkSpec{}, badOption(what, value, "unknown parameter %q (known: class)", k)
		}
	}
	class := q.Get("class")
	if class == "" {
		class = "remote"
	}
	return parseClass(class, what, value)
}

func parsePeerURI(uri, what string) (peerSpec, error) {
	if strings.HasPrefix(uri, "bluetooth://") {
		return peerSpec{}, badOption(what, uri, "the reference node has no Bluetooth transport (its router sees a "+
			"Bluetooth peering as a byte stream the mobile apps carry); use tcp://HOST:PORT")
	}
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return peerSpec{}, badOption(what, uri, "expected tcp://HOST:PORT[?class=CLASS]")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return peerSpec{}, badOption(what, uri, "expected tcp://HOST:PORT[?class=CLASS]")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return peerSpec{}, badOption(what, uri, "port %q outside 1..65535", port)
	}
	link, err := uriParams(u, what, uri)
	if err != nil {
		return peerSpec{}, err
	}
	return peerSpec{uri: uri, addr: net.JoinHostPort(host, port), link: link}, nil
}

func parseInbound(uri string) (inboundRule, error) {
	const what = "--inbound"
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "tcp" {
		return inboundRule{}, badOption(what, uri, "expected tcp://IP?class=CLASS or tcp://NET/PREFIX?class=CLASS")
	}
	link, err := uriParams(u, what, uri)
	if err != nil {
		return inboundRule{}, err
	}
	host := u.Hostname()
	if u.Path != "" && u.Path != "/" {
		_, n, err := net.ParseCIDR(host + u.Path)
		if err != nil {
			return inboundRule{}, badOption(what, uri, "%s%s is not a network NET/PREFIX", host, u.Path)
		}
		return inboundRule{nett: n, link: link}, nil
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return inboundRule{}, badOption(what, uri, "%q is not an IP address", host)
	}
	return inboundRule{ip: ip, link: link}, nil
}

// parseHostPort: HOST:PORT, [V6]:PORT, or tcp://HOST:PORT; "" when off.
func parseHostPort(text, what string) (string, error) {
	t := strings.TrimSpace(text)
	switch strings.ToLower(t) {
	case "", "off", "none", "no":
		return "", nil
	}
	if strings.HasPrefix(t, "tcp://") {
		t = strings.TrimPrefix(t, "tcp://")
	} else if strings.Contains(t, "://") {
		return "", badOption(what, text, "expected HOST:PORT or tcp://HOST:PORT")
	}
	host, port, err := net.SplitHostPort(t)
	if err != nil || host == "" {
		return "", badOption(what, text, "expected HOST:PORT ([V6]:PORT for IPv6; port 0 = any free port)")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", badOption(what, text, "port %q outside 0..65535", port)
	}
	return net.JoinHostPort(host, port), nil
}

// deriveSeed is node.core.crypto.derive_seed: SHA-256 of "snekbed-key-v1", then each part as a 4-byte big-endian
// length and its UTF-8 bytes. (run seed, node name) gives the key a snekbed node of that name has in that run.
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

func seedFromHex(text, what, shown string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(text))
	if err != nil || len(b) != ed25519.SeedSize {
		return nil, badOption(what, shown, "expected an ed25519 seed: 64 hex digits")
	}
	return b, nil
}

// loadKey: the node's ed25519 key, as `snekbed node` makes it (--key-seed, --key-file; created when missing),
// or from --run-seed and --name as the orchestrator derives it. Returns where it came from.
func loadKey(keySeed, keyFile, runSeed, name string) (ed25519.PrivateKey, string, error) {
	given := 0
	for _, s := range []string{keySeed, keyFile, runSeed} {
		if s != "" {
			given++
		}
	}
	if given > 1 {
		return nil, "", badOption("--key-seed", "", "give one of --key-seed, --key-file, --run-seed")
	}
	switch {
	case keySeed != "":
		seed, err := seedFromHex(keySeed, "--key-seed", fmt.Sprintf("<%d characters, not shown>", len(keySeed)))
		if err != nil {
			return nil, "", err
		}
		return ed25519.NewKeyFromSeed(seed), "seed", nil
	case runSeed != "":
		if name == "" {
			return nil, "", badOption("--run-seed", runSeed, "needs --name (the key derives from the run seed and the node name)")
		}
		return ed25519.NewKeyFromSeed(deriveSeed(runSeed, name)), "run seed and name", nil
	case keyFile != "":
		data, err := os.ReadFile(keyFile)
		if errors.Is(err, os.ErrNotExist) {
			_, sk, err := ed25519.GenerateKey(nil)
			if err != nil {
				return nil, "", err
			}
			f, err := os.OpenFile(keyFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return nil, "", badOption("--key-file", keyFile, "cannot create: %v", err)
			}
			defer f.Close()
			if _, err := f.WriteString(hex.EncodeToString(sk.Seed()) + "\n"); err != nil {
				return nil, "", badOption("--key-file", keyFile, "cannot write: %v", err)
			}
			return sk, "created", nil
		}
		if err != nil {
			return nil, "", badOption("--key-file", keyFile, "cannot read: %v", err)
		}
		if len(data) == ed25519.SeedSize {
			return ed25519.NewKeyFromSeed(data), "file", nil
		}
		seed, err := seedFromHex(string(data), "--key-file", keyFile)
		if err != nil {
			return nil, "", err
		}
		return ed25519.NewKeyFromSeed(seed), "file", nil
	}
	_, sk, err := ed25519.GenerateKey(nil)
	return sk, "ephemeral", err
}

// variantSpec: the protocol variant the reference runs ("snek") and the knobs its public API can set (hop
// limiting, wakeup broadcasts). The other knobs are constants of the reference: only their values are accepted.
type variantSpec struct {
	hopLimiting bool
	broadcasts  bool
}

var fixedKnobs = map[string]float64{"root_filter": 0, "bootstrap_interval": 5, "entry_expiry": 10}

func parseBool(text string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(text)) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

func parseVariant(spec string, knobs []string, hopLimiting, noBroadcasts bool) (variantSpec, error) {
	v := variantSpec{broadcasts: true}
	parts := strings.Split(spec, ",")
	if strings.TrimSpace(parts[0]) != "snek" {
		return v, badOption("--variant", spec, "the reference implements only the variant snek (the current SNEK, "+
			"PROTOCOL.md section 6)")
	}
	all := append(append([]string{}, parts[1:]...), knobs...)
	for _, kv := range all {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return v, badOption("--knob", kv, "expected KEY=VALUE")
		}
		switch k {
		case "hop_limiting", "wakeup_broadcasts":
			b, ok := parseBool(val)
			if !ok {
				return v, badOption("--knob", kv, "%q is not a boolean (1/0, true/false, yes/no, on/off)", val)
			}
			if k == "hop_limiting" {
				v.hopLimiting = b
			} else {
				v.broadcasts = b
			}
		case "root_filter", "bootstrap_interval", "entry_expiry":
			want := fixedKnobs[k]
			var got float64
			if k == "root_filter" {
				b, ok := parseBool(val)
				if !ok {
					return v, badOption("--knob", kv, "%q is not a boolean", val)
				}
				if b {
					got = 1
				}
			} else {
				f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || math.IsNaN(f) {
					return v, badOption("--knob", kv, "%q is not a number of seconds", val)
				}
				got = f
			}
			if got != want {
				return v, badOption("--knob", kv, "the reference fixes %s at %g (a constant of its router)", k, want)
			}
		default:
			return v, badOption("--knob", kv, "unknown knob %q (known: bootstrap_interval, entry_expiry, hop_limiting, "+
				"root_filter, wakeup_broadcasts)", k)
		}
	}
	if hopLimiting {
		v.hopLimiting = true
	}
	if noBroadcasts {
		v.broadcasts = false
	}
	return v, nil
}

// String: the canonical spec text, as node.core.variants.VariantSpec writes it (knobs that differ from their
// defaults, in name order, booleans as 1/0).
func (v variantSpec) String() string {
	s := "snek"
	if v.hopLimiting {
		s += ",hop_limiting=1"
	}
	if !v.broadcasts {
		s += ",wakeup_broadcasts=0"
	}
	return s
}

func (v variantSpec) knobs() map[string]interface{} {
	return map[string]interface{}{"root_filter": false, "bootstrap_interval": 5.0, "entry_expiry": 10.0,
		"hop_limiting": v.hopLimiting, "wakeup_broadcasts": v.broadcasts}
}
