"""The pool of requests in flight (agent/placement/pool.py) and the flush's depth order."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from agent.model.provider_tree import ProviderTree
from agent.placement.pool import Pool
from agent.placement.writer import by_depth


def test_results_come_in_order_and_at_most_size_run_at_once():
    pool = Pool(3)
    running, peak, lock = [0], [0], threading.Lock()

    def task(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return i * i

    assert pool.map(task, range(12)) == [i * i for i in range(12)]
    assert peak[0] == 3
    pool.close()


def test_every_task_ends_before_the_first_failure_is_raised():
    pool = Pool(4)
    done: list[int] = []

    def task(i: int) -> int:
        if i in (1, 5):
            raise ValueError(f"task {i}")
        time.sleep(0.01)
        done.append(i)
        return i

    with pytest.raises(ValueError, match="task 1"):
        pool.map(task, range(8))
    assert sorted(done) == [0, 2, 3, 4, 6, 7]
    pool.close()


def test_one_in_flight_runs_in_the_callers_thread():
    caller = threading.get_ident()
    assert Pool(1).map(lambda _i: threading.get_ident(), range(3)) == [caller] * 3


def test_providers_are_created_depth_by_depth():
    tree = ProviderTree()
    u = {n: str(uuid.uuid5(uuid.NAMESPACE_URL, n)) for n in ("cn", "n0", "n1", "pf0", "gpu")}
    tree.new_root("cn", u["cn"])
    tree.new_child("numa0", "cn", u["n0"])
    tree.new_child("numa1", "cn", u["n1"])
    tree.new_child("pf0", "numa0", u["pf0"])
    tree.new_child("gpu", "numa1", u["gpu"])
    order = [u[n] for n in ("cn", "n0", "pf0", "n1", "gpu")]
    assert by_depth(tree, order) == [[u["cn"]], [u["n0"], u["n1"]], [u["pf0"], u["gpu"]]]
