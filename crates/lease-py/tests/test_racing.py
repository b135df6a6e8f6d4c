"""Many threads and many processes racing on the same jobs: a fence is never handed out twice,
and the interpreter is released while a call waits."""

import multiprocessing
import threading
import time

import pytest

import lease
from conftest import WriteLock

ROUNDS = 20


def _race_rounds(db, owner, rounds, out):
    """Claims each round's job once at the same `now`; puts (round, fence) for each win."""
    for r in range(rounds):
        fence = lease.claim(db, f"r{r}", owner, 1000.0 + r, 0.5)
        if fence is not None:
            out.put((r, fence))


def _queue_worker(db, owner, out):
    """Takes jobs from the queue with its own Store until none is left."""
    store = lease.Store(db)
    taken = []
    while True:
        leases = store.claim_next("default", owner, 60.0, limit=2)
        if not leases:
            break
        for held in leases:
            assert store.complete(held.id, owner, held.fence, owner)
            taken.append(held.id)
    out.put(taken)


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_processes_racing_for_each_job_get_one_fence_per_job(db, start):
    lease.init_db(db)
    for r in range(ROUNDS):
        lease.enqueue(db, f"r{r}")
    context = multiprocessing.get_context(start)
    out = context.Queue()
    procs = [
        context.Process(target=_race_rounds, args=(db, f"p{i}", ROUNDS, out)) for i in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    wins = []
    while not out.empty():
        wins.append(out.get())
    assert sorted(r for r, _ in wins) == list(range(ROUNDS))
    assert all(fence == 1 for _, fence in wins)


def test_processes_draining_one_queue_take_each_job_exactly_once(db):
    store = lease.Store(db, create=True)
    store.enqueue_many([{"id": f"j{i}"} for i in range(200)])
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    procs = [context.Process(target=_queue_worker, args=(db, f"w{i}", out)) for i in range(3)]
    for p in procs:
        p.start()
    taken = []
    for _ in procs:
        taken.extend(out.get(timeout=120))
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(taken) == sorted(f"j{i}" for i in range(200))
    assert {r.status for r in store.list(limit=1000)} == {"done"}


def test_threads_racing_on_one_job_get_one_fence_per_round(db):
    lease.init_db(db)
    for r in range(ROUNDS):
        lease.enqueue(db, f"r{r}")
    wins = []
    lock = threading.Lock()

    def race(owner):
        for r in range(ROUNDS):
            fence = lease.claim(db, f"r{r}", owner, 1000.0, 5.0)
            if fence is not None:
                with lock:
                    wins.append((r, fence))

    threads = [threading.Thread(target=race, args=(f"t{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [(r, 1) for r in range(ROUNDS)]


def test_a_call_waiting_on_a_locked_file_lets_other_threads_run(db):
    store = lease.Store(db, create=True, busy_timeout=30.0)
    store.enqueue("j")
    lock = WriteLock(db)
    finished = threading.Event()
    waiter = threading.Thread(target=lambda: (store.enqueue("k"), finished.set()))
    waiter.start()
    ticks = 0
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        ticks += 1
        time.sleep(0.01)
    # The enqueue is still waiting for the lock, and this thread ran all the while.
    assert not finished.is_set()
    assert ticks >= 20, ticks
    lock.release()
    waiter.join(30)
    assert finished.is_set()
    assert store.record("k") is not None


def _use_inherited(store, out):
    try:
        store.stats()
        out.put("worked")
    except lease.LeaseError as e:
        out.put(str(e))


def test_a_store_opened_before_a_fork_refuses_to_work_in_the_child(db):
    store = lease.Store(db, create=True)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_use_inherited, args=(store, out))
    child.start()
    said = out.get(timeout=30)
    child.join(30)
    assert "open a Store in each process" in said, said
    assert store.stats() == []
