"""The problem statement's steps, as it states them, against ``lease``'s own functions."""

import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import pytest

import lease

KEYS = {"id", "owner", "until", "fence", "result", "done"}


def test_init_db_is_idempotent_and_never_overwrites_a_file(db):
    lease.init_db(db)
    assert lease.enqueue(db, "kept")
    lease.init_db(db)
    assert lease.state(db, "kept") is not None
    not_a_db = db + ".txt"
    with open(not_a_db, "w") as f:
        f.write("notes")
    with pytest.raises(lease.Incompatible):
        lease.init_db(not_a_db)
    with open(not_a_db) as f:
        assert f.read() == "notes"


def test_enqueue_inserts_once_and_never_resets_a_lease(db):
    lease.init_db(db)
    assert lease.enqueue(db, "j") is True
    fence = lease.claim(db, "j", "a", 100.0, 10.0)
    assert lease.enqueue(db, "j") is False
    assert lease.state(db, "j")["owner"] == "a"
    assert lease.state(db, "j")["fence"] == fence


def test_state_is_the_row_with_the_statement_s_types_or_none(db):
    lease.init_db(db)
    assert lease.state(db, "missing") is None
    lease.enqueue(db, "j")
    row = lease.state(db, "j")
    assert set(row) == KEYS
    assert row == {"id": "j", "owner": None, "until": 0.0, "fence": 0, "result": None, "done": 0}
    assert type(row["until"]) is float and type(row["fence"]) is int
    fence = lease.claim(db, "j", "a", 100.0, 10.0)
    assert lease.complete(db, "j", "a", fence, 101.0, "ok")
    row = lease.state(db, "j")
    assert row == {"id": "j", "owner": "a", "until": 110.0, "fence": 1, "result": "ok", "done": 1}
    assert type(row["done"]) is int and type(row["owner"]) is str


def test_claim_refuses_a_missing_done_or_live_job_and_takes_an_expired_one(db):
    lease.init_db(db)
    assert lease.claim(db, "missing", "a", 100.0, 10.0) is None
    lease.enqueue(db, "j")
    assert lease.claim(db, "j", "a", 100.0, 10.0) == 1
    assert lease.claim(db, "j", "b", 109.9, 10.0) is None
    # until == now: the lease has ended and the job can be reassigned.
    assert lease.claim(db, "j", "b", 110.0, 10.0) == 2
    assert lease.state(db, "j")["owner"] == "b"
    assert lease.state(db, "j")["until"] == 120.0
    assert lease.complete(db, "j", "b", 2, 111.0, "done")
    assert lease.claim(db, "j", "c", 500.0, 10.0) is None


@pytest.mark.parametrize("ttl", [0, -1, 0.0, float("nan"), float("inf")])
def test_a_ttl_not_above_zero_is_a_value_error_and_changes_nothing(db, ttl):
    lease.init_db(db)
    lease.enqueue(db, "j")
    before = lease.state(db, "j")
    for call in (
        lambda: lease.claim(db, "j", "a", 100.0, ttl),
        lambda: lease.renew(db, "j", "a", 1, 100.0, ttl),
        lambda: lease.claim_many(db, "j", ["a", "b"], 100.0, ttl),
    ):
        with pytest.raises(ValueError) as raised:
            call()
        assert "ttl" in str(raised.value)
        assert isinstance(raised.value, lease.LeaseError)
    assert lease.state(db, "j") == before


def test_other_invalid_input_is_a_value_error_naming_it(db):
    lease.init_db(db)
    lease.enqueue(db, "j")
    cases = [
        (lambda: lease.claim(db, "", "a", 1.0, 1.0), "job id"),
        (lambda: lease.claim(db, "j", "", 1.0, 1.0), "owner"),
        (lambda: lease.claim(db, "j", "a", float("nan"), 1.0), "now"),
        (lambda: lease.renew(db, "j", "a", -1, 1.0, 1.0), "fence"),
        (lambda: lease.complete(db, "j", "a", 2**63, 1.0, "r"), "fence"),
        (lambda: lease.complete(db, "j", "a", 1, 1.0, "nul\x00"), "NUL"),
        (lambda: lease.release(db, "j", "a", True), "fence"),
    ]
    for call, named in cases:
        with pytest.raises(ValueError) as raised:
            call()
        assert named.lower() in str(raised.value).lower(), (named, raised.value)
    assert lease.state(db, "j")["fence"] == 0


def test_only_the_current_generation_renews_and_an_expired_lease_is_not_revived(db):
    lease.init_db(db)
    lease.enqueue(db, "j")
    fence = lease.claim(db, "j", "a", 100.0, 10.0)
    assert lease.renew(db, "j", "a", fence, 105.0, 10.0) is True
    assert lease.state(db, "j")["until"] == 115.0
    assert lease.renew(db, "j", "b", fence, 106.0, 10.0) is False
    assert lease.renew(db, "j", "a", fence + 1, 106.0, 10.0) is False
    assert lease.renew(db, "j", "a", fence, 115.0, 10.0) is False
    assert lease.state(db, "j")["until"] == 115.0


def test_a_stale_completion_is_rejected_and_the_new_result_survives(db):
    lease.init_db(db)
    lease.enqueue(db, "j")
    a = lease.claim(db, "j", "A", 100.0, 10.0)
    b = lease.claim(db, "j", "B", 111.0, 10.0)
    assert lease.complete(db, "j", "B", b, 112.0, "from B") is True
    assert lease.complete(db, "j", "A", a, 113.0, "from A") is False
    assert lease.state(db, "j")["result"] == "from B"
    assert lease.complete(db, "j", "B", b, 114.0, "again") is False
    assert lease.state(db, "j")["result"] == "from B"


def test_an_expired_lease_cannot_complete(db):
    lease.init_db(db)
    lease.enqueue(db, "j")
    fence = lease.claim(db, "j", "a", 100.0, 10.0)
    assert lease.complete(db, "j", "a", fence, 110.0, "late") is False
    assert lease.state(db, "j")["result"] is None
    assert lease.state(db, "j")["done"] == 0


def test_release_keeps_the_fence_and_only_the_current_holder_may(db):
    lease.init_db(db)
    lease.enqueue(db, "j")
    fence = lease.claim(db, "j", "a", 100.0, 10.0)
    assert lease.release(db, "j", "b", fence) is False
    assert lease.release(db, "j", "a", fence + 1) is False
    assert lease.release(db, "j", "a", fence) is True
    assert lease.state(db, "j") == {
        "id": "j", "owner": None, "until": 0.0, "fence": fence, "result": None, "done": 0,
    }
    assert lease.claim(db, "j", "b", 101.0, 10.0) == fence + 1


def test_claim_many_gives_exactly_one_fence_for_a_new_job_in_input_order(db):
    lease.init_db(db)
    owners = [f"w{i}" for i in range(24)]
    for round_ in range(10):
        job = f"j{round_}"
        lease.enqueue(db, job)
        got = lease.claim_many(db, job, owners, 100.0, 10.0)
        assert len(got) == len(owners)
        winners = [i for i, f in enumerate(got) if f is not None]
        assert len(winners) == 1 and got[winners[0]] == 1
        assert lease.state(db, job)["owner"] == owners[winners[0]]


def test_claims_from_a_thread_pool_as_the_statement_writes_them_have_one_winner(db):
    lease.init_db(db)
    lease.enqueue(db, "j")
    with ThreadPoolExecutor(max_workers=16) as pool:
        got = list(pool.map(lambda o: lease.claim(db, "j", f"w{o}", 100.0, 10.0), range(32)))
    assert sorted(f for f in got if f is not None) == [1]


def test_a_file_made_by_the_statement_s_own_service_opens_and_goes_on_from_its_fences(db):
    # The six-column table exactly as the statement creates it, with a job at fence 7.
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS jobs(id TEXT PRIMARY KEY, owner TEXT, until REAL NOT NULL "
        "DEFAULT 0, fence INTEGER NOT NULL DEFAULT 0, result TEXT, done INTEGER NOT NULL "
        "DEFAULT 0)"
    )
    conn.execute("INSERT INTO jobs(id, owner, until, fence) VALUES ('old', 'a', 50.0, 7)")
    conn.commit()
    conn.close()
    lease.init_db(db)
    assert lease.state(db, "old") == {
        "id": "old", "owner": "a", "until": 50.0, "fence": 7, "result": None, "done": 0,
    }
    assert lease.claim(db, "old", "b", 100.0, 10.0) == 8
    assert lease.complete(db, "old", "a", 7, 101.0, "stale") is False
    assert lease.complete(db, "old", "b", 8, 101.0, "new") is True


def test_the_functions_open_the_file_afresh_each_time(db):
    lease.init_db(db)
    lease.enqueue(db, "j")
    for leftover in (db, db + "-wal", db + "-shm"):
        if os.path.exists(leftover):
            os.remove(leftover)
    with pytest.raises(lease.NotFound):
        lease.state(db, "j")
    lease.init_db(db)
    assert lease.state(db, "j") is None


def test_a_forked_child_calls_the_functions_on_its_own_connection(db):
    lease.init_db(db)
    lease.enqueue(db, "j")
    # The parent has called with the path, so it keeps a connection to it.
    fence = lease.claim(db, "j", "a", 100.0, 10.0)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if lease.complete(db, "j", "a", fence, 101.0, "from the child") else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert lease.state(db, "j")["result"] == "from the child"
    # The parent's own connection goes on.
    assert lease.enqueue(db, "k") is True
    assert lease.state(db, "k")["fence"] == 0
