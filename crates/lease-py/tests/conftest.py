"""What the Python package's tests share: a fresh SQLite path, a scratch PostgreSQL database, a
live ``lease serve`` with a key, and one ``Store`` of each kind.

The PostgreSQL and server fixtures need the local PostgreSQL (``LEASE_TEST_PG``, default
``postgres://postgres@127.0.0.1:5432/postgres``) and the ``lease`` binary (``LEASE_BIN``, default
the workspace's ``target/debug/lease``): a test that needs one fails when it is missing, it is
never skipped.
"""

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.parse
import uuid

import pytest

import lease

REPO = pathlib.Path(__file__).resolve().parents[3]
ADMIN_PG = os.environ.get("LEASE_TEST_PG", "postgres://postgres@127.0.0.1:5432/postgres")


def lease_bin() -> str:
    """The ``lease`` binary the server tests run."""
    path = os.environ.get("LEASE_BIN", str(REPO / "target" / "debug" / "lease"))
    assert os.access(path, os.X_OK), (
        f"the lease binary is needed at {path} (cargo build -p lease-cli, or set LEASE_BIN)"
    )
    return path


def psql(sql: str) -> None:
    """Runs one statement on the administrative database."""
    subprocess.run(
        ["psql", ADMIN_PG, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql],
        check=True,
        capture_output=True,
    )


class WriteLock:
    """SQLite's write lock on a file, held by another process until :meth:`release`.

    Another process, not this one: POSIX file locks belong to a process, so two copies of
    SQLite in one process (Python's ``sqlite3`` and the one inside ``lease``) do not see each
    other's locks at all.
    """

    SCRIPT = (
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
        "c.execute('COMMIT')\n"
    )

    def __init__(self, path):
        self.process = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "locked"

    def release(self):
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=30) == 0


@pytest.fixture
def db(tmp_path):
    """A path for a new SQLite lease database (not made yet)."""
    return str(tmp_path / "jobs.db")


@pytest.fixture
def pg_url():
    """A scratch PostgreSQL database of its own, dropped afterwards."""
    name = f"lease_py_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    psql(f"CREATE DATABASE {name}")
    parts = urllib.parse.urlsplit(ADMIN_PG)
    url = urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    try:
        yield url
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class Server:
    """A running ``lease serve`` over a SQLite file, and an API key for it."""

    def __init__(self, tmp_path, *extra):
        self.db = str(tmp_path / "served.db")
        run = [lease_bin(), "--db", self.db]
        subprocess.run(run + ["init"], check=True, capture_output=True)
        made = subprocess.run(
            run + ["keys", "create", "py", "--scope", "admin", "--json"],
            check=True,
            capture_output=True,
            text=True,
        )
        self.key = json.loads(made.stdout)["key"]
        self.process = subprocess.Popen(
            run + ["--audit", "serve", "--listen", "127.0.0.1:0", *extra],
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 30
        self.url = None
        while self.url is None and time.time() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            if line.startswith("lease: serving "):
                self.url = line.split()[2]
        assert self.url, "lease serve did not say where it listens"

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture
def server(tmp_path):
    """A live ``lease serve`` on loopback, stopped afterwards."""
    served = Server(tmp_path)
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(params=["sqlite", "postgres", "http"])
def opening(request, tmp_path):
    """How to open a fresh store of each kind: its target and keyword arguments (made already,
    so it opens without ``create``)."""
    if request.param == "sqlite":
        target, how = str(tmp_path / "jobs.db"), {"audit": 100}
    elif request.param == "postgres":
        target, how = request.getfixturevalue("pg_url"), {"audit": 100}
    else:
        served = request.getfixturevalue("server")
        return served.url, {"api_key": served.key}
    lease.Store(target, create=True, **how)
    return target, how


@pytest.fixture
def store(opening):
    """A fresh store of each kind, through the same ``lease.Store`` API."""
    target, how = opening
    return lease.Store(target, **how)
