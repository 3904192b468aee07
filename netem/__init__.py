"""Link shaping for snekbed: pure planners, a capability probe, measurement primitives
and the userspace shaping model the node's transports use.

The link classes they shape with are shared vocabulary (``contract.links``). Applying
shaping to a run's containers and the ``snekbed links`` commands are run-aware and live
in the orchestrator (``orchestrator.backends.shaping``, ``orchestrator.cli.links``).

The CLI (``netem.cli``) and the probe (``netem.probe``, which runs commands) are not
imported here, so importing ``netem`` stays cheap and side-effect free.
"""

from netem.errors import NetemError, PlanError
from netem.plan import (
    KernelPartialPlan,
    LinkPlan,
    ShapingBackend,
    netem_argv,
    plan_clear,
    plan_ingress_ifb,
    plan_kernel_netem,
    plan_kernel_partial,
    plan_link,
    plan_userspace,
    userspace_part,
)
from netem.userspace import LinkShaper, ShaperStats, Verdict, shaper_factory

__all__ = [
    "KernelPartialPlan",
    "LinkPlan",
    "LinkShaper",
    "NetemError",
    "PlanError",
    "ShaperStats",
    "ShapingBackend",
    "Verdict",
    "netem_argv",
    "plan_clear",
    "plan_ingress_ifb",
    "plan_kernel_netem",
    "plan_kernel_partial",
    "plan_link",
    "plan_userspace",
    "shaper_factory",
    "userspace_part",
]
