"""``snekbed chaos --repeat N``: the same scenario N times, and how often each step's verdict agreed.

In process on the virtual clock the same seed gives the same run (``trace_sha256``); on Docker it does not, and
one run's verdict is worth what its agreement with the next runs says. :func:`agreement` sums N run documents:
per step, the verdicts seen with their counts and the agreement (the share of runs that gave the most common
verdict); for the runs, the verdicts, the distinct trace hashes, and the worst verdict, whose exit code the
command exits with (:data:`EXIT_CODES`: pass 0, fail 1, invalid 3; the worst is the highest code).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from contract.exit_codes import FAILED, INVALID, OK

__all__ = ["EXIT_CODES", "agreement", "agreement_table", "exit_code", "repeat"]

#: the command's exit code for a run's verdict (docs/chaos.md; the rule: contract.exit_codes): a verdict not listed
#: is a failure
EXIT_CODES = {"pass": OK, "fail": FAILED, "invalid": INVALID}


def exit_code(verdict: str) -> int:
    return EXIT_CODES.get(verdict, FAILED)


def repeat(run_once: Callable[[int], dict[str, Any]], n: int) -> dict[str, Any]:
    """``run_once(k)`` for k in 0..n-1 (each the ``--json`` document of one run), summed by :func:`agreement`."""
    return agreement([run_once(k) for k in range(n)])


def _counts(values: Sequence[str]) -> tuple[dict[str, int], float]:
    c = Counter(values)
    top = max(c.values()) if c else 0
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))), round(top / len(values), 4) if values else 1.0


def agreement(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``--repeat`` document of ``runs`` (module docstring)."""
    first = runs[0]
    steps = []
    for i, step in enumerate(first["steps"]):
        seen = [r["steps"][i]["verdict"] if i < len(r["steps"]) else "missing" for r in runs]
        verdicts, share = _counts(seen)
        row: dict[str, Any] = {"index": i, "action": step["action"], "verdicts": verdicts, "agreement": share}
        broke = Counter(k for r in runs if i < len(r["steps"])
                        for k, v in r["steps"][i].get("invariants", {}).items() if not v["ok"])  # fmt: skip
        if broke:
            row["invariants_failed"] = dict(sorted(broke.items()))
        steps.append(row)
    verdicts, share = _counts([r["verdict"] for r in runs])
    worst = max((r["verdict"] for r in runs), key=exit_code)
    hashes = Counter(r.get("trace_sha256") for r in runs if r.get("trace_sha256"))
    return {
        "scenario": first["scenario"],
        "backend": first["backend"],
        "seed": first["seed"],
        "repeat": len(runs),
        "verdict": worst,
        "verdicts": verdicts,
        "agreement": share,
        "steps_agreement": min((s["agreement"] for s in steps), default=1.0),
        "steps": steps,
        "trace_sha256": dict(hashes),
        "runs": [{k: r.get(k) for k in ("verdict", "failed_steps", "trace_sha256", "run_dir", "protocol_time_s")}
                 for r in runs],  # fmt: skip
    }


def agreement_table(doc: dict[str, Any]) -> str:
    """The ``--repeat`` document as the table the command prints without ``--json``."""
    lines = [f"{'step':>4}  {'action':<12} {'agreement':>9}  verdicts (of {doc['repeat']} runs)"]
    for s in doc["steps"]:
        seen = ", ".join(f"{v} {n}" for v, n in s["verdicts"].items())
        failed = s.get("invariants_failed")
        why = "  failed: " + ", ".join(f"{k} {n}" for k, n in failed.items()) if failed else ""
        lines.append(f"{s['index']:>4}  {s['action']:<12} {s['agreement']:>9.0%}  {seen}{why}")
    runs = ", ".join(f"{v} {n}" for v, n in doc["verdicts"].items())
    hashes = len(doc["trace_sha256"])
    lines.append(f"runs: {runs}; worst {doc['verdict']}; run verdicts agree {doc['agreement']:.0%}, every step "
                 f"at least {doc['steps_agreement']:.0%}; {hashes} distinct trace hash(es)")  # fmt: skip
    return "\n".join(lines)
