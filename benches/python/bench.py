"""The Python package's benchmark rows, side by side in one run (``cargo xtask bench --python``).

1. The problem statement's functions: ``lease`` against the straightforward ``service.py``
   written with Python's ``sqlite3`` (the same contract: a connection per call, ``BEGIN
   IMMEDIATE`` around each read-and-write, SQLite's defaults: rollback journal,
   ``synchronous=FULL``). Each job is enqueue, claim, renew, complete; the two alternate, three
   runs each, in fresh files.
2. A Python ``lease.Worker`` with a handler that returns at once, against the Rust runtime
   with an immediate handler (the report's row ``worker runtime, FULL@W``, run by the report
   binary given as ``--report``), at 1 and 16 workers, the same number of jobs, alternating.

Prints one Markdown table; ratios are of medians measured in this run.
"""

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import tempfile
import time

import lease


class PlainService:
    """The statement's ``service.py``, as one would write it with ``sqlite3``."""

    @staticmethod
    def _connect(path):
        conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        return conn

    def init_db(self, path):
        conn = self._connect(path)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS jobs(id TEXT PRIMARY KEY, owner TEXT, until REAL NOT "
            "NULL DEFAULT 0, fence INTEGER NOT NULL DEFAULT 0, result TEXT, done INTEGER NOT "
            "NULL DEFAULT 0)"
        )
        conn.close()

    def enqueue(self, path, job_id):
        conn = self._connect(path)
        try:
            return conn.execute("INSERT OR IGNORE INTO jobs(id) VALUES (?)", (job_id,)).rowcount == 1
        finally:
            conn.close()

    def claim(self, path, job_id, owner, now, ttl):
        if ttl <= 0:
            raise ValueError("ttl must be > 0")
        conn = self._connect(path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT until, fence, done FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row[2] or row[0] > now:
                conn.execute("ROLLBACK")
                return None
            fence = row[1] + 1
            conn.execute(
                "UPDATE jobs SET owner = ?, until = ?, fence = ? WHERE id = ?",
                (owner, now + ttl, fence, job_id),
            )
            conn.execute("COMMIT")
            return fence
        finally:
            conn.close()

    def _write(self, path, job_id, owner, fence, now, sql, args):
        conn = self._connect(path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT owner, until, fence, done FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row[0] != owner or row[2] != fence or row[3] or not row[1] > now:
                conn.execute("ROLLBACK")
                return False
            conn.execute(sql, args)
            conn.execute("COMMIT")
            return True
        finally:
            conn.close()

    def renew(self, path, job_id, owner, fence, now, ttl):
        if ttl <= 0:
            raise ValueError("ttl must be > 0")
        return self._write(path, job_id, owner, fence, now, "UPDATE jobs SET until = ? WHERE id = ?", (now + ttl, job_id))

    def complete(self, path, job_id, owner, fence, now, result):
        return self._write(
            path, job_id, owner, fence, now, "UPDATE jobs SET result = ?, done = 1 WHERE id = ?", (result, job_id)
        )


def statement_run(api, jobs):
    """Seconds for ``jobs`` jobs of enqueue, claim, renew and complete through ``api``."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "jobs.db")
        api.init_db(path)
        start = time.perf_counter()
        for i in range(jobs):
            job = f"j{i}"
            assert api.enqueue(path, job)
            fence = api.claim(path, job, "w", 100.0, 30.0)
            assert api.renew(path, job, "w", fence, 101.0, 30.0)
            assert api.complete(path, job, "w", fence, 102.0, "r")
        return time.perf_counter() - start


class StoreApi:
    """The same calls through one open ``lease.Store`` (a pool, opened once)."""

    def __init__(self):
        self.store = None

    def init_db(self, path):
        self.store = lease.Store(path, create=True)

    def enqueue(self, path, job_id):
        return self.store.enqueue(job_id)

    def claim(self, path, job_id, owner, now, ttl):
        return self.store.claim(job_id, owner, ttl, now=now).fence

    def renew(self, path, job_id, owner, fence, now, ttl):
        return self.store.renew(job_id, owner, fence, ttl, now=now)

    def complete(self, path, job_id, owner, fence, now, result):
        return self.store.complete(job_id, owner, fence, result, now=now)


def python_worker_run(jobs, workers):
    """Jobs a second of a Python worker with an immediate handler, on a fresh FULL store."""
    with tempfile.TemporaryDirectory() as d:
        store = lease.Store(os.path.join(d, "queue.db"), create=True)
        for start in range(0, jobs, 1000):
            store.enqueue_many([{"id": f"j{i:08}"} for i in range(start, min(jobs, start + 1000))])
        worker = lease.Worker(
            store, lambda job: "r", owner="bench", ttl=60.0, concurrency=workers,
            exit_when_empty=True,
        )
        begin = time.perf_counter()
        summary = worker.run()
        seconds = time.perf_counter() - begin
        assert summary.completed == jobs, summary
        return jobs / seconds


def rust_worker_run(report, jobs, workers):
    """Jobs a second of the Rust runtime with an immediate handler (the report's row)."""
    row = f"worker runtime, FULL@{workers}"
    out = subprocess.run(
        [report, "--bench", "--quick", "--queue-only"],
        env={**os.environ, "LEASE_BENCH_QUEUE_ROW": row, "LEASE_BENCH_QUEUE_JOBS": str(jobs)},
        capture_output=True, text=True, check=True,
    ).stdout
    for line in out.splitlines():
        if "worker runtime, FULL" in line:
            cells = [c.strip() for c in line.split("|")]
            if cells[2] == str(workers):
                return float(cells[4].replace(",", ""))
    raise AssertionError(f"no row {row} in:\n{out}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True, help="the report bench binary")
    parser.add_argument("--statement-jobs", type=int, default=300)
    parser.add_argument("--worker-jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--statement-only", action="store_true", help="only the statement's rows (no workers)"
    )
    args = parser.parse_args()
    rows = []
    ours, plain, pooled = [], [], []
    for _ in range(args.runs):
        ours.append(statement_run(lease, args.statement_jobs))
        plain.append(statement_run(PlainService(), args.statement_jobs))
        pooled.append(statement_run(StoreApi(), args.statement_jobs))
    ops = 4 * args.statement_jobs
    ours_rate, plain_rate = ops / statistics.median(ours), ops / statistics.median(plain)
    pooled_rate = ops / statistics.median(pooled)
    rows.append(("statement functions, `lease` (a connection per call, WAL, FULL), ops/s", 1, ours_rate, f"{ours_rate / plain_rate:.2f}x the plain sqlite3 service.py"))
    rows.append(("statement functions, plain sqlite3 service.py (a connection per call, rollback journal, FULL), ops/s", 1, plain_rate, ""))
    rows.append(("the same calls through one `lease.Store` (a pool, WAL, FULL), ops/s", 1, pooled_rate, f"{pooled_rate / plain_rate:.2f}x the plain sqlite3 service.py"))
    for workers in () if args.statement_only else (1, 16):
        py, rust = [], []
        for _ in range(args.runs):
            py.append(python_worker_run(args.worker_jobs, workers))
            rust.append(rust_worker_run(args.report, args.worker_jobs, workers))
        py_rate, rust_rate = statistics.median(py), statistics.median(rust)
        rows.append(("Python `lease.Worker`, handler returns at once, FULL, jobs/s", workers, py_rate, f"{py_rate / rust_rate:.2f}x the Rust runtime"))
        rows.append(("Rust `lease_worker::Worker`, handler returns at once, FULL, jobs/s", workers, rust_rate, ""))
    print(f"Python rows ({args.runs} runs each, alternating, medians)\n")
    print("| row | workers | ops/s | ratio |\n|---|---:|---:|---|")
    for name, workers, rate, ratio in rows:
        print(f"| {name} | {workers} | {rate:,.0f} | {ratio} |")


if __name__ == "__main__":
    main()
