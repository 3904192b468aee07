"""`snekbed netem ...` through click's CliRunner and the real lazy CLI."""

from __future__ import annotations

import json

from click.testing import CliRunner

from contract.links import default_classes
from orchestrator.cli import main

PROBE_KEYS = {"netem", "tbf", "htb", "ifb", "iptables_statistic", "backend"}


def test_netem_probe_json_prints_exactly_the_documented_keys():
    result = CliRunner().invoke(main, ["netem", "probe", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == PROBE_KEYS
    assert all(isinstance(data[k], bool) for k in PROBE_KEYS - {"backend"})
    assert data["backend"] in ("kernel-netem", "kernel-partial", "userspace")
    assert result.stderr == "" or result.stderr.startswith("note: ")  # the choice is never silent


def test_netem_probe_table():
    result = CliRunner().invoke(main, ["netem", "probe"])
    assert result.exit_code == 0, result.output
    for key in PROBE_KEYS:
        assert key in result.stdout


def test_netem_classes_json_round_trips_the_table():
    result = CliRunner().invoke(main, ["netem", "classes", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == set(default_classes())
    assert data["bluetooth"]["shape"]["rate_mbit"] == 1.5 and data["bluetooth"]["link_type"] == "bluetooth"
