"""The allocation audit: each consumer of a node in one state, one decision for every
trigger (a periodic cycle, an event's instances, a new decision after a conflict), and
the record of what it remembers (docs/service.md, "Allocation audit"; docs/architecture.md,
"The audit as one sequence").

A layer of its own, under the tracker and above the Placement layer: it imports nothing of
:mod:`agent.tracker` (``lint-imports``, pyproject.toml), which drives it: the cycle
(:mod:`agent.tracker.cycle`), the targeted updates of events
(:mod:`agent.tracker.targeted`) and claims (:mod:`agent.tracker.claims`).
"""
