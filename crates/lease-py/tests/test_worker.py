"""Python workers on the Rust runtime: results stored, failures retried, a lost lease stops the
handler and its late result is not stored, Ctrl-C drains."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import lease
from conftest import WriteLock


def test_a_worker_runs_every_job_and_stores_what_its_handler_returns(opening):
    target, how = opening
    store = lease.Store(target, **how)
    store.enqueue_many([{"id": f"j{i}", "payload": f"{i}"} for i in range(30)])
    seen = []

    def handle(job):
        seen.append((job.id, job.fence, job.attempt))
        return "r" + job.payload.decode()

    summary = lease.Worker(
        store, handle, owner="py/w", concurrency=4, exit_when_empty=True, idle_poll=0.05
    ).run()
    assert summary.completed == 30 and summary.failed == 0 and summary.lost == 0
    assert sorted(j for j, _, _ in seen) == sorted(f"j{i}" for i in range(30))
    assert all(fence == 1 and attempt == 1 for _, fence, attempt in seen)
    assert store.record("j7").result == "r7"


def test_a_prefetching_worker_runs_every_job_once_and_gives_back_what_it_held(opening):
    target, how = opening
    store = lease.Store(target, **how)
    store.enqueue_many([{"id": f"p{i}", "payload": f"{i}"} for i in range(40)])
    seen = []

    def handle(job):
        seen.append((job.id, job.fence))
        return "r" + job.payload.decode()

    summary = lease.Worker(
        store, handle, owner="py/p", concurrency=2, prefetch=4, max_jobs=25, idle_poll=0.05
    ).run()
    assert summary.completed == 25 and summary.lost == 0
    assert len(seen) == 25 and len({j for j, _ in seen}) == 25
    assert all(fence == 1 for _, fence in seen)
    # What was held ahead beyond max_jobs was released, not run: every other job is pending.
    records = [store.record(f"p{i}") for i in range(40)]
    assert sum(r.status == "done" for r in records) == 25
    assert all(r.status == "pending" and r.owner is None for r in records if r.status != "done")


def test_a_handler_s_exception_fails_the_job_and_it_is_retried_then_dead(db):
    store = lease.Store(db, create=True)
    store.enqueue("flaky", max_attempts=3)
    store.enqueue("typed", max_attempts=1)
    calls = []

    def handle(job):
        calls.append((job.id, job.attempt))
        if job.id == "typed":
            return 42
        raise RuntimeError(f"attempt {job.attempt} broke")

    summary = lease.Worker(
        store,
        handle,
        owner="w",
        max_jobs=4,
        idle_poll=0.02,
        backoff=lease.Backoff(base=0.01, jitter=0),
    ).run()
    assert [a for j, a in calls if j == "flaky"] == [1, 2, 3]
    flaky = store.record("flaky")
    assert (flaky.status, flaky.error) == ("dead", "RuntimeError: attempt 3 broke")
    typed = store.record("typed")
    assert typed.status == "dead" and "returned a int, not a str or None" in typed.error
    assert summary.failed == 4


def test_a_worker_that_loses_its_lease_stops_its_handler_and_its_result_is_not_stored(db):
    store = lease.Store(db, create=True)
    store.enqueue("j")
    started = threading.Event()
    seen = {}

    def slow(job):
        seen["fence"] = job.fence
        started.set()
        seen["cancelled"] = job.wait_cancelled(10)
        seen["cancelled_at"] = time.time()
        return "from the stale worker"

    worker = lease.Worker(store, slow, owner="a", ttl=1.5, max_jobs=1)
    summary = {}
    runner = threading.Thread(target=lambda: summary.update(done=worker.run()))
    runner.start()
    assert started.wait(10)
    # Another process holds SQLite's write lock for longer than the lease: every renewal
    # waits on it, and the runtime must still stop the handler before the lease ends.
    lock = WriteLock(db)
    time.sleep(3.0)
    lock.release()
    runner.join(30)
    assert seen["cancelled"] is True
    # Stopped before the lease ended: `until` is the last renewal's, which the lock froze.
    until = store.record("j").until
    assert seen["cancelled_at"] < until, (seen["cancelled_at"], until)
    assert summary["done"].lost == 1 and summary["done"].completed == 0
    # The lease has ended; a new worker takes the job and its result stands.
    (again,) = store.claim_next("default", "b", 30.0)
    assert again.fence == seen["fence"] + 1
    assert store.complete("j", "b", again.fence, "from b")
    assert store.record("j").result == "from b"


def test_ctrl_c_drains_the_running_job_then_raises_keyboard_interrupt(db):
    store = lease.Store(db, create=True)
    store.enqueue("long")
    script = textwrap.dedent(
        f"""
        import sys, time, lease
        store = lease.Store({db!r})
        def handle(job):
            print("started", flush=True)
            time.sleep(1.0)
            return "finished"
        try:
            lease.Worker(store, handle, owner="w", idle_poll=0.05).run()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "started"
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 3, out
    assert "interrupted" in out
    assert store.record("long").result == "finished"


def test_worker_settings_are_checked_and_named(db):
    store = lease.Store(db, create=True)
    for kwargs, named in [
        ({"concurrency": 0}, "concurrency"),
        ({"prefetch": -1}, "prefetch"),
        ({"ttl": 0}, "ttl"),
        ({"renew_fraction": 1.5}, "renew_fraction"),
        ({"drain": -1}, "drain"),
        ({"queue": ""}, "queue"),
    ]:
        with pytest.raises(ValueError, match=named):
            lease.Worker(store, lambda job: None, owner="w", **kwargs)
    with pytest.raises(ValueError, match="handler"):
        lease.Worker(store, "not callable", owner="w")
    with pytest.raises(ValueError, match="store"):
        lease.Worker(db, lambda job: None)


def test_the_default_owner_names_the_host_and_the_process(db):
    store = lease.Store(db, create=True)
    worker = lease.Worker(store, lambda job: None)
    assert worker.owner.endswith(f"/{os.getpid()}")


def test_a_handler_holds_its_jobs_group_when_its_upstream_says_429(db):
    store = lease.Store(db, create=True)
    store.enqueue("m1", group="merchant-9")
    store.enqueue("m2", group="merchant-9")
    store.enqueue("other", group="merchant-1")
    store.enqueue("loner")
    seen = {}

    def handle(job):
        if job.id == "m1":
            # The upstream answered 429 with Retry-After: 3600.
            seen["held"] = job.hold_group(3600)
            with pytest.raises(lease.InvalidInput) as raised:
                job.hold_group(-1)
            seen["bad"] = str(raised.value)
            raise RuntimeError("rate limited upstream")
        if job.id == "loner":
            seen["loner"] = job.hold_group(60)
        return "ok"

    summary = lease.Worker(store, handle, owner="py/w", exit_when_empty=True, idle_poll=0.05).run()
    assert seen["held"] is True and seen["loner"] is False
    assert "seconds" in seen["bad"]
    (settings,) = store.queues()
    assert list(settings.paused_groups) == ["merchant-9"]
    assert settings.paused_groups["merchant-9"] > time.time() + 3000
    # The group's other job waited; the rest ran.
    assert store.record("m2").status == "pending"
    assert store.record("other").status == "done" and store.record("loner").status == "done"
    assert summary.completed == 2


def test_a_handler_reports_progress_under_its_fence_and_sees_its_timeout_and_group(db):
    store = lease.Store(db, create=True)
    store.enqueue("p", timeout=120, group="acct-7")
    seen = {}

    def handle(job):
        seen["timeout"] = job.timeout
        seen["group"] = job.group
        seen["stored"] = job.progress("3 of 10")
        seen["record"] = store.record("p").progress
        with pytest.raises(lease.InvalidInput) as raised:
            job.progress("x" * 1025)
        seen["too_long"] = str(raised.value)
        return "done"

    summary = lease.Worker(store, handle, owner="py/w", exit_when_empty=True, idle_poll=0.05).run()
    assert summary.completed == 1
    assert seen["timeout"] == 120.0 and seen["stored"] is True
    assert seen["group"] == "acct-7"
    assert seen["record"] == "3 of 10"
    assert "progress" in seen["too_long"]
    assert store.record("p").progress == "3 of 10"


def test_a_handler_reads_its_parents_results_and_a_child_runs_after_them(opening):
    target, how = opening
    store = lease.Store(target, **how)
    assert store.enqueue_many(
        [
            {"id": "sum", "after": ["left", "right"]},
            {"id": "left", "payload": "2"},
            {"id": "right", "payload": "3"},
        ]
    ) == [True, True, True]
    order = []

    def handle(job):
        order.append(job.id)
        parents = job.parents()
        if job.id != "sum":
            assert parents == {}
            return str(int(job.payload.decode()) * 10)
        assert list(parents) == ["left", "right"], "in the order named"
        assert all(p["status"] == "done" and p["result_fence"] == 1 for p in parents.values())
        return str(sum(int(p["result"]) for p in parents.values()))

    summary = lease.Worker(
        store, handle, owner="py/w", concurrency=1, exit_when_empty=True, idle_poll=0.05
    ).run()
    assert summary.completed == 3 and summary.failed == 0
    assert order[-1] == "sum", "the child ran after both parents"
    assert store.record("sum").result == "50"


def test_a_retried_job_resumes_after_the_steps_its_failed_attempt_kept(opening):
    target, how = opening
    store = lease.Store(target, **how)
    store.enqueue("etl")
    ran = []

    def handle(job):
        def extract():
            ran.append(("extract", job.attempt))
            return f"rows of attempt {job.attempt}"

        def load():
            ran.append(("load", job.attempt))
            if job.attempt == 1:
                raise RuntimeError("the warehouse is down")
            return "loaded"

        rows = job.step("extract", extract)
        return job.step("load", load) + " " + rows

    summary = lease.Worker(
        store,
        handle,
        owner="py/w",
        max_jobs=2,
        idle_poll=0.02,
        backoff=lease.Backoff(base=0.01, jitter=0),
    ).run()
    assert (summary.failed, summary.completed) == (1, 1)
    assert ran == [("extract", 1), ("load", 1), ("load", 2)], "the kept step ran once"
    assert store.record("etl").result == "loaded rows of attempt 1"
    assert store.checkpoints("etl") == {"extract": "rows of attempt 1", "load": "loaded"}


# 32 bytes in base64: a payload key (docs/ENCRYPTION.md).
PAYLOAD_KEY = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA="


def test_an_encrypted_payload_leaves_python_sealed_and_reaches_the_handler_opened(
    opening, monkeypatch
):
    target, how = opening
    monkeypatch.setenv("LEASE_PAYLOAD_KEY", PAYLOAD_KEY)
    store = lease.Store(target, **how)
    store.enqueue("mail", payload="to=alice@example.com", max_attempts=1)
    store.enqueue_many([{"id": "mail2", "payload": b"to=bob@example.com"}])
    for job in ("mail", "mail2"):
        stored = store.record(job).payload
        assert stored.startswith(b"\xfflease\x01"), stored
        assert b"example.com" not in stored
    seen = {}

    def handle(job):
        seen[job.id] = job.payload
        return "sent"

    summary = lease.Worker(
        store, handle, owner="py/sealed", exit_when_empty=True, idle_poll=0.05
    ).run()
    assert summary.completed == 2
    assert seen == {"mail": b"to=alice@example.com", "mail2": b"to=bob@example.com"}


def test_a_sealed_payload_without_its_key_fails_the_job_naming_the_key(db, monkeypatch):
    monkeypatch.setenv("LEASE_PAYLOAD_KEY", PAYLOAD_KEY)
    store = lease.Store(db, create=True)
    store.enqueue("mail", payload="to=alice@example.com", max_attempts=1)
    monkeypatch.delenv("LEASE_PAYLOAD_KEY")
    ran = []
    summary = lease.Worker(
        store, ran.append, owner="py/nokey", exit_when_empty=True, idle_poll=0.05
    ).run()
    assert summary.failed == 1 and ran == []
    record = store.record("mail")
    assert record.status == "dead"
    assert "job mail is encrypted with key key-" in record.error
    assert "alice" not in record.error


def test_a_bad_payload_key_is_a_value_error_naming_the_variable_and_stores_nothing(
    db, monkeypatch
):
    store = lease.Store(db, create=True)
    monkeypatch.setenv("LEASE_PAYLOAD_KEY", "c2hvcnQ=")
    with pytest.raises(ValueError, match="LEASE_PAYLOAD_KEY is 5 bytes, not 32") as told:
        store.enqueue("mail", payload="to=alice@example.com")
    assert "c2hvcnQ=" not in str(told.value)
    assert store.record("mail") is None
    with pytest.raises(ValueError, match="LEASE_PAYLOAD_KEY is 5 bytes"):
        lease.Worker(store, lambda job: "x", owner="py/bad")


def test_with_seal_results_a_result_is_stored_sealed(db, monkeypatch):
    store = lease.Store(db, create=True)
    store.enqueue("report")
    with pytest.raises(ValueError, match="seal_results: needs a key"):
        lease.Worker(store, lambda job: "x", owner="py/seal", seal_results=True)
    monkeypatch.setenv("LEASE_PAYLOAD_KEY", PAYLOAD_KEY)
    summary = lease.Worker(
        store,
        lambda job: "revenue 42",
        owner="py/seal",
        seal_results=True,
        exit_when_empty=True,
        idle_poll=0.05,
    ).run()
    assert summary.completed == 1
    result = store.record("report").result
    assert result.startswith("lease-sealed:v1:key-") and "revenue" not in result


def test_a_plaintext_payload_swapped_into_a_sealed_queue_is_refused(opening, monkeypatch):
    target, how = opening
    monkeypatch.setenv("LEASE_PAYLOAD_KEY", PAYLOAD_KEY)
    store = lease.Store(target, **how)
    store.enqueue("mail", payload="to=alice@example.com", max_attempts=1)
    # Whoever can enqueue without the key puts a plaintext job beside it.
    monkeypatch.delenv("LEASE_PAYLOAD_KEY")
    store.enqueue("swapped", payload="to=mallory@example.com", max_attempts=1)
    # A producer that must seal and has no key is refused, with nothing stored.
    monkeypatch.setenv("LEASE_REQUIRE_SEALED", "1")
    with pytest.raises(ValueError, match="LEASE_REQUIRE_SEALED"):
        store.enqueue("clear", payload="to=bob@example.com")
    assert store.record("clear") is None
    with pytest.raises(ValueError, match="require_sealed: needs a key"):
        lease.Worker(store, lambda job: "x", owner="py/nokey")
    monkeypatch.setenv("LEASE_PAYLOAD_KEY", PAYLOAD_KEY)
    seen = {}

    def handle(job):
        seen[job.id] = job.payload
        return "sent"

    # The environment requires sealed values: the worker refuses the plain one and seals.
    summary = lease.Worker(
        store, handle, owner="py/strict", exit_when_empty=True, idle_poll=0.05
    ).run()
    assert (summary.completed, summary.failed) == (1, 1)
    assert seen == {"mail": b"to=alice@example.com"}
    refused = store.record("swapped")
    assert refused.status == "dead" and "not sealed" in refused.error
    assert store.record("mail").result.startswith("lease-sealed:v1:")
    # Said explicitly, it overrides the environment.
    monkeypatch.setenv("LEASE_REQUIRE_SEALED", "maybe")
    with pytest.raises(ValueError, match="LEASE_REQUIRE_SEALED"):
        lease.Worker(store, lambda job: "x", owner="py/typo")
    lease.Worker(store, lambda job: "x", owner="py/explicit", require_sealed=False)


class CountingProxy:
    """An HTTP proxy in front of ``lease serve`` that keeps, per path, the bodies sent."""

    def __init__(self, upstream):
        import http.client
        import http.server
        import threading
        import urllib.parse

        target = urllib.parse.urlparse(upstream)
        self.seen = []
        seen = self.seen

        class Relay(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                self.relay("POST")

            def do_GET(self):
                self.relay("GET")

            def relay(self, method):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                seen.append((self.path, body))
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(method, self.path, body=body or None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()


def test_a_worker_over_http_sends_its_writes_as_settle_requests(server):
    proxy = CountingProxy(server.url)
    try:
        store = lease.Store(proxy.url, api_key=server.key)
        store.enqueue_many([{"id": f"h{i}"} for i in range(24)] + [{"id": "bad", "max_attempts": 1}])

        def handle(job):
            if job.id == "bad":
                raise RuntimeError("broke")
            return "ok"

        summary = lease.Worker(
            store, handle, owner="py/h", concurrency=4, exit_when_empty=True, idle_poll=0.05
        ).run()
        assert summary.completed == 24 and summary.failed == 1
        settles = [json.loads(body) for path, body in proxy.seen if path == "/v1/leases/settle"]
        ops = [(w["op"], w["id"]) for s in settles for w in s["writes"]]
        # Every completion and the failure went through the request of many writes, none
        # through the one-lease routes.
        assert sorted(i for op, i in ops if op == "complete") == sorted(f"h{i}" for i in range(24))
        assert [i for op, i in ops if op == "fail"] == ["bad"]
        assert not [p for p, _ in proxy.seen if p.endswith(("/complete", "/fail"))]
    finally:
        proxy.stop()
