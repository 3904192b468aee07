"""The ``snekbed`` command line.

Each command lives next to the code it drives and is imported only when it is
run, so ``snekbed node`` inside a container never imports the Docker SDK or
Spark. To add a command, add one line to ``COMMANDS``.
"""

from __future__ import annotations

import importlib

import click

from node.core import implementation as core_implementation

# command name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "sim": "orchestrator.sim_cli:sim",
    "chaos": "orchestrator.chaos.cli:chaos",
    "ab": "orchestrator.ab_cli:ab",
    "node": "node.cli:node",
    "bluetooth": "node.bluetooth_cli:bluetooth",
    "netem": "netem.cli:netem",
    "links": "orchestrator.links_cli:links",
    "image": "orchestrator.image:image",
    "up": "orchestrator.run_cli:up",
    "status": "orchestrator.run_cli:status",
    "ping": "orchestrator.run_cli:ping",
    "kill-root": "orchestrator.run_cli:kill_root",
    "down": "orchestrator.run_cli:down",
    "compose": "orchestrator.run_cli:compose",
    "analyze": "pipeline.cli:analyze",
    "demo": "orchestrator.demo:demo",
    "capture": "orchestrator.capture.cli:capture",
    "wireshark": "orchestrator.capture.cli:wireshark",
    "dashboards": "orchestrator.dashboards:dashboards",
    "view": "orchestrator.view.cli:view",
    "generate": "orchestrator.generate_cli:generate",
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
        raise click.ClickException(f"'{name}' is {why} (pip install 'snekbed[all]')")

    return click.Command(name, callback=fail, help=f"({why})", short_help=f"({why})", context_settings={
        "ignore_unknown_options": True, "allow_extra_args": True})


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="snekbed", message=f"%(prog)s, version %(version)s\ncore: {core_implementation()}")
def main() -> None:
    """snekbed: a testbed for SNEK overlay routing (Pinecone spanning tree + virtual snake)."""


if __name__ == "__main__":
    main()
