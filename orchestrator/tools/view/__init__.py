"""``snekbed view``: a run as a picture in the browser, live or replayed (docs/view.md).

* :mod:`.layout`: where nodes are drawn (a deterministic force-directed layout);
* :mod:`.frames`: the graph document and the per-moment frame the page draws;
* :mod:`.timeline`: replay, rebuilding every node's state at any instant from a run directory;
* :mod:`.live`: live sources, a Docker run's admin APIs or an in-process network's routers;
* :mod:`.app`: the starlette app (page, JSON API, server-sent events);
* :mod:`.serve`: serving a replay or a live Docker run until interrupted, and ``--check``'s summary;

the command is :mod:`orchestrator.cli.view`.
"""
