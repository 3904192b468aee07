"""The exit codes of every snekbed command: ``snekbed <command>`` and ``python -m pipeline.cli``.

One rule for all of them (docs/orchestrator.md, "Exit codes"):

====  ===============  ==================================================================================
code  name             meaning
====  ===============  ==================================================================================
0     ``OK``           done, and the result is good
1     ``FAILED``       the command ran and the result is a failure (a chaos step failed, pings were lost, a
                       run did not converge, a check found a difference, something was left after ``down``),
                       or work it had started failed part-way (an engine error once something was created, an
                       image that did not build, the Spark analysis)
2     ``BAD_INPUT``    refused before anything started, so there is nothing to clean up: a bad flag value or
                       combination; a malformed or invalid file (topology, scenario, run directory, capture,
                       key file: the message names the file, and the line and field where the loader knows
                       them); a run that does not exist or cannot take the command; or a request this machine
                       cannot serve (no Docker engine, an engine that is no swarm manager, no kernel shaping
                       for ``--shaping kernel``, no Bluetooth, a reference node that cannot be built, a
                       backend that cannot host a node of the topology)
3     ``INVALID``      ``snekbed chaos`` only: the run ended but a fault was not confirmed, so the verdict
                       proves nothing about it (docs/chaos.md, "Confirmed faults")
130   ``INTERRUPTED``  Ctrl-C (``up`` rolls back what it made first); not ``snekbed view``, which serves until
                       Ctrl-C: that is how it is stopped, so it exits 0 with one line (docs/view.md)
====  ===============  ==================================================================================

"This machine cannot serve it" is 2, not a code of its own: like bad input, the same command works once the
input or the machine is fixed, and nothing was made. One command keeps a code of its own, documented where it
runs: ``snekbed node`` exits 1 when it cannot bind an address it was given (it has started; the Pinecone
reference's node does the same, docs/interop.md).

click's own usage errors (an unknown option, a missing argument, ``click.BadParameter``, ``click.UsageError``)
exit 2, which is ``BAD_INPUT``.
"""

from __future__ import annotations

__all__ = ["OK", "FAILED", "BAD_INPUT", "INVALID", "INTERRUPTED"]

OK = 0
FAILED = 1
BAD_INPUT = 2
INVALID = 3
INTERRUPTED = 130
