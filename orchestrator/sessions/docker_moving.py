"""``snekbed up --backend docker`` of a topology whose nodes move (docs/mobility.md, "On Docker").

``up`` brings the nodes up on their fixed links as for any topology, then moves them on the wall clock for the
topology's ``movement.duration_s`` (orchestrator.backends.docker_mobility.DockerRadioLinks: radio peerings made and
closed through the nodes' admin APIs as the radio graph says, with their link class's shaping), as ``snekbed sim``
and ``up --backend inproc`` do on the virtual clock. Once the nodes stand still, the network is judged on the
graph where they stopped (the fixed links and the radio links made then) and ``up`` returns: the nodes stay where
they stopped, their radio links up, until ``snekbed down``. The radio links at the end go into meta.json
(``mobility.radio_links_at_end``), so ``snekbed status`` and ``ping`` of the run judge the same graph; the
movement is in the run's ``mobility.jsonl`` (positions and link changes with their cause, the run-dataset
contract), as every moving run's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from contract.links import resolve_class

from orchestrator.backends.docker_mobility import DockerRadioLinks
from orchestrator.backends.docker_net import AddressPlan
from orchestrator.backends.docker_observe import AdminClient
from orchestrator.backends.docker_session import DockerSession
from orchestrator.backends.radio_links import MobilityLog
from orchestrator.model.mobility_loaders import read_traces
from orchestrator.model.mobility_spec import build_world
from orchestrator.model.runs import RunDir
from orchestrator.model.topology import Topology

__all__ = ["move_nodes"]

POLL_S = 0.05  # how often the movement's end and the changes in flight are looked at
ADMIN_WORKERS = 32  # the radio changes' admin calls at once (DockerRadioLinks limits its own threads too)


def move_nodes(topology: Topology, run: RunDir, session: DockerSession, plan: AddressPlan, *, seed: int,
               progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Move ``topology``'s nodes (``seed`` draws their movements, as in process) for its movement's duration and
    leave them where they stopped; returns the ``mobility`` report (``snekbed sim --json``'s keys, the effect
    delays of the radio changes, ``moved_s`` and ``radio_links_at_end``) and records it in meta.json.
    ``progress("moving nodes", seconds moved, seconds to move)`` about four times a second."""
    world = build_world(topology, seed, read_traces(topology))
    classes = {r.name: resolve_class(r.link_class, topology.classes or None) for r in world.radios}
    run.update_meta(mobility=world.meta())
    log = MobilityLog(Path(run.path), run.run_id, time.time() - time.monotonic())
    admin = AdminClient(session.endpoints, timeout_s=3.0, workers=ADMIN_WORKERS)
    radio = DockerRadioLinks(world, classes, log, topology=topology, plan=plan, admin=admin)
    total = int(round(world.duration_s))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            radio.start()
            nursery.start_soon(radio.run)
            while radio.running or radio.busy:  # the last tick stops the movement; its changes are carried out
                if progress is not None:
                    progress("moving nodes", min(total, int(radio.now() - radio.t0)), total)
                await trio.sleep(POLL_S)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        log.close()
        admin.close()
    if progress is not None:
        progress("moving nodes", total, total)
    made = radio.made_links()
    report = {**radio.report(), "moved_s": round(radio.moved_s(), 3),
              "radio_links_at_end": [list(link) for link in made]}
    run.update_meta(mobility={**world.meta(), "radio_links_at_end": report["radio_links_at_end"]})
    session.radio_edges = tuple((a, b, classes[r].name) for a, b, r in made)
    return report
