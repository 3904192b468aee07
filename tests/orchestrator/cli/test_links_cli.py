"""``snekbed links``: every command exists and says it needs a running topology."""

from __future__ import annotations

from click.testing import CliRunner

from orchestrator.cli import main


def test_links_commands_exist_and_ask_for_a_topology(tmp_path):
    for sub in ("apply", "show", "clear", "check"):
        result = CliRunner().invoke(main, ["links", sub], env={"SNEKBED_RUNS_DIR": str(tmp_path)})  # no runs there
        assert result.exit_code == 2  # no run: refused before anything (contract.exit_codes)
        assert "needs a running topology: see `snekbed up`" in result.output
