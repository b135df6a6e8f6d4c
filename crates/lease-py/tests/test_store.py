"""The queue through ``lease.Store`` and ``lease.AsyncStore``, the same tests on a SQLite file,
a PostgreSQL database and a live ``lease serve`` (owners are ``py/...``: the server's key is
the principal ``py``, which may act as ``py`` or ``py/...``)."""

import asyncio
import json
import subprocess
import time

import pytest

import lease
from conftest import lease_bin

A, B = "py/a", "py/b"


def test_the_stale_worker_story_keeps_the_new_result(store):
    assert store.enqueue("report", queue="mail", payload=b"\x00\x01")
    (first,) = store.claim_next("mail", A, 0.4)
    assert first.fence == 1 and first.attempt == 1 and first.payload == b"\x00\x01"
    time.sleep(0.6)
    (second,) = store.claim_next("mail", B, 30.0)
    assert second.fence == 2
    assert store.complete("report", B, second.fence, "from B")
    late = store.complete("report", A, first.fence, "from A")
    assert not late and late.ok is False
    assert late.reason == "stale"
    assert (late.presented_fence, late.current_fence) == (1, 2)
    assert store.state("report")["result"] == "from B"
    record = store.record("report")
    assert (record.status, record.result, record.result_fence) == ("done", "from B", 2)


def test_refused_writes_are_values_naming_why(store):
    store.enqueue("j")
    (held,) = store.claim_next("default", A, 30.0)
    wrong_owner = store.renew("j", B, held.fence, 30.0)
    assert not wrong_owner and wrong_owner.reason == "not_owner"
    assert store.renew("j", A, held.fence, 30.0)
    missing = store.complete("nope", A, 1, "r")
    assert not missing and missing.reason == "missing"
    live = store.claim("j", B, 30.0)
    assert not live and live.reason == "live" and live.until is not None
    assert store.release("j", A, held.fence)
    claimed = store.claim("j", B, 30.0)
    assert claimed.ok and claimed.fence == held.fence + 1


def test_a_failure_is_retried_then_dead_and_cancel_and_retry_work(store):
    store.enqueue("j", max_attempts=2)
    (one,) = store.claim_next("default", A, 30.0)
    failed = store.fail("j", A, one.fence, "boom", backoff=lease.Backoff(base=0.01, jitter=0))
    assert failed and failed.status == "pending" and failed.run_at is not None
    time.sleep(0.05)
    (two,) = store.claim_next("default", A, 30.0)
    assert two.attempt == 2
    dead = store.fail("j", A, two.fence, "boom again")
    assert dead.status == "dead"
    assert store.record("j").error == "boom again"
    # A dead job can be cancelled: it keeps its record and last error; retry revives it.
    assert store.cancel("j")
    ended = store.record("j")
    assert (ended.status, ended.error, ended.attempts) == ("cancelled", "boom again", 2)
    assert store.retry("j")
    assert store.record("j").status == "pending"
    assert store.cancel("j")
    cancelled = store.cancel("j")
    assert not cancelled and cancelled.reason == "cancelled"
    assert store.claim_next("default", A, 30.0) == []


def test_batches_lists_stats_and_purge(store):
    made = store.enqueue_many(
        [{"id": f"b{i}", "priority": i} for i in range(5)] + [{"id": "m", "queue": "mail"}]
    )
    assert made == [True] * 6
    assert store.enqueue_many([{"id": "b0"}]) == [False]
    (top,) = store.claim_next("default", A, 30.0)
    assert top.id == "b4"
    store.complete("b4", A, top.fence, "ok")
    page = store.list(queue="default", limit=2)
    assert [r.id for r in page] == ["b0", "b1"]
    assert [r.id for r in store.list(queue="default", limit=10, after="b1")] == ["b2", "b3", "b4"]
    assert [r.id for r in store.list(status="done")] == ["b4"]
    counts = {(r.queue, r.status): r.count for r in store.stats()}
    assert counts == {("default", "pending"): 4, ("default", "done"): 1, ("mail", "pending"): 1}
    assert store.purge(time.time() + 60, ["done"]) == 1
    assert store.record("b4") is None


def test_list_takes_a_group_and_an_id_prefix(store):
    store.enqueue_many(
        [
            {"id": "inv-1", "group": "acme"},
            {"id": "inv-2", "group": "zeta"},
            {"id": "invoice", "group": "acme"},
            {"id": "mail-1", "group": "acme"},
        ]
    )
    assert [r.id for r in store.list(group="acme")] == ["inv-1", "invoice", "mail-1"]
    assert [r.id for r in store.list(prefix="inv-")] == ["inv-1", "inv-2"]
    assert [r.id for r in store.list(group="acme", prefix="inv")] == ["inv-1", "invoice"]
    assert [r.group for r in store.list(group="zeta")] == ["zeta"]
    with pytest.raises(lease.InvalidInput) as raised:
        store.list(group="")
    assert "group" in str(raised.value)


def test_bulk_retries_every_dead_job_of_a_group_after_a_dry_run_counts_them(store):
    store.enqueue_many([{"id": i, "group": g} for i, g in [("a1", "acme"), ("a2", "acme"), ("z1", "zeta")]])
    for held in store.claim_next("default", A, 30.0, limit=3):
        store.fail(held.id, A, held.fence, "boom", retry=False)
    assert store.bulk("retry", group="acme", dry_run=True) == {"matched": 2, "changed": 0}
    assert store.record("a1").status == "dead"
    assert store.bulk("retry", group="acme") == {"matched": 2, "changed": 2}
    assert [r.status for r in store.list(group="acme")] == ["pending", "pending"]
    assert store.record("z1").status == "dead"
    with pytest.raises(lease.InvalidInput) as raised:
        store.bulk("delete")
    assert "action" in str(raised.value)


def test_bad_input_raises_a_value_error_naming_it_and_changes_nothing(store):
    store.enqueue("j")
    for call, named in [
        (lambda: store.enqueue(""), "job id"),
        (lambda: store.enqueue("k", queue=""), "queue"),
        (lambda: store.enqueue("k", payload=object()), "payload"),
        (lambda: store.enqueue("k", payload=b"x" * (1024 * 1024 + 1)), "payload"),
        (lambda: store.claim_next("default", A, 0), "ttl"),
        (lambda: store.renew("j", A, -1, 10), "fence"),
        (lambda: store.fail("j", A, 1, "e", retry=False, backoff=lease.Backoff()), "backoff"),
        (lambda: store.list(status="finished"), "status"),
        (lambda: store.enqueue_many([{"id": "ok"}, {"id": "x", "colour": 1}]), "jobs[1]"),
        (lambda: lease.Backoff(factor=0.5), "factor"),
    ]:
        with pytest.raises(ValueError) as raised:
            call()
        assert isinstance(raised.value, lease.InvalidInput)
        assert named in str(raised.value), (named, raised.value)
    assert [r.id for r in store.list()] == ["j"]
    assert store.record("j").fence == 0


def test_a_finished_job_runs_again_when_asked_and_a_lease_carries_its_timeout(store):
    store.enqueue("r", queue="q", payload=b"one", timeout=7.5)
    (lease_one,) = store.claim_next("q", A, 30.0)
    assert lease_one.timeout == 7.5
    assert store.complete("r", A, lease_one.fence, "first")
    assert not store.enqueue("r", queue="q", payload=b"two")
    assert store.enqueue("r", queue="q", payload=b"two", replace_finished=True)
    record = store.record("r")
    assert (record.status, record.result, record.attempts, record.payload) == (
        "pending", "first", 0, b"two"
    )
    assert record.timeout is None and record.progress is None
    assert not store.enqueue("r", queue="q", replace_finished=True), "a pending job was touched"
    (lease_two,) = store.claim_next("q", A, 30.0)
    assert lease_two.fence == lease_one.fence + 1
    with pytest.raises(lease.InvalidInput) as raised:
        store.enqueue("s", timeout=0)
    assert "timeout" in str(raised.value)
    assert store.enqueue_many([{"id": "t", "timeout": 3}, {"id": "r", "replace": "finished"}]) == [
        True,
        False,
    ]


def test_a_queue_is_paused_limited_and_resumed_from_python(store):
    for i in range(4):
        store.enqueue(f"p{i}", queue="q")
    paused = store.pause("q", until=2e9, now=100.0)
    assert (paused.queue, paused.paused, paused.paused_until) == ("q", True, 2e9)
    assert store.claim_next("q", A, 30.0, limit=4) == [], "a paused queue leased"
    assert store.resume("q").paused is False
    # A limit and a timeout in one change; a claim for more gets what the limit leaves.
    limited = store.limit("q", concurrency=2, timeout=9.5)
    assert (limited.concurrency, limited.timeout) == (2, 9.5)
    leases = store.claim_next("q", A, 30.0, limit=4)
    assert len(leases) == 2 and all(h.timeout == 9.5 for h in leases)
    assert [(s.queue, s.concurrency) for s in store.queues()] == [("q", 2)]
    freed = store.limit("q", concurrency=0, no_timeout=True)
    assert (freed.concurrency, freed.timeout) == (None, None)
    assert store.queues() == []
    for bad, says in [
        (dict(), "give concurrency"),
        (dict(timeout=3, no_timeout=True), "not both"),
        (dict(timeout=-1), "timeout"),
    ]:
        with pytest.raises(lease.InvalidInput) as raised:
            store.limit("q", **bad)
        assert says in str(raised.value)
    with pytest.raises(lease.InvalidInput):
        store.pause("")
    assert store.queues() == [], "a refused change changed settings"


def test_groups_are_limited_and_ordered_from_python(store):
    for n in range(3):
        assert store.enqueue(f"a{n}", queue="g", group="acct-a")
    assert store.enqueue_many([{"id": "b0", "group": "acct-b"}, {"id": "free"}], queue="g")
    assert store.record("a1").group == "acct-a" and store.record("free").group is None
    ruled = store.limit("g", per_group=1, ordered=True)
    assert (ruled.per_group, ruled.ordered, ruled.concurrency) == (1, True, None)
    assert "per_group=1, ordered=True" in repr(ruled)
    leases = store.claim_next("g", A, 30.0, limit=10)
    assert [(h.id, h.group) for h in leases] == [("a0", "acct-a"), ("b0", "acct-b"), ("free", None)]
    assert store.claim_next("g", A, 30.0, limit=10) == [], "a group ran two jobs at once"
    assert store.complete("a0", A, leases[0].fence, "ok")
    assert [h.id for h in store.claim_next("g", A, 30.0, limit=10)] == ["a1"]
    for bad, says in [
        (dict(queue="g", group=""), "group"),
        (dict(queue="g", group="x" * 1025), "group"),
    ]:
        with pytest.raises(lease.InvalidInput) as raised:
            store.enqueue("bad", **bad)
        assert says in str(raised.value)
    with pytest.raises(lease.InvalidInput) as raised:
        store.enqueue_many([{"id": "bad", "group": ""}], queue="g")
    assert "jobs[0]" in str(raised.value) and "group" in str(raised.value)
    assert store.record("bad") is None, "a refused enqueue stored a job"
    freed = store.limit("g", per_group=0, ordered=False)
    assert (freed.per_group, freed.ordered) == (None, False)
    assert store.queues() == []
    # One group paused: its jobs wait, the others run; resumed, it runs again.
    assert store.enqueue("c1", queue="g", group="acct-c")
    paused = store.pause("g", group="acct-c", until=2e9)
    assert paused.paused_groups == {"acct-c": 2e9} and paused.paused is False
    assert [h.id for h in store.claim_next("g", A, 30.0, limit=10)] == ["a2"]
    assert store.resume("g", group="acct-c").paused_groups == {}
    assert [h.id for h in store.claim_next("g", A, 30.0, limit=10)] == ["c1"]
    with pytest.raises(lease.InvalidInput) as raised:
        store.pause("g", group="")
    assert "group" in str(raised.value)
    assert store.queues() == []


def test_a_fair_queue_serves_its_groups_in_turn_from_python(store):
    assert store.enqueue_many([{"id": f"big{n}", "group": "big"} for n in range(5)], queue="f")
    fair = store.limit("f", fair=True)
    assert fair.fair is True and "fair=True" in repr(fair)
    assert [h.id for h in store.claim_next("f", A, 30.0)] == ["big0"]
    assert store.enqueue("small0", queue="f", group="small")
    # The late group waited less than big, which was just served: it goes first.
    assert [h.id for h in store.claim_next("f", A, 30.0, limit=3)] == ["small0", "big1", "big2"]
    assert store.limit("f", fair=False).fair is False
    assert store.queues() == []


def test_a_workflow_runs_after_its_parents_from_python(store):
    # A parent named after its children in the batch; one child runs whatever its parent's end.
    assert store.enqueue_many(
        [
            {"id": "test", "after": ["build"]},
            {"id": "deploy", "after": ["test"], "on_parent_failure": "run"},
            {"id": "report", "after": ["test"]},
            {"id": "build"},
        ],
        queue="w",
    ) == [True, True, True, True]
    assert store.record("test").status == "waiting"
    assert store.record("test").after == ["build"]
    assert store.record("deploy").on_parent_failure == "run"
    assert store.record("build").after == [] and store.record("build").on_parent_failure is None
    refused = store.claim("test", A, 30.0)
    assert isinstance(refused, lease.Refused) and refused.reason == "waiting"
    [build] = store.claim_next("w", A, 30.0, limit=10)
    assert build.id == "build"
    assert store.complete("build", A, build.fence, "built")
    [test] = store.claim_next("w", A, 30.0, limit=10)
    assert test.id == "test"
    assert store.fail("test", A, test.fence, "red", retry=False).status == "dead"
    assert store.record("report").status == "cancelled"
    assert store.record("report").error == "cancelled: its parent test ended dead"
    assert store.record("deploy").status == "pending"
    assert store.enqueue("late", queue="w", after=["build"]) is True
    assert store.record("late").status == "pending", "a parent already done releases at once"
    for bad, says in [
        (dict(after=["ghost"]), "ghost"),
        (dict(after=["self"]), "itself"),
        (dict(after=["build"], on_parent_failure="maybe"), "on_parent_failure"),
        (dict(after=[""]), "after"),
    ]:
        with pytest.raises(lease.InvalidInput) as raised:
            store.enqueue("self", queue="w", **bad)
        assert says in str(raised.value)
    with pytest.raises(lease.InvalidInput) as raised:
        store.enqueue_many([{"id": "p", "after": ["q"]}, {"id": "q", "after": ["p"]}], queue="w")
    assert "cycle" in str(raised.value)
    assert store.record("self") is None and store.record("p") is None


def test_the_busiest_groups_are_shown_from_python(store):
    assert store.enqueue_many([{"id": f"a{n}", "group": "a"} for n in range(3)], queue="g")
    assert store.enqueue_many([{"id": "b0", "group": "b"}, {"id": "free"}], queue="g")
    assert [h.id for h in store.claim_next("g", A, 30.0)] == ["a0"]
    store.pause("g", group="b", until=2e9)
    loads = store.groups("g")
    assert [(l.group, l.backlog, l.running, l.paused) for l in loads] == [
        ("a", 2, 1, False),
        ("b", 1, 0, True),
    ]
    assert loads[1].paused_until == 2e9 and loads[0].throttled_until is None
    assert "GroupLoad(group=\"a\", backlog=2, running=1" in repr(loads[0])
    assert [l.group for l in store.groups("g", limit=1)] == ["a"]
    assert store.groups("empty") == []
    with pytest.raises(lease.InvalidInput) as raised:
        store.groups("g", limit=0)
    assert "limit" in str(raised.value)


def test_a_rate_limits_grants_in_a_sliding_window_from_python(store):
    for n in range(4):
        assert store.enqueue(f"r{n}", queue="rated")
    for bad, says in [("0/1s", "count"), ("5/0s", "more than 0"), ("five/1s", "whole number"), ("5", "N/PERIOD")]:
        with pytest.raises(lease.InvalidInput) as raised:
            store.limit("rated", rate=bad, per_group=1)
        assert "rate" in str(raised.value) and says in str(raised.value)
    assert store.queues() == [], "a refused rate changed the settings"
    rated = store.limit("rated", rate="2/1s", rate_per_group="1/500ms")
    assert (rated.rate, rated.rate_per_group) == ("2/1s", "1/500ms")
    assert "rate='2/1s'" in repr(rated) or 'rate="2/1s"' in repr(rated)
    assert len(store.claim_next("rated", A, 30.0, limit=4)) == 2
    assert store.claim_next("rated", A, 30.0, limit=4) == []
    throttle = store.throttle("rated")
    assert throttle.queue == "rated" and throttle.groups == {}
    assert time.time() < throttle.until <= time.time() + 1.0
    # Sliding: the window opens as the first grants expire.
    time.sleep(max(0.0, throttle.until - time.time()) + 0.05)
    assert len(store.claim_next("rated", A, 30.0, limit=4)) == 2
    assert store.limit("rated", rate="none", rate_per_group="none").rate is None
    assert store.throttle("rated").until is None
    assert store.queues() == []


def test_a_debounced_enqueue_pushes_a_waiting_job_from_python(store):
    assert store.enqueue("d", queue="deb", payload="one", debounce=60.0)
    due = store.record("d").run_at
    assert store.claim_next("deb", A, 30.0) == [], "a debounced job was leased at once"
    time.sleep(0.02)
    assert not store.enqueue("d", queue="deb", payload="two", debounce=60.0)
    record = store.record("d")
    assert record.payload == b"two" and record.run_at > due
    assert store.enqueue_many([{"id": "e", "debounce": 30}], queue="deb") == [True]
    with pytest.raises(lease.InvalidInput) as raised:
        store.enqueue("bad", debounce=-1)
    assert "debounce" in str(raised.value)
    assert store.record("bad") is None


def test_a_schedule_is_set_listed_run_by_hand_and_removed_from_python(store):
    # 2026-01-01T00:00:00Z; a tick every five minutes.
    t0 = 1_767_225_600.0
    made = store.put_schedule(
        "m", cron="*/5 * * * *", queue="ticks", priority=3, payload="p", catch_up="all:2", now=t0
    )
    assert (made.name, made.queue, made.catch_up, made.version, made.last_tick) == (
        "m", "ticks", "all:2", 1, None
    )
    # A server that does not trust caller clocks makes it at its own time.
    assert made.next_tick == (max(made.created, t0) // 300 + 1) * 300
    assert "next_tick=17" in repr(made) and "last_tick=None" in repr(made)
    assert [s.name for s in store.schedules(now=t0)] == ["m"]
    assert store.run_schedule("m", now=t0 + 10.4) == ("m@run-2026-01-01T00:00:10Z", True)
    assert store.run_schedule("m", now=t0 + 10.9) == ("m@run-2026-01-01T00:00:10Z", False)
    assert store.run_schedule("nope", now=t0) is None
    record = store.record("m@run-2026-01-01T00:00:10Z")
    assert (record.queue, record.priority, record.payload) == ("ticks", 3, b"p")
    (listed,) = store.schedules(now=t0 + 11)
    assert (listed.version, listed.last_tick) == (1, None), "a run by hand changed the schedule"
    for bad, says in [
        (dict(cron="61 * * * *", queue="q"), "cron"),
        (dict(cron="@daily", queue="q", tz="Mars/Olympus"), "zone"),
        (dict(cron="@daily", queue="q", catch_up="often"), "catch"),
    ]:
        with pytest.raises(lease.InvalidInput) as raised:
            store.put_schedule("bad", **bad)
        assert says in str(raised.value)
    with pytest.raises(lease.InvalidInput):
        store.run_schedule("a@b")
    assert [s.name for s in store.schedules()] == ["m"], "a refused schedule was stored"
    assert store.remove_schedule("m") is True
    assert store.remove_schedule("m") is False
    assert store.record("m@run-2026-01-01T00:00:10Z") is not None, "removing it removed its jobs"


def test_the_audit_trail_lists_a_refused_write(store):
    store.enqueue("j")
    (held,) = store.claim_next("default", A, 30.0)
    store.release("j", A, held.fence)
    store.claim_next("default", B, 30.0)
    assert not store.complete("j", A, held.fence, "late")
    rows = store.audit(job="j")
    assert [(r.operation, r.reason, r.presented_fence, r.current_fence) for r in rows] == [
        ("complete", "stale", 1, 2)
    ]


def test_a_fence_above_the_current_one_is_refused_as_never_issued(store):
    store.enqueue("j")
    (held,) = store.claim_next("default", A, 30.0)
    ahead = store.complete("j", A, held.fence + 1, "r")
    assert not ahead
    assert ahead.reason == "stale"
    assert (ahead.presented_fence, ahead.current_fence) == (held.fence + 1, held.fence)
    assert ahead.message == f"fence {held.fence + 1} was never issued; the current fence is {held.fence}"
    assert not store.record("j").done


def test_every_refused_holder_write_is_audited_and_read_back(store):
    store.enqueue("j")
    (stale,) = store.claim_next("default", A, 30.0)
    store.release("j", A, stale.fence)
    (held,) = store.claim_next("default", B, 30.0)
    refused = [
        ("renew", store.renew("j", A, stale.fence, 30.0)),
        ("progress", store.progress("j", A, stale.fence, "3 of 4")),
        ("complete", store.complete("j", A, stale.fence, "late")),
        ("release", store.release("j", A, stale.fence)),
        ("fail", store.fail("j", A, stale.fence, "late")),
        ("hold_group", store.hold_group("j", A, stale.fence, 4102444800.0)),
        ("checkpoint", store.checkpoint("j", A, stale.fence, "fetch", "late")),
    ]
    for name, answer in refused:
        assert not answer, name
        assert answer.reason == "stale", (name, answer.message)
    rows = store.audit(job="j")
    assert [(r.operation, r.reason, r.presented_fence) for r in rows] == [
        (name, "stale", stale.fence) for name, _ in refused
    ]
    # The holder's own report is stored; without ttl the lease keeps its end.
    until = store.record("j").until
    assert store.progress("j", B, held.fence, "1 of 4")
    record = store.record("j")
    assert (record.progress, record.until) == ("1 of 4", until)


def test_attempts_show_a_lost_lease_the_attempt_that_took_it_and_the_one_under_way(store):
    store.enqueue("story")
    (first,) = store.claim_next("default", A, 0.3)
    assert [a["outcome"] for a in store.attempts("story")["attempts"]] == ["running"]
    time.sleep(0.4)
    (second,) = store.claim_next("default", B, 30.0)
    assert not store.complete("story", A, first.fence, "late")
    shown = store.attempts("story")
    assert shown["older"] == 0
    lost, running = shown["attempts"]
    assert (lost["fence"], lost["owner"], lost["outcome"]) == (first.fence, A, "lease_lost")
    assert lost["ended"] == pytest.approx(first.until)
    assert (running["fence"], running["owner"], running["outcome"]) == (second.fence, B, "running")
    assert store.complete("story", B, second.fence, "ok")
    assert [a["outcome"] for a in store.attempts("story")["attempts"]] == ["lease_lost", "done"]
    assert store.attempts("nobody") == {"attempts": [], "older": 0}


def test_graph_shows_a_jobs_ancestors_and_descendants_with_every_dependency(store):
    store.enqueue("g-root")
    store.enqueue("g-mid", after=["g-root"])
    store.enqueue("g-leaf", after=["g-mid"])
    graph = store.graph("g-mid")
    assert [(n["id"], n["status"]) for n in graph["nodes"]] == [
        ("g-mid", "waiting"),
        ("g-root", "pending"),
        ("g-leaf", "waiting"),
    ]
    assert sorted(graph["edges"]) == [("g-mid", "g-leaf"), ("g-root", "g-mid")]
    assert graph["more"] == 0
    assert store.graph("g-root", limit=2)["more"] == 1
    assert store.graph("nobody") is None
    with pytest.raises(lease.InvalidInput, match="limit"):
        store.graph("g-root", limit=0)


def test_checkpoints_are_kept_under_the_fence_and_outlive_an_expired_lease(store):
    store.enqueue("etl")
    (first,) = store.claim_next("default", A, 0.3)
    assert store.checkpoint("etl", A, first.fence, "extract", "rows=3")
    assert store.checkpoint("etl", A, first.fence, "note", "two\nlines")
    time.sleep(0.4)
    assert store.checkpoints("etl") == {"extract": "rows=3", "note": "two\nlines"}
    # The lapsed attempt's fence is stale once B claims: its late step is refused.
    (second,) = store.claim_next("default", B, 30.0)
    late = store.checkpoint("etl", A, first.fence, "extract", "late")
    assert not late and late.reason == "stale"
    assert store.checkpoint("etl", B, second.fence, "extract", "rows=4")
    assert store.checkpoints("etl") == {"extract": "rows=4", "note": "two\nlines"}
    for name, value in [("", "x"), ("n" * 257, "x"), ("ok", "a\0b")]:
        with pytest.raises(lease.InvalidInput, match="checkpoint"):
            store.checkpoint("etl", B, second.fence, name, value)
    assert store.checkpoints("etl") == {"extract": "rows=4", "note": "two\nlines"}
    assert store.checkpoints("nobody") == {}


def test_the_asyncio_store_runs_the_same_story_without_blocking_the_loop(opening):
    target, how = opening

    async def story():
        async_store = lease.AsyncStore(target, **how)
        beats = 0

        async def heartbeat():
            nonlocal beats
            while True:
                beats += 1
                await asyncio.sleep(0.001)

        beating = asyncio.ensure_future(heartbeat())
        assert await async_store.enqueue_many([{"id": f"a{i}"} for i in range(20)]) == [True] * 20
        done = 0
        while True:
            leases = await async_store.claim_next("default", A, 30.0, limit=5)
            if not leases:
                break
            results = await asyncio.gather(
                *(async_store.complete(h.id, A, h.fence, "ok") for h in leases)
            )
            done += sum(1 for r in results if r)
        beating.cancel()
        stats = await async_store.stats()
        return done, beats, stats

    done, beats, stats = asyncio.run(story())
    assert done == 20
    assert beats > 0
    assert [(r.status, r.count) for r in stats] == [("done", 20)]


def test_an_asyncio_call_that_is_cancelled_is_dropped(tmp_path):
    store = lease.AsyncStore(str(tmp_path / "jobs.db"), create=True)

    async def story():
        call = asyncio.ensure_future(store.claim_next("default", A, 30.0))
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return await store.stats()

    assert asyncio.run(story()) == []


def test_a_store_that_does_not_exist_is_not_found_and_not_made(tmp_path):
    missing = tmp_path / "missing.db"
    with pytest.raises(lease.NotFound):
        lease.Store(missing)
    assert not missing.exists()
    with pytest.raises(lease.InvalidInput, match="api_key"):
        lease.Store(tmp_path / "x.db", api_key="lk_x")


def test_a_wrong_api_key_is_denied(server):
    with pytest.raises(lease.Denied):
        lease.Store(server.url, api_key="lk_0000_nope").stats()


def test_a_lost_answer_from_the_server_raises_outcome_unknown_and_a_503_unavailable():
    """A server whose store lost the answer to a write says ``500 outcome_unknown``; one whose
    store could not be reached says ``503 unavailable``: the package raises the matching
    exception for each (``lease serve`` is stood in for by a server that answers only that)."""
    import http.server
    import json as json_module
    import threading

    answers = {
        "/v1/jobs/j/claim": (500, "outcome_unknown"),
        "/v1/jobs/k/claim": (503, "unavailable"),
    }

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, reason = answers[self.path]
            body = json_module.dumps(
                {"type": "about:blank", "title": "x", "status": status, "detail": "d", "reason": reason}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/problem+json")
            self.send_header("Content-Length", str(len(body)))
            if status == 503:
                self.send_header("Retry-After", "1")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = lease.Store(f"http://127.0.0.1:{server.server_port}", api_key="lk_0000_x")
        with pytest.raises(lease.OutcomeUnknown, match="outcome_unknown"):
            store.claim("j", A, 30.0)
        with pytest.raises(lease.StoreUnavailable, match="unavailable"):
            store.claim("k", A, 30.0)
    finally:
        server.shutdown()


def test_a_lease_released_unstarted_gives_its_attempt_back(store):
    for job, queue in [("given", "g"), ("released", "r")]:
        store.enqueue(job, queue=queue, max_attempts=1)
    (given,) = store.claim_next("g", A, 30)
    assert store.release("given", A, given.fence, unstarted=True)
    (released,) = store.claim_next("r", A, 30)
    assert store.release("released", A, released.fence)
    (again,) = store.claim_next("g", B, 30)
    assert (again.id, again.fence, again.attempt) == ("given", 2, 1)
    assert store.claim_next("r", B, 30) == []
    assert store.record("released").status == "dead"


def test_the_epoch_is_in_every_fence_and_a_raise_puts_the_next_fences_above(store, opening):
    """A database store says its epoch; after `lease epoch --raise` (a restore the store could
    not see) every fence it hands out is in the new epoch, above every fence before it. Over
    HTTP the epoch is not read: a fence carries it."""
    target, _ = opening
    if store.kind == "http":
        with pytest.raises(lease.InvalidInput, match="the epoch is read from a database"):
            store.epoch()
        return
    assert store.epoch() == 0
    store.enqueue("e")
    before = store.claim("e", "w", 1, now=0)
    assert before.fence == 1
    raised = subprocess.run(
        [lease_bin(), "--db", target, "epoch", "--raise", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert json.loads(raised.stdout)["epoch"] == 1
    assert store.epoch() == 1
    after = store.claim("e", "w", 1, now=10)
    assert after.fence == (1 << 32) | 1
    assert after.fence >> 32 == store.epoch()
