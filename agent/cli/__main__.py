"""``python -m agent.cli``: the compute-agent command (the console script's entry point)."""

from agent.cli.main import main

raise SystemExit(main())
