"""The userspace delay line's release clock (node/peer.py, LEAD_START_S; docs/netem.md, "Userspace shaping").

A real host's timers fire late (epoll's whole milliseconds, a busy scheduler), and a frame released only once due
would leave late by as much on every shaped link. These tests run a real PeerConn on a memory stream under a
virtual clock whose timers fire a fixed time after they are due (:class:`LateClock`), so what the writer learns
and when each frame leaves are exact, not the machine's luck.
"""

from __future__ import annotations

import math
import statistics

import trio
import trio.testing

from contract.links import LinkShape
from node.config import LinkSpec, Timeouts
from node.peer import LEAD_MAX_S, LEAD_START_S, LEAD_STEP_S, PeerConn

DELAY_S = 0.020


class LateClock(trio.abc.Clock):
    """Virtual time that, once every task waits, jumps to the next deadline plus ``late_s``: a host whose timers
    always fire ``late_s`` after they are due (trio's MockClock fires them on time)."""

    def __init__(self, late_s: float) -> None:
        self.now, self.late_s = 0.0, late_s

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self.now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        if math.isfinite(deadline) and deadline > self.now:
            self.now = deadline + self.late_s
        return 0.0


def _one_way_delays(late_s: float, frames: int, gap_s: float = 0.03) -> tuple[list[float], float]:
    """Send ``frames`` frames ``gap_s`` apart over a link shaped with a 20 ms delay on a clock ``late_s`` late; each
    frame's time from queued to received, and the writer's lead at the end."""

    async def main() -> tuple[list[float], float]:
        ours, theirs = trio.testing.memory_stream_pair()
        peer = PeerConn(port=1, key=b"k" * 32, link=LinkSpec(shape=LinkShape(delay_ms=DELAY_S * 1000)), stream=ours,
                        remote="mem", timeouts=Timeouts(read_s=600, keepalive_s=500), on_frames=lambda p, f: None,
                        on_drop=lambda t, r, n: None)  # fmt: skip
        delays = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer.run)
            for _ in range(frames):
                queued = trio.current_time()
                peer.push_protocol(1, b"<frame>")
                assert bytes(await theirs.receive_some()) == b"<frame>"
                delays.append(trio.current_time() - queued)
                await trio.sleep(gap_s)
            peer.close("done")
        return delays, peer.lead_s

    return trio.run(main, clock=LateClock(late_s))


def test_timers_that_fire_late_are_learnt_and_frames_then_leave_when_due() -> None:
    late = 0.0012  # 1.2 ms: an idle host's epoll rounding and scheduling, about
    delays, lead = _one_way_delays(late, 60)
    # the first frame leaves late by what the lead does not cover yet; each timed wake steps the lead up to the
    # timers' lateness, and from then on it stays within a step of it
    assert math.isclose(delays[0], DELAY_S + late - LEAD_START_S, abs_tol=1e-9), delays[0]
    steps = math.ceil((late - LEAD_START_S) / LEAD_STEP_S)
    settled = delays[steps + 1:]
    assert all(abs(d - DELAY_S) <= LEAD_STEP_S + 1e-9 for d in settled), [round(d * 1000, 3) for d in settled]
    assert abs(statistics.median(settled) - DELAY_S) <= LEAD_STEP_S + 1e-9
    assert abs(lead - late) <= LEAD_STEP_S + 1e-9


def test_timers_that_fire_on_time_bring_the_lead_down_and_no_frame_leaves_early_for_long() -> None:
    delays, lead = _one_way_delays(0.0, 30)
    steps = math.ceil(LEAD_START_S / LEAD_STEP_S)
    assert all(DELAY_S - LEAD_START_S - 1e-9 <= d <= DELAY_S + 1e-9 for d in delays)  # early by the lead at most
    assert all(abs(d - DELAY_S) <= LEAD_STEP_S + 1e-9 for d in delays[steps + 1:])
    assert lead <= LEAD_STEP_S + 1e-9


def test_a_host_too_busy_for_any_delay_is_not_chased_past_the_bound() -> None:
    late = 0.012  # 12 ms late every time
    delays, lead = _one_way_delays(late, 150)
    assert math.isclose(lead, LEAD_MAX_S, abs_tol=1e-9)
    assert math.isclose(delays[-1], DELAY_S + late - LEAD_MAX_S, abs_tol=1e-9)  # late by what the bound leaves
