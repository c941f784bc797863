"""Independent Placement requests in parallel, at most N in flight (``max_concurrent_requests``).

What may run together is decided by the callers: providers of one depth of a
cold sync (a child is created after its parent), the inventories, traits or
aggregates of different providers, the allocations of different consumers.
A generation conflict is still retried by the provider's or consumer's own
task, one at a time (:mod:`agent.placement.conflicts`). With one in flight
nothing is threaded: the tasks run in the caller's thread, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Pool:
    """Runs tasks with at most ``size`` at once (a thread pool made on first use).

    Args:
        size: tasks at once at most; 1 runs tasks in the caller's thread.
        name: the threads' name prefix (in log lines).
    """

    def __init__(self, size: int = 1, name: str = "placement") -> None:
        self.size = max(1, size)
        self.name = name
        self._executor: ThreadPoolExecutor | None = None

    def map(self, task: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[task(item) for item in items]``, up to :attr:`size` at once, results in order.

        Every task runs to its end even when another fails, so what was
        written is known; then the first failure (in ``items``' order) is raised.

        Raises:
            BaseException: whatever the first failing task raised.
        """
        listed = list(items)
        if self.size == 1 or len(listed) < 2:
            return [task(item) for item in listed]
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.size, thread_name_prefix=self.name)
        futures = [self._executor.submit(task, item) for item in listed]
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]

    def close(self) -> None:
        """Stop the threads (after the running tasks)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
