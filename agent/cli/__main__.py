"""``python -m agent.cli.main``: the compute-agent command."""

from agent.cli.main.main import main

raise SystemExit(main())
