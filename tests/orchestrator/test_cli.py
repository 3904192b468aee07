"""The lazy command group: every command is listed, and a missing optional module never breaks --help."""

from __future__ import annotations

from click.testing import CliRunner

from orchestrator import cli


def test_help_lists_every_contract_command() -> None:
    res = CliRunner().invoke(cli.main, ["--help"])
    assert res.exit_code == 0, res.output
    for name in ("sim", "node", "up", "status", "ping", "kill-root", "down", "compose", "netem", "links", "image", "analyze"):
        assert name in res.output


def test_unavailable_command_is_listed_and_explains_itself(monkeypatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "ghost", "no_such_module_for_snekbed:cmd")
    runner = CliRunner()
    res = runner.invoke(cli.main, ["--help"])
    assert res.exit_code == 0 and "ghost" in res.output
    res = runner.invoke(cli.main, ["ghost", "--anything"])
    assert res.exit_code == 1
    assert "needs the 'no_such_module_for_snekbed' module" in res.output
