"""``snekbed node``: run one overlay node (what every testbed container runs).

Example (three nodes by hand, see docs/node.md)::

    snekbed node --listen 127.0.0.1:7001 --admin 127.0.0.1:8081 --metrics off --key-seed $(printf 'a%.0s' {1..64})
    snekbed node --listen 127.0.0.1:7002 --admin 127.0.0.1:8082 --metrics off --peer tcp://127.0.0.1:7001

Exit codes: 0 after a clean stop (SIGTERM / SIGINT), 2 for bad options, 1 when
an address cannot be bound.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click
import trio

from node.config import (
    ConfigError,
    HostPort,
    NodeConfig,
    Timeouts,
    link_spec,
    load_identity,
    parse_adversary,
    parse_attack,
    parse_variant,
    parse_hostport,
    parse_inbound,
    parse_listen,
    parse_listen_bluetooth,
    parse_peer_uri,
)
from node.core.recorder import DEFAULT_MAX_ENTRIES, DEFAULT_WINDOW_S
from node.core.types import MAX_FRAME_LEN
from node.lifecycle import NodeProcess
from node.transports import bluetooth as bt

__all__ = ["build_config", "check_bluetooth", "main_async", "node"]

log = logging.getLogger("snekbed.node")
_OFF = ("off", "none", "no", "")


def _addr(value: str | None, what: str) -> HostPort | None:
    if value is None or value.strip().lower() in _OFF:
        return None
    return parse_hostport(value.strip(), what)


def _listen(value: str | None) -> HostPort | None:
    if value is None or value.strip().lower() in _OFF:
        return None
    return parse_listen(value.strip(), "--listen")


def build_config(**o: object) -> NodeConfig:
    """NodeConfig from the click options (names as in :func:`node`). Raises ConfigError."""
    shape_all = bool(o["userspace_shaping"])
    identity, source = load_identity(o["key_file"], o["key_seed"])  # type: ignore[arg-type]
    timeouts = Timeouts(
        handshake_s=o["handshake_timeout_s"], keepalive_s=o["keepalive_interval_s"],  # type: ignore[arg-type]
        read_s=o["read_timeout_s"], write_s=o["write_timeout_s"],  # type: ignore[arg-type]
        backoff_max_s=o["backoff_max_s"],  # type: ignore[arg-type]
    )  # fmt: skip
    listen_class = str(o["listen_class"])
    cfg = NodeConfig(
        identity=identity,
        listen=_listen(o["listen"]),  # type: ignore[arg-type]
        listen_bluetooth=(parse_listen_bluetooth(str(o["listen_bluetooth"]), shape_all=shape_all)
                          if o.get("listen_bluetooth") else None),
        peers=[parse_peer_uri(u, shape_all=shape_all) for u in o["peer"]],  # type: ignore[union-attr]
        inbound=[parse_inbound(u, shape_all=shape_all) for u in o["inbound"]],  # type: ignore[union-attr]
        listen_link=link_spec({"class": listen_class}, what="--listen-class", value=listen_class, shape_all=shape_all),
        multicast=list(o["multicast"]),  # type: ignore[call-overload]
        admin=_addr(o["admin"], "--admin"),  # type: ignore[arg-type]
        metrics=_addr(o["metrics"], "--metrics"),  # type: ignore[arg-type]
        events=o["events"],  # type: ignore[arg-type]
        run_id=o["run_id"],  # type: ignore[arg-type]
        name=o["name"],  # type: ignore[arg-type]
        ready_file=Path(o["ready_file"]) if o["ready_file"] else None,  # type: ignore[arg-type]
        max_frame_bytes=o["max_frame_bytes"],  # type: ignore[arg-type]
        flow_queue_frames=o["flow_queue_frames"],  # type: ignore[arg-type]
        stats_interval_s=o["stats_interval_s"],  # type: ignore[arg-type]
        timeouts=timeouts,
        variant=parse_variant(str(o.get("variant", "snek")), list(o.get("knob", ())),  # type: ignore[call-overload]
                              hop_limiting=bool(o["hop_limiting"]), broadcasts=bool(o["broadcasts"])),
        shaping_seed=o["shaping_seed"],  # type: ignore[arg-type]
        adversary=[parse_adversary(a) for a in o.get("adversary", ()) if parse_attack(a) is None],  # type: ignore[union-attr]
        attack=next((x for a in reversed(o.get("adversary", ())) if (x := parse_attack(a))), None),  # type: ignore[arg-type]
        recorder_s=o.get("recorder_s", DEFAULT_WINDOW_S),  # type: ignore[arg-type]
        recorder_max_entries=o.get("recorder_max_entries", DEFAULT_MAX_ENTRIES),  # type: ignore[arg-type]
    )
    check_bluetooth(cfg)
    log.info("identity %s (%s)", identity.public_key.hex(), source)
    return cfg


def check_bluetooth(cfg: NodeConfig, unavailable: Callable[[], str | None] = bt.unavailable) -> None:
    """Refuse every Bluetooth option when this machine cannot do Bluetooth (no Python support, no kernel
    sockets, no adapter): ConfigError naming the first such option and everything that is missing."""
    uses = [("--peer", p.uri) for p in cfg.peers if p.transport == "bluetooth"]
    if cfg.listen_bluetooth is not None:
        uses.insert(0, ("--listen-bluetooth", cfg.listen_bluetooth.uri))
    if not uses:
        return
    why = unavailable()
    if why is not None:
        raise ConfigError(uses[0][0], uses[0][1], why)


async def _watch_signals(node: NodeProcess) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name.lower()
            if node.stopping:
                log.warning("second %s: exiting without waiting", name)
                raise SystemExit(1)
            log.info("%s: stopping", name)
            node.request_stop(name)


async def main_async(cfg: NodeConfig) -> None:
    """Run a node until SIGTERM/SIGINT. Raises OSError when an address cannot be bound."""
    node = NodeProcess(cfg)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, node)
        await node.run()
        nursery.cancel_scope.cancel()


@click.command("node", context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--listen", default="0.0.0.0:7000", help="TCP address for peers (tcp://HOST:PORT or HOST:PORT, [V6]:PORT; port 0 = any; 'off').")
@click.option("--peer", multiple=True, metavar="URI", help="Peer to dial: tcp://HOST:PORT?class=remote|multicast|lan|bluetooth[&delay_ms=..&jitter_ms=..&loss_pct=..&rate_mbit=..&queue_limit_pkts=..&shape=1], or bluetooth://AA:BB:CC:DD:EE:FF/PSM[?same parameters] (L2CAP, class bluetooth). Repeatable.")
@click.option("--listen-bluetooth", default=None, metavar="URI", help="Accept L2CAP peerings: bluetooth://ADDR/PSM (00:00:00:00:00:00 = any adapter; ?class=..&shape=.. as for --peer). Needs Bluetooth: see `snekbed bluetooth probe`.")
@click.option("--inbound", multiple=True, metavar="URI",
              help="Class/shaping for connections accepted from an address: tcp://IP?class=..&.. or from a "
                   "network: tcp://NET/PREFIX?class=..&... Repeatable.")
@click.option("--listen-class", default="remote", help="Link class of accepted connections without an --inbound rule.")
@click.option("--multicast", multiple=True, metavar="IFACE", help="LAN multicast discovery on this interface. Repeatable.")
@click.option("--key-file", type=click.Path(dir_okay=False), default=None, help="ed25519 seed file (32 bytes or 64 hex digits); created with mode 0600 if missing.")
@click.option("--key-seed", default=None, metavar="HEX", help="ed25519 seed as 64 hex digits (reproducible experiments).")
@click.option("--admin", default="127.0.0.1:8080", help="Admin HTTP API address ('off' to disable).")
@click.option("--metrics", default="127.0.0.1:9100", help="Prometheus /metrics address ('off' to disable).")
@click.option("--events", default=None, metavar="PATH", help="JSON-lines event log ('-' = stdout).")
@click.option("--run-id", default="adhoc", help="Run id written on every event.")
@click.option("--name", default=None, help="Node name written on every event (node_name).")
@click.option("--ready-file", default=None, metavar="PATH", help="Write the bound addresses as JSON here once up.")
@click.option("--max-frame-bytes", type=int, default=MAX_FRAME_LEN, help="Largest frame accepted from a peer; longer ones drop the peer.")
@click.option("--flow-queue-frames", type=int, default=64, help="Frames per flow bucket of a peer's traffic queue (head drop; the reference uses 16, see docs/node.md).")
@click.option("--userspace-shaping", is_flag=True, help="Shape every peering with its link class's full shape.")
@click.option("--shaping-seed", type=int, default=None, help="Seed for userspace shaping randomness.")
@click.option("--stats-interval-s", type=float, default=10.0, help="Period of frame_stats events.")
@click.option("--handshake-timeout-s", type=float, default=10.0)
@click.option("--keepalive-interval-s", type=float, default=3.0)
@click.option("--read-timeout-s", type=float, default=5.0)
@click.option("--write-timeout-s", type=float, default=3.0)
@click.option("--backoff-max-s", type=float, default=30.0, help="Longest wait between redials of a configured peer.")
@click.option("--variant", default="snek", metavar="NAME[,KNOB=VALUE...]", help="Protocol variant: snek (the reference), snek-s0 (seed 000), legacy (seeds 002/003); see docs/variants.md.")
@click.option("--knob", multiple=True, metavar="KEY=VALUE", help="Variant knob: root_filter, bootstrap_interval, entry_expiry, hop_limiting, wakeup_broadcasts, bootstrap_min_gap (docs/variants.md). Repeatable.")
@click.option("--hop-limiting/--no-hop-limiting", default=False, help="Decrement traffic hop limits (§4.9); the same as --knob hop_limiting=1.")
@click.option("--broadcasts/--no-broadcasts", default=True, help="Send wakeup broadcasts (§6.8); --no-broadcasts is --knob wakeup_broadcasts=0.")
@click.option("--adversary", multiple=True, metavar="SPEC", help="Drop received frames (chaos tests): [drop:]KIND=PERCENT[,KIND=PERCENT][@PEERKEY], kinds all, keepalive, tree_announcement, bootstrap, wakeup_broadcast, traffic. Repeatable (one per peer). Or a strategy (docs/attacks.md): STRATEGY[:NAME=VALUE,...], e.g. greyhole:forward=0.3, sybil:victim=KEYHEX, root_takeover:mode=rejoin,period_s=30, bootstrap_flood:multiple=10, announcement_flood, replay:interval_s=1, forge:rate_per_s=1,kinds=bootstrap+coords, none (the last strategy given wins).")
@click.option("--recorder-s", type=float, default=DEFAULT_WINDOW_S, help="Flight recorder: keep the last this many seconds of frame headers and routing events in memory, for GET /recorder (0 = off; docs/node.md).")
@click.option("--recorder-max-entries", type=int, default=DEFAULT_MAX_ENTRIES, help="Flight recorder: the most entries it holds (the oldest go first).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
def node(**options: object) -> None:
    """Run one SNEK overlay node until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=str(options.pop("log_level")).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        cfg = build_config(**options)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        trio.run(main_async, cfg)
    except* OSError as group:
        log.error("cannot start: %s", group.exceptions[0])
        sys.exit(1)
