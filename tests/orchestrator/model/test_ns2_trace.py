"""The ns-2 trace parser on a small hand-written trace (as setdest and BonnMotion write them), and its errors."""

from __future__ import annotations

import pytest

from orchestrator.model.mobility import TraceMover
from orchestrator.model.ns2_trace import TraceError, parse_ns2_trace

TRACE = """\
# nodes: 3, max time: 30.00, max x: 100.00, max y: 50.00
$node_(0) set X_ 10.0
$node_(0) set Y_ 20.0
$node_(0) set Z_ 0.0
$node_(1) set X_ 90.5
$node_(1) set Y_ 45.25
$node_(1) set Z_ 0.0
$node_(2) set X_ 0
$node_(2) set Y_ 0
$god_ set-dist 0 1 16777215
$ns_ at 0.0 "$node_(0) setdest 40.0 20.0 3.0"
$ns_ at 5.5 "$node_(1) setdest 90.5 0.0 1.0"

$ns_ at 12.0 "$node_(0) setdest 40.0 50.0 0.0"
$ns_ at 20.0 "$god_ set-dist 0 1 1"
$ns_ at 25.0 "$node_(0) setdest 10.0 20.0 30.0"
"""


def test_a_hand_written_trace() -> None:
    tracks = parse_ns2_trace(TRACE, file="moves.tcl")
    assert sorted(tracks) == [0, 1, 2]
    assert tracks[0].start == (10.0, 20.0)
    assert tracks[0].moves == [(0.0, 40.0, 20.0, 3.0), (12.0, 40.0, 50.0, 0.0), (25.0, 10.0, 20.0, 30.0)]
    assert tracks[1].start == (90.5, 45.25) and tracks[1].moves == [(5.5, 90.5, 0.0, 1.0)]
    assert tracks[2].start == (0.0, 0.0) and tracks[2].moves == []
    node0 = TraceMover((10.0, 20.0), tracks[0].moves)
    assert node0.position(5.0) == pytest.approx((25.0, 20.0))
    assert node0.position(11.0) == pytest.approx((40.0, 20.0))  # arrived at 10 s
    assert node0.position(20.0) == pytest.approx((40.0, 20.0))  # speed 0: stays
    assert node0.position(26.0) == pytest.approx((10.0, 20.0))


def test_the_topology_s_nodes_are_the_ones_it_may_name() -> None:
    tracks = parse_ns2_trace(TRACE, file="moves.tcl", nodes={0: "a", 1: "b", 2: "c"})
    assert sorted(tracks) == [0, 1, 2]
    with pytest.raises(TraceError) as info:
        parse_ns2_trace(TRACE, file="moves.tcl", nodes={0: "a", 2: "c"})
    err = info.value
    assert (err.file, err.line, err.field) == ("moves.tcl", 5, "node")
    assert str(err) == "moves.tcl:5: node: unknown node 1: the topology maps no node to it (known: 0 (a), 2 (c))"


def _error(text: str) -> TraceError:
    with pytest.raises(TraceError) as info:
        parse_ns2_trace(text, file="t.ns_movements")
    return info.value


HEAD = "$node_(0) set X_ 1\n$node_(0) set Y_ 2\n"


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ('$ns_ at -1.0 "$node_(0) setdest 1 2 3"', "time", "negative time -1 s"),
        ('$ns_ at soon "$node_(0) setdest 1 2 3"', "time", "'soon' is not a finite number"),
        ('$ns_ at 1.0 "$node_(0) setdest 1 2 -3"', "setdest.speed", "negative speed -3 m/s"),
        ('$ns_ at 1.0 "$node_(0) setdest 1 y 3"', "setdest.y", "'y' is not a finite number"),
        ('$ns_ at 1.0 "$node_(0) setdest 1 2 nan"', "setdest.speed", "'nan' is not a finite number"),
        ('$ns_ at 1.0 "$node_(0) setdest 1 2"', "command",
         "malformed command '$node_(0) setdest 1 2': expected \"$node_(i) setdest X Y SPEED\""),
        ("$node_(x) set X_ 3", "node", "node id 'x' is not a non-negative integer"),
        ("$node_(0) set X_ far", "X_", "'far' is not a finite number"),
    ],
)
def test_errors_name_the_line_and_the_field(line: str, field: str, message: str) -> None:
    err = _error(HEAD + "# a comment\n" + line + "\n")
    assert (err.file, err.line, err.field, err.message) == ("t.ns_movements", 4, field, message)
    assert str(err) == f"t.ns_movements:4: {field}: {message}"


def test_a_malformed_line() -> None:
    err = _error(HEAD + "set opt(x) 100\n")
    assert (err.line, err.field) == (3, None)
    assert str(err).startswith("t.ns_movements:3: malformed line 'set opt(x) 100': expected")


def test_a_node_without_an_initial_position() -> None:
    err = _error(HEAD + '$node_(4) set X_ 3\n$ns_ at 1 "$node_(4) setdest 1 2 3"\n')
    assert (err.line, err.field) == (3, "Y_")
    assert "node 4 has no initial position" in err.message
