"""``compute-agent import-nova``: nova's cell database becomes providers and allocations.

The migration the specs describe (compute-node-inventory.rst and
resource-providers-allocations.txt) done once, offline, for operators with a
nova cell database and an empty or stale Placement:

- :mod:`~agent.nova_import.db`: read-only connection, the rows read;
- :mod:`~agent.nova_import.novajson`: nova's versioned-object JSON columns;
- :mod:`~agent.nova_import.refusal`: a row the import will not use, and why;
- :mod:`~agent.nova_import.nodes` / :mod:`~agent.nova_import.instances`: rows
  into the plain records drivers produce (``drivers.records``), so the
  agent's own layout and allocation planner decide the tree and allocations;
- :mod:`~agent.nova_import.shape`: one node's tree (the agent's layout plus nova's extras);
- :mod:`~agent.nova_import.flow`: the import through :class:`agent.placement.report.ReportClient`;
- :mod:`~agent.nova_import.render`: dry-run diff and summary lines.

docs/import-nova.md maps every column.
"""
