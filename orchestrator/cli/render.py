"""How the command line prints results that more than one command shows (rich tables)."""

from __future__ import annotations

from orchestrator.sessions.sim import refused_sentence

__all__ = ["sim_table"]


def sim_table(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"snekbed sim: {out['topology']} ({out['nodes']} nodes, {out['links']} links, seed {out['seed']}, "
                    f"variant {out['variant']})")
    t.add_column("measure")
    t.add_column("value", justify="right")

    def fmt(x):
        return "never" if x is None else f"{x:g}"

    t.add_row("tree converged (protocol s)", fmt(out["tree_converged_s"]))
    t.add_row("snake converged (protocol s)", fmt(out["snake_converged_s"]))
    t.add_row("pings delivered", f"{out['pings']['delivered']}/{out['pings']['sent']}")
    st = out["stretch"]
    t.add_row("stretch mean / median / p95", f"{fmt(st['mean'])} / {fmt(st['median'])} / {fmt(st['p95'])}")
    if "root_kill" in out:
        rk = out["root_kill"]
        t.add_row("root killed", f"{rk['killed_name']} ({rk['killed'][:16]}…)")
        t.add_row("tree re-converged (s after kill)", fmt(rk["tree_reconverged_s"]))
        t.add_row("snake re-converged (s after kill)", fmt(rk["snake_reconverged_s"]))
        t.add_row("pings after kill", f"{rk['pings']['delivered']}/{rk['pings']['sent']}")
    if "mobility" in out:
        m = out["mobility"]
        t.add_row(f"moved ({m['model']}, {m['duration_s']:g} s)",
                  f"{m['link_ups']} links up, {m['link_downs']} down, {m['mean_speed_mps']:g} m/s")
        t.add_row("snake converged (s after the movement)", fmt(m["snake_converged_s"]))
        t.add_row("pings after the movement", f"{m['pings']['delivered']}/{m['pings']['sent']}")
    t.add_row("wall time (s)", fmt(out["wall_s"]))
    t.caption = "hops counted per link; " + out["hops_counted"].split(";")[0]
    Console().print(t)
    if refused := out.get("links_refused"):
        Console(stderr=True, highlight=False).print(refused_sentence(refused))
