"""The fault names of the delivery plot at their limits, without Spark: 50 faults 0.1 s apart (the most the plot
names), one at the very end of the time axis, and the lane rule itself. The real runs' plots are checked in
test_real_runs.py (check_fault_labels); this is the crowded case no recorded run here reaches."""

from __future__ import annotations

import io
import itertools

from matplotlib.image import imread

from pipeline import report_plots


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_a_label_goes_to_the_lowest_lane_it_clears() -> None:
    spans = [(0, 40), (10, 30), (45, 60), (41, 50), (20, 25), (100, 120)]
    assert report_plots.fault_lanes(spans, gap=4) == [0, 1, 0, 1, 2, 0]
    lanes = report_plots.fault_lanes(spans, gap=4)
    for (a, la), (b, lb) in itertools.combinations(zip(spans, lanes), 2):
        assert la != lb or a[1] + 4 <= b[0] or b[1] + 4 <= a[0], (a, b)


def test_fifty_faults_a_tenth_of_a_second_apart_and_one_at_the_end_never_overlap() -> None:
    timeline = [{"run_id": "r", "mode": mode, "t_bin_s": float(t), "delivery_ratio": 1.0}
                for mode in ("snek", "tree") for t in range(0, 60, 5)]
    marks = [{"t_rel_s": 10 + 0.1 * i, "action": ("partition", "kill_root", "link_down", "heal")[i % 4]}
             for i in range(49)] + [{"t_rel_s": 55.0, "action": "wakeup_the_last_fault"}]
    drawn = report_plots.plots({"convergence": [], "stretch_hist": [], "timeline": timeline, "disruptions": marks,
                                "overhead": []})
    layout = drawn.data["delivery_over_time.png"]["layout"]
    pixels = imread(io.BytesIO(drawn.png["delivery_over_time.png"]))
    height, width = pixels.shape[:2]
    labels = layout["labels"]
    assert len(labels) == 50 and len({m["lane"] for m in labels}) > 10
    assert height == round(layout["size_px"][1]) > 500  # the strip grew with its lanes
    for a, b in itertools.combinations(labels, 2):
        assert not _overlap(a["box"], b["box"]), (a, b)
    for m in labels:
        box = m["box"]
        assert 0 <= box[0] and box[2] <= width and not _overlap(box, layout["title"])
        assert not _overlap(box, layout["axes"])
    last = max(labels, key=lambda m: m["t"])
    assert last["action"] == "wakeup_the_last_fault"
    assert 0 <= last["x_px"] - last["box"][2] <= 6  # too near the right edge to start there: it ends at its line
