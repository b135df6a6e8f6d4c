"""Fences for the resources a Python worker writes to: a SQLite table written in the guard's
transaction, a directory and Redis through ``lease.guard.open``; a stale holder's late write is
refused and the newer value stands."""

import sqlite3
import subprocess
import uuid

import pytest

import lease
from lease import guard


def test_a_sqlite_write_under_a_stale_fence_is_refused_and_writes_nothing(tmp_path):
    path = tmp_path / "results.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE results(job TEXT PRIMARY KEY, value TEXT)")
    conn.commit()
    conn.close()
    upsert = "INSERT INTO results VALUES (?, ?) ON CONFLICT(job) DO UPDATE SET value = excluded.value"
    assert guard.sqlite_write(path, "report", 1, upsert, ("report", "from A"))
    assert guard.sqlite_write(path, "report", 2, upsert, ("report", "from B"))
    late = guard.sqlite_write(path, "report", 1, upsert, ("report", "late A"))
    assert not late and late.reason == "stale"
    assert (late.presented_fence, late.current_fence) == (1, 2)
    assert guard.sqlite_write(path, "report", 2, upsert, ("report", "B again"))
    rows = sqlite3.connect(path).execute("SELECT value FROM results").fetchall()
    assert rows == [("B again",)]


def test_a_failing_statement_rolls_back_the_fence_too(tmp_path):
    path = tmp_path / "results.db"
    with pytest.raises(lease.GuardError):
        guard.sqlite_write(path, "k", 5, "INSERT INTO no_such_table VALUES (1)")
    # The fence 5 was not kept: a lower fence is still admitted.
    assert guard.sqlite_write(path, "k", 1, "CREATE TABLE t(x)")


def test_sqlite_write_names_bad_parameters(tmp_path):
    with pytest.raises(ValueError, match=r"params\[1\]"):
        guard.sqlite_write(tmp_path / "r.db", "k", 1, "SELECT ?, ?", (1, object()))
    with pytest.raises(ValueError, match="fence"):
        guard.sqlite_write(tmp_path / "r.db", "k", -1, "SELECT 1")


def _story(resource, key):
    assert resource.put(key, b"from A", fence=1, job="job-1")
    assert resource.put(key, "from B", fence=2, job="job-1")
    late = resource.put(key, b"late A", fence=1, job="job-1")
    assert not late and late.reason == "stale"
    assert (late.presented_fence, late.current_fence) == (1, 2)
    got = resource.get(key)
    assert (got.fence, got.value) == (2, b"from B")
    assert not resource.delete(key, fence=1)
    assert resource.delete(key, fence=2)
    assert resource.get(key) is None
    # A fence never goes down, not even after a delete.
    assert not resource.put(key, b"after", fence=1)


def test_a_directory_keeps_the_newest_holder_s_value(tmp_path):
    url = f"file://{tmp_path}"
    assert guard.install(url) is False
    resource = guard.open(url)
    assert resource.resource == "file"
    _story(resource, "report.txt")


def test_redis_keeps_the_newest_holder_s_value():
    url = "redis://127.0.0.1:6379"
    guard.install(url)
    assert guard.install(url) is False
    resource = guard.open(url)
    key = f"lease-py-test:{uuid.uuid4().hex}"
    try:
        _story(resource, key)
        with pytest.raises(ValueError, match="expiry"):
            resource.put(key, b"x", fence=3, expiry=0)
        assert resource.put(key, b"lapses", fence=3, expiry=60)
        assert resource.get(key).value == b"lapses"
    finally:
        subprocess.run(["redis-cli", "DEL", key, f"{{{key}}}:lease-fence"], capture_output=True)


def test_a_resource_no_guard_takes_is_named():
    with pytest.raises(lease.Unsupported, match="ftp://x"):
        guard.open("ftp://x")
    with pytest.raises(ValueError, match="key"):
        guard.open("redis://127.0.0.1:6379").put("", b"v", fence=1)
