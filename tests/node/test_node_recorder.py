"""The flight recorder of a real node on 127.0.0.1: ``GET /recorder`` (JSON lines of the run-dataset contract) and
``GET /recorder.pcapng`` after a few pings, the pcapng read by tshark with the project's dissector (0 malformed,
frame for frame as the project's codec reads it), clear errors for a malformed request, 404 when it is off."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from nodeproc import Cluster, wait_until

from contract.dataset import validate_record
from contract.recorder import RECORDER_FIELDS
from node.config import ConfigError, NodeConfig
from node.core.crypto import Identity
from orchestrator.tools.capture import TSHARK_ARGS, check_capture, dissector_path
from tests.ci import need


@pytest.fixture
def pair(tmp_path: Path):
    with Cluster(tmp_path, tag="recorder") as c:
        a = c.start("a")
        b = c.start("b", "--peer", a.uri("lan"))
        wait_until(lambda: a.state()["peers"] and b.state()["peers"], 15, what="a and b peered")
        yield c, a, b


def test_a_node_serves_its_recorder_as_contract_lines_and_as_pcapng(pair, tmp_path: Path) -> None:
    c, a, b = pair
    assert wait_until(lambda: a.ping(b.key, count=1, timeout_s=2)["received"] == 1, 15, what="a ping answered")
    assert a.ping(b.key, count=3, timeout_s=2)["received"] == 3
    r = a._client.get(a.admin + "/recorder")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    for line in r.text.splitlines():
        assert validate_record(line, RECORDER_FIELDS) is None, line
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert {x["node"] for x in lines} == {a.key.hex()} and {x["node_name"] for x in lines} == {"a"}
    pings = [x for x in lines if x["kind"] == "sent" and x["ping"] == "ping" and x["dst_key"] == b.key.hex()]
    pongs = [x for x in lines if x["kind"] == "received" and x["ping"] == "pong" and x["src_key"] == b.key.hex()]
    assert len(pings) >= 4 and len(pongs) >= 4, lines
    assert all(x["length"] > 75 and x["port"] == 1 for x in pings + pongs)
    assert any(x["kind"] == "event" and x["event"] == "peer_up" for x in lines)
    assert [x["mono_s"] for x in lines] == sorted(x["mono_s"] for x in lines)
    recent = [json.loads(x) for x in a._client.get(a.admin + "/recorder?last_s=0.05").text.splitlines()]
    assert all(x["age_s"] <= 0.05 for x in recent)  # only the last 50 ms
    p = a._client.get(a.admin + "/recorder.pcapng")
    assert p.status_code == 200 and p.headers["content-type"] == "application/x-pcapng"
    pcap = tmp_path / "a.pcapng"
    pcap.write_bytes(p.content)
    _decodes_cleanly(pcap, pings=len(pings))


def _decodes_cleanly(pcap: Path, pings: int) -> None:
    tshark = shutil.which("tshark")
    need(tshark is not None, "tshark is not installed (apt-get install -y tshark; scripts/setup.sh does)")
    result = check_capture(pcap)
    assert result.ok and result.malformed == 0, result.to_dict()
    assert result.by_type.get("traffic", 0) >= 2 * pings and result.by_type.get("tree_announcement", 0) >= 1
    out = subprocess.run([str(tshark), "-r", str(pcap), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS,
                          "-Y", "snek", "-T", "fields", "-e", "frame.comment", "-e", "snek.type"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    comments = [ln.split("\t")[0] for ln in out.splitlines()]
    assert any(cm.startswith("sent port 1") for cm in comments) and any(cm.startswith("received port 1")
                                                                        for cm in comments), comments
    assert any("payload bytes not kept" in cm for cm in comments)


def test_a_malformed_request_gets_a_clear_error_and_an_off_recorder_a_404(pair) -> None:
    c, a, _ = pair
    for query, words in (("?last_s=soon", "'soon' is not a number of seconds"), ("?last_s=-2", "above 0"),
                         ("?last_s=nan", "above 0"), ("?since=1", "unknown query parameter 'since'")):
        for path in ("/recorder", "/recorder.pcapng"):
            r = a._client.get(a.admin + path + query)
            assert r.status_code == 400 and words in r.json()["error"], (path, query, r.text)
    off = c.start("off", "--recorder-s", "0")
    r = off._client.get(off.admin + "/recorder")
    assert r.status_code == 404 and "--recorder-s 0" in r.json()["error"]
    assert off.get("/healthz")["ok"] is True


def test_recorder_options_are_checked_when_the_config_is_built() -> None:
    ident = Identity(bytes(32))
    assert NodeConfig(identity=ident).recorder_s == 30.0
    with pytest.raises(ConfigError, match="--recorder-s"):
        NodeConfig(identity=ident, recorder_s=-1)
    with pytest.raises(ConfigError, match="--recorder-max-entries"):
        NodeConfig(identity=ident, recorder_max_entries=0)
