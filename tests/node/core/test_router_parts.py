"""The router's parts (node.core.router): four objects the Router holds and calls with explicit arguments.

None of them holds the router; the SNEK variant sees it through a RouterHost over the tree and the outbox;
each part has its own next_deadline and the router's is the earliest of them (with the SNEK maintenance tick
and the ping service's); what a change of the tree entails comes back as effect flags.
"""

from __future__ import annotations

from typing import Any

from routerkit import Bench, chain, identities

from node.core import wire
from node.core.broadcast import Broadcasts
from node.core.forward import Forwarding
from node.core.host import RouterHost
from node.core.router import Router
from node.core.tree import BOOTSTRAP_SOON, DEADLINE_MOVED, PEERS_CHANGED, ROOT_KEY_CHANGED, WAKE, Tree
from node.core.types import Root

K = identities(6, "parts")
ME, A, B, R = K[2], K[1], K[3], K[5]


def _attributes(obj: object) -> list[Any]:
    """Every attribute value of ``obj`` reachable by name (compiled classes have no ``__dict__``)."""
    values = []
    for name in dir(obj):
        if name.startswith("__"):
            continue
        try:
            values.append(getattr(obj, name))
        except AttributeError:
            continue
    return values


def _deadlines(r: Router) -> dict[str, float]:
    return {"tree": r.tree.next_deadline(), "snek tick": r.next_maintain, "snek": r.snek.next_deadline(),
            "forwarding": r.forwarding.next_deadline(), "broadcasts": r.broadcasts.next_deadline(),
            "ping": r.ping.next_deadline()}  # fmt: skip


def test_the_router_holds_four_parts_and_none_holds_the_router() -> None:
    b = Bench(ME)
    b.join(A, [R])
    r = b.r
    assert (type(r.tree), type(r.broadcasts), type(r.forwarding)) == (Tree, Broadcasts, Forwarding)
    host = r.snek.host  # type: ignore[attr-defined]
    assert type(host) is RouterHost
    for part in (r.tree, r.broadcasts, r.forwarding, r.snek, host):
        assert all(value is not r for value in _attributes(part)), type(part).__name__


def test_the_host_reads_the_tree_and_writes_the_routers_outbox() -> None:
    b = Bench(ME)
    p = b.join(A, [R])
    host = b.r.snek.host  # type: ignore[attr-defined]
    assert host.parent == b.r.tree.parent == p and host.root == b.r.tree.root == Root(R.public_key, 1)
    assert host.coords == b.r.tree.coords and host.peers is b.r.peers and host.counters is b.r.counters
    assert host.tree_next_hop(b.r.tree.coords, 0) == b.r.tree.next_hop(b.r.tree.coords, 0)
    b.r.drain()
    host.outbox.append((p, "x"))
    assert b.r.drain().sends == [(p, "x")]
    host.emit("probe", n=1)
    assert b.r.drain().events == [("probe", {"n": 1})]


def test_the_routers_deadline_is_the_earliest_of_its_parts() -> None:
    b = Bench(ME)
    r = b.r
    assert r.next_deadline() == min(_deadlines(r).values())
    p = b.join(A, [R])
    b.at(0.5)
    r.ping.start(B.public_key, b.now)  # its 5 s timeout is the ping service's deadline
    assert r.next_deadline() == min(_deadlines(r).values())
    b.announce(p, chain([R, ME, A]))  # the parent's announcement holds our key: root, and hold for 1 s (§5.6)
    assert r.tree.next_deadline() == r.tree.hold_until == b.now + r.t.reparent_hold_s
    assert r.next_deadline() == min(_deadlines(r).values())
    b.at(b.now + 10.0)
    assert r.tree.hold_until is None and r.next_deadline() == min(_deadlines(r).values())


def test_tree_effects_say_what_the_router_must_do() -> None:
    b = Bench(ME)
    tree = b.r.tree
    a = b.connect(A)
    parsed = tree.check_announcement(b.r.peers[a], wire.announcement_frame(chain([R, A])))
    assert not isinstance(parsed, str)
    fx = tree.announcement_received(b.r.peers[a], parsed, b.now)  # a stronger root: our parent, a new root key
    assert fx == PEERS_CHANGED | ROOT_KEY_CHANGED | WAKE and tree.parent == a
    bad = tree.check_announcement(b.r.peers[a], wire.announcement_frame(chain([R, B])))
    assert bad == "announcement_last_hop_not_peer"
    assert tree.maintenance(b.now) == DEADLINE_MOVED


def test_losing_the_parent_reports_a_reselection_or_becoming_root() -> None:
    b = Bench(ME)
    tree = b.r.tree
    a, other = b.join(A, [R]), b.join(B, [R])
    assert tree.parent == a

    def gone(port: int) -> int:  # what Router.remove_peer asks of the tree
        b.r.peers[port].up = False
        tree.peer_down(port)
        b.r.peers[port].forget()
        return tree.peer_removed(port, b.now)

    # The parent's announcement is forgotten first, so the root is our own when §5.5 chooses again: R through B
    # is a new root key (the coordinates cache goes), and the SNEK variant bootstraps soon.
    assert gone(a) == PEERS_CHANGED | ROOT_KEY_CHANGED | BOOTSTRAP_SOON and tree.parent == other
    assert gone(other) == PEERS_CHANGED | DEADLINE_MOVED and tree.parent is None  # no one left: root again
