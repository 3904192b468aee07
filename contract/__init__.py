"""The shared vocabulary of snekbed: the leaf every other package may import, importing none of them.

* :mod:`contract.dataset` - the run-dataset contract: event types and their fields,
  ``SCHEMA_VERSION``, the line validators and the ``meta.json`` / ``topology.json`` models.
* :mod:`contract.frames` - the names of the wire frame types as the dataset and the
  metrics spell them.
* :mod:`contract.links` - link classes and their shapes (``contract/classes.yaml``),
  and the PROTOCOL.md section 3.4 link type names and numbers.
* :mod:`contract.exit_codes` - the exit codes of every command, one rule for all of them.
* :mod:`contract.mobility` - ``mobility.jsonl``: the positions and radio link changes of a
  run whose nodes move.

Nothing is re-exported here: import the module that defines a name. See
``docs/architecture.md`` ("Layers") for which package may import which.
"""

__all__: list[str] = []
