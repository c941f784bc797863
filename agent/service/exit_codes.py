"""Exit codes of ``compute-agent`` and of its service (``compute-agent run``).

The service decides the fatal ones (a reshape needed outside start-up, a
reshape that failed); the command line returns the same numbers, so they live
at the service layer and the CLI imports them from here.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_DRIFT = 3
"""``show --check``: Placement differs from what the driver reports, or a field is yielded to
another writer that disagrees (docs/service.md, "When another writer disagrees")."""
EXIT_RESHAPE_NEEDED = 4
"""The tree must change shape outside start-up: restart the service (it reshapes at start-up)."""
EXIT_RESHAPE_FAILED = 5
"""``POST /reshaper`` failed; Placement is unchanged (docs/reshape.md says what to do)."""

FATAL_ADVICE = {
    EXIT_RESHAPE_NEEDED: (
        "the provider tree must change shape, which is only done at start-up: restart the "
        "service (systemd does, Restart=on-failure) and it reshapes; see docs/reshape.md"
    ),
    EXIT_RESHAPE_FAILED: (
        "POST /reshaper failed and Placement is unchanged; the service stays stopped. Run "
        "'compute-agent reshape --dry-run' to see the moves, fix the cause (see the error "
        "above and docs/reshape.md), then start the service"
    ),
}
"""What the operator should do after each fatal exit (logged at CRITICAL before exiting)."""
