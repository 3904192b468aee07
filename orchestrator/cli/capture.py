"""``snekbed capture NODE`` and ``snekbed wireshark install|check`` (docs/capture.md).

Exit codes (:mod:`contract.exit_codes`): 0 done (and with ``--check``, the dissector and the codec agree); 1 they
disagree, or the capture failed while it ran; 2 refused before anything was recorded or read: no such run or node,
a run that is not a Docker run, a missing tool, a file that is no capture tshark can read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from contract.exit_codes import FAILED, OK

from orchestrator.cli.options import BadInput
from orchestrator.model.runs import RunError, open_run, runs_root
from orchestrator.tools.capture import CaptureError, CaptureRefused, capture_in_run, check_capture, install_dissector

__all__ = ["capture", "wireshark"]


def _report(result: object, as_json: bool) -> None:
    doc = result.to_dict()  # type: ignore[attr-defined]
    if as_json:
        click.echo(json.dumps(doc))
        return
    types = ", ".join(f"{k} {v}" for k, v in sorted(doc["by_type"].items()))
    click.echo(f"{doc['frames']} frames on {doc['connections']} connection directions ({doc['handshakes']} "
               f"handshakes): {types or 'none'}; malformed {doc['malformed']}; "
               f"{'identical in the dissector and the codec' if doc['ok'] else 'MISMATCH'}")
    for line in doc["mismatches"]:
        click.echo(f"  {line}", err=True)


@click.command()
@click.argument("node")
@click.option("--peer", default=None, help="Only the link to this node [default: all of NODE's links].")
@click.option("--run-id", default=None, help="The Docker run [default: the most recent run].")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where runs are [default: $SNEKBED_RUNS_DIR or ./runs].")
@click.option("--duration-s", type=float, default=30.0, show_default=True, help="How long to record.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The pcapng file [default: runs/<id>/captures/<node>[-<peer>].pcapng].")
@click.option("--check", is_flag=True, help="Then decode it with tshark + the dissector and with the codec; compare.")
@click.option("--json", "as_json", is_flag=True)
def capture(node: str, peer: str | None, run_id: str | None, runs_dir: Path | None, duration_s: float,
            output: Path | None, check: bool, as_json: bool) -> None:  # fmt: skip
    """Record NODE's snek traffic in a running Docker run into a pcapng file (from the host, in its namespace)."""
    try:
        run = open_run(runs_root(runs_dir), run_id)
        out = capture_in_run(run, node, duration_s, peer=peer, out=output)
    except (RunError, CaptureRefused) as exc:
        raise BadInput(str(exc)) from None
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        result = check_capture(out) if check else None
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from None
    if result is not None:
        if as_json:
            click.echo(json.dumps({"pcapng": str(out), **result.to_dict()}))
        else:
            click.echo(f"wrote {out}")
            _report(result, False)
        sys.exit(OK if result.ok else FAILED)
    click.echo(json.dumps({"pcapng": str(out)}) if as_json else f"wrote {out}")


@click.group()
def wireshark() -> None:
    """The snek Wireshark dissector: install it, or check a capture with it."""


@wireshark.command("install")
@click.option("--plugins-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="[default: ~/.local/lib/wireshark/plugins]")
@click.option("--config-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="[default: ~/.config/wireshark]")
@click.option("--json", "as_json", is_flag=True)
def install(plugins_dir: Path | None, config_dir: Path | None, as_json: bool) -> None:
    """Copy snek.lua into Wireshark's personal plugins and turn off the LBMSRS heuristic that hides snek."""
    paths = install_dissector(plugins_dir, config_dir)
    if as_json:
        click.echo(json.dumps(paths))
    else:
        click.echo(f"dissector: {paths['dissector']}\nheuristic settings: {paths['heuristic_protos']} "
                   "(lbmsrs_tcp off)\nrestart Wireshark; filter with `snek`")


@wireshark.command("check")
@click.argument("pcap", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def check(pcap: Path, as_json: bool) -> None:
    """Decode PCAP with tshark + the dissector and with the project's codec; exit 1 unless they agree (2 when
    PCAP is no capture tshark can read, or tshark is missing)."""
    try:
        result = check_capture(pcap)
    except CaptureError as exc:
        raise BadInput(str(exc)) from None
    _report(result, as_json)
    sys.exit(OK if result.ok else FAILED)
