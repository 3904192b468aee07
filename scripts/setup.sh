#!/usr/bin/env bash
# Install everything snekbed needs on a fresh Debian/Ubuntu machine, idempotently:
# system packages (when root), a Docker engine when none answers, the .venv with all extras.
# Usage: bash scripts/setup.sh            (safe to run again: it only adds what is missing)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO=""; fi
fi

# --- system packages -------------------------------------------------------------------------
# iproute2/iptables/ethtool: link shaping and the capability probe; tshark (and its dumpcap): packet captures
# and the dissector tests; chromium + chromium-driver: the browser tests of snekbed view; debootstrap: the offline node
# image base; prometheus: real scrapes in tests; a JRE for Spark when java is missing.
need_pkgs=()
for spec in ip:iproute2 iptables:iptables ethtool:ethtool debootstrap:debootstrap prometheus:prometheus \
            curl:curl tshark:tshark chromium:chromium chromedriver:chromium-driver; do
  cmd=${spec%%:*}; pkg=${spec##*:}
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || [ -x "/sbin/$cmd" ] || need_pkgs+=("$pkg")
done
command -v java >/dev/null 2>&1 || need_pkgs+=(default-jre-headless)
# The Go reference (../shared/reference, matrix-org/pinecone) builds offline in GOPATH mode against Debian's Go
# and these four libraries (its README); snekbed's reference node program (node/pinecone) is built from them.
command -v go >/dev/null 2>&1 || need_pkgs+=(golang-go)
for gopkg in golang-golang-x-net-dev golang-golang-x-sys-dev golang-github-gorilla-websocket-dev golang-go.uber-atomic-dev; do
  dpkg -s "$gopkg" >/dev/null 2>&1 || need_pkgs+=("$gopkg")
done
if ! command -v docker >/dev/null 2>&1; then need_pkgs+=(docker.io); fi
if ! command -v docker-compose >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then need_pkgs+=(docker-compose); fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
    log "installing Debian packages: ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  else
    log "not root and no sudo: cannot install ${need_pkgs[*]} (tests that need them will skip, or fail under CI=true)"
  fi
fi
# The prometheus package starts a system service; tests run their own instances.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
  $SUDO systemctl stop prometheus || true
fi

# --- Docker engine ---------------------------------------------------------------------------
if command -v docker >/dev/null 2>&1 && ! timeout 10 docker info >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v dockerd >/dev/null 2>&1; then
    log "no Docker engine answers: starting dockerd"
    (dockerd >/tmp/snekbed-dockerd.log 2>&1 &)
    for _ in $(seq 1 30); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 1; done
    timeout 5 docker info >/dev/null 2>&1 || log "dockerd did not come up (see /tmp/snekbed-dockerd.log); the in-process backend still works"
  else
    log "no Docker engine reachable; the in-process backend still works"
  fi
fi

# --- Python ----------------------------------------------------------------------------------
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
stamp=.venv/.snekbed-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  log "installing snekbed and its extras into .venv"
  .venv/bin/pip install -q -U pip
  .venv/bin/pip install -q -e '.[all]'
  touch "$stamp"
fi
# The compiled protocol core (docs/compiled-core.md) is rebuilt when node/core changed since it was compiled.
if .venv/bin/python -W ignore -c "import sys, node.core; sys.exit(1 if node.core.STALE else 0)"; then :; else
  log "node/core changed since it was compiled: compiling it again"
  .venv/bin/pip install -q -e '.[all]'
fi
log "ready: $(.venv/bin/snekbed --version | tr '\n' ' ')"
# The reference node program (node/pinecone on the Go reference, docs/interop.md): built once, offline, cached by
# a hash of its sources. Without ../shared/reference (or $SNEKBED_PINECONE_SRC) it is skipped, and says why.
if ref_path=$(.venv/bin/python -W ignore -c "
import sys
from orchestrator.backends.reference import build_reference_node, reference_available, REPO
ok, why = reference_available()
if not ok:
    sys.exit('reference nodes unavailable: ' + why)
print(build_reference_node(REPO / 'build' / 'reference-node'))
" 2>/tmp/snekbed-reference-build.log); then
  log "reference node built: $ref_path"
else
  log "$(tail -n 1 /tmp/snekbed-reference-build.log)"
fi
# The images (docs/image.md): the node image, the reference node's and Prometheus', built once here (or reused when
# their inputs did not change), so that neither the main job nor any test pays for a build. Without an engine they are
# left to the first command that needs them.
if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
  if .venv/bin/snekbed image build >/tmp/snekbed-image-build.log 2>&1 \
     && .venv/bin/snekbed image prometheus >>/tmp/snekbed-image-build.log 2>&1; then
    log "images ready: $(grep -o 'snekbed-[a-z]*:[0-9a-f]\{12\}' /tmp/snekbed-image-build.log | sort -u | tr '\n' ' ')"
  else
    log "an image could not be built (see /tmp/snekbed-image-build.log): the commands that need it will say why"
  fi
else
  log "no Docker engine answers: no images built (the in-process backend needs none)"
fi
