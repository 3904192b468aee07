"""Link shaping for snekbed: link classes as data, pure planners, a capability probe
and the userspace shaping model the node's transports use.

The CLI (``netem.cli``) and the probe (``netem.probe``, which runs commands) are not
imported here, so importing ``netem`` stays cheap and side-effect free.
"""

from netem.classes import (
    DEFAULT_QUEUE_PKTS,
    LINK_TYPE_NUMBERS,
    LinkClass,
    LinkShape,
    LinkType,
    ShapeRationale,
    default_classes,
    link_type_number,
    load_classes,
    merge_classes,
    resolve_class,
)
from netem.errors import InvalidLinkClass, NetemError, PlanError, UnknownLinkClass
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
    "DEFAULT_QUEUE_PKTS",
    "LINK_TYPE_NUMBERS",
    "InvalidLinkClass",
    "KernelPartialPlan",
    "LinkClass",
    "LinkPlan",
    "LinkShape",
    "LinkShaper",
    "LinkType",
    "NetemError",
    "PlanError",
    "ShapeRationale",
    "ShaperStats",
    "ShapingBackend",
    "UnknownLinkClass",
    "Verdict",
    "default_classes",
    "link_type_number",
    "load_classes",
    "merge_classes",
    "netem_argv",
    "plan_clear",
    "plan_ingress_ifb",
    "plan_kernel_netem",
    "plan_kernel_partial",
    "plan_link",
    "plan_userspace",
    "resolve_class",
    "shaper_factory",
    "userspace_part",
]
