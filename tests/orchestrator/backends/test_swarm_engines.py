"""orchestrator.backends.swarm_engines without a swarm: ``$SNEKBED_SWARM_ENGINES`` and the manager's own node."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.backends.swarm_engines import ENGINES_ENV, SwarmEngineError, SwarmEngines, parse_engines


def test_engines_parse_hostname_url_pairs() -> None:
    assert parse_engines(" h1=ssh://me@h1 , h2=tcp://10.0.0.2:2376,") == {"h1": "ssh://me@h1",
                                                                         "h2": "tcp://10.0.0.2:2376"}
    assert parse_engines("") == {}


@pytest.mark.parametrize("text", ["h1", "=tcp://x:1", "h1=nourl", "h1=ssh://a,h2"])
def test_a_bad_pair_names_the_variable_and_the_pair(text: str) -> None:
    with pytest.raises(SwarmEngineError, match=rf"\${ENGINES_ENV}: .* is not HOSTNAME=URL"):
        parse_engines(text)


class _Api:
    base_url = "http+docker://localhost"

    def info(self) -> dict[str, Any]:
        return {"Swarm": {"NodeID": "n-m"}}

    def nodes(self) -> list[dict[str, Any]]:
        return [{"ID": "n-m", "Description": {"Hostname": "m"}}, {"ID": "n-1", "Description": {"Hostname": "h1"}}]


class _Manager:
    api = _Api()


def test_the_managers_own_node_is_the_manager_and_an_unknown_one_says_how_to_name_it(monkeypatch: Any) -> None:
    monkeypatch.setenv(ENGINES_ENV, "")
    manager: Any = _Manager()
    engines = SwarmEngines(manager)
    assert engines.client("m") is manager
    with pytest.raises(SwarmEngineError, match=rf"swarm node 'h1': set \${ENGINES_ENV}"):
        engines.client("h1")  # no snekbed cluster has this manager
