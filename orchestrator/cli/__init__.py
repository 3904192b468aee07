"""The ``snekbed`` command line.

Each command lives next to the code it drives and is imported only when it is
run, so ``snekbed node`` inside a container never imports the Docker SDK or
Spark. To add a command, add one line to ``COMMANDS``. Every command exits by one rule: :mod:`contract.exit_codes`
(docs/orchestrator.md, "Exit codes").
"""

from __future__ import annotations

import importlib
import importlib.metadata

import click

from node.core import implementation as core_implementation
from orchestrator.backends.reference import reference_available
from orchestrator.cli.options import BadInput

# command name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "sim": "orchestrator.cli.sim:sim",
    "chaos": "orchestrator.cli.chaos:chaos",
    "ab": "orchestrator.cli.ab:ab",
    "attack": "orchestrator.cli.attack:attack",
    "node": "node.cli:node",
    "bluetooth": "node.bluetooth_cli:bluetooth",
    "netem": "netem.cli:netem",
    "links": "orchestrator.cli.links:links",
    "image": "orchestrator.cli.image:image",
    "cluster": "orchestrator.cli.cluster:cluster",
    "up": "orchestrator.cli.run:up",
    "status": "orchestrator.cli.run:status",
    "ping": "orchestrator.cli.run:ping",
    "kill-root": "orchestrator.cli.run:kill_root",
    "down": "orchestrator.cli.run:down",
    "compose": "orchestrator.cli.run:compose",
    "analyze": "pipeline.cli:analyze",
    "spark": "pipeline.spark_cli:spark",
    "demo": "orchestrator.cli.demo:demo",
    "capture": "orchestrator.cli.capture:capture",
    "wireshark": "orchestrator.cli.capture:wireshark",
    "dashboards": "orchestrator.cli.dashboards:dashboards",
    "view": "orchestrator.cli.view:view",
    "generate": "orchestrator.cli.generate:generate",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # A slim install (the node image has no Docker SDK or Spark) still lists and explains every command.
            return _unavailable(cmd_name, exc)
        return getattr(module, attr)


def _unavailable(name: str, exc: ModuleNotFoundError) -> click.Command:
    why = f"not available in this install: needs the '{exc.name}' module"

    def fail() -> None:
        raise BadInput(f"'{name}' is {why} (pip install 'snekbed[all]')")  # this install cannot serve it

    return click.Command(name, callback=fail, help=f"({why})", short_help=f"({why})", context_settings={
        "ignore_unknown_options": True, "allow_extra_args": True})


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the package's version, whether reference nodes (spec ``pinecone``) can run here and why not,
    and which protocol core runs."""
    if not value or ctx.resilient_parsing:
        return
    ok, why = reference_available()
    reference = f"available ({why})" if ok else f"not available: {why}"
    click.echo(f"{ctx.find_root().info_name}, version {importlib.metadata.version('snekbed')}\n"
               f"reference nodes: {reference}\ncore: {core_implementation()}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version, whether reference nodes can run here, and which core runs; then exit.")
def main() -> None:
    """snekbed: a testbed for SNEK overlay routing (Pinecone spanning tree + virtual snake)."""


if __name__ == "__main__":
    main()
