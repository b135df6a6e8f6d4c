"""Traces across the queue from Python: a job enqueued inside an OpenTelemetry span keeps that
span's context (or the one passed as ``traceparent``), and a ``Worker`` with a ``tracer`` runs
each attempt in a span ``lease.attempt`` joined to it: a child of the enqueuing span on the first
attempt, a trace of its own linked to it on a retry. The spans are collected by the SDK's
in-memory exporter; none holds a payload, a result or an error's text.
"""

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import lease

SECRET = "payload-that-must-not-be-traced"
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def spans():
    """A tracer of its own (the global provider is left alone) and what it exported."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("lease-test"), exporter
    provider.shutdown()


def run(store, handler, tracer, jobs, queue="default"):
    worker = lease.Worker(
        store,
        handler,
        queue=queue,
        tracer=tracer,
        max_jobs=jobs,
        idle_poll=0.01,
        backoff=lease.Backoff(base=0.01, jitter=0),
    )
    return worker.run()


def test_attempts_join_the_trace_of_the_span_their_job_was_enqueued_in(store, spans):
    tracer, exporter = spans
    with tracer.start_as_current_span("produce") as produce:
        assert store.enqueue("flaky", payload=SECRET, max_attempts=2)
        assert store.enqueue_many([{"id": "steady", "payload": SECRET}]) == [True]
    seen = {}

    def handler(job):
        seen[(job.id, job.attempt)] = job.traceparent
        with tracer.start_as_current_span("inside"):
            pass
        if job.id == "flaky" and job.attempt == 1:
            raise RuntimeError(f"failed on {SECRET}")
        return f"done-{SECRET}"

    summary = run(store, handler, tracer, 3)
    assert (summary.completed, summary.failed) == (2, 1)
    producer = produce.get_span_context()
    enqueued = f"00-{producer.trace_id:032x}-{producer.span_id:016x}-01"
    # The worker read each job's context: the producer's span, on every attempt.
    assert seen == {("flaky", 1): enqueued, ("flaky", 2): enqueued, ("steady", 1): enqueued}
    finished = exporter.get_finished_spans()
    attempts = {
        (s.attributes["job"], s.attributes["attempt"]): s
        for s in finished
        if s.name == "lease.attempt"
    }
    assert set(attempts) == {("flaky", 1), ("flaky", 2), ("steady", 1)}
    for first in (attempts[("flaky", 1)], attempts[("steady", 1)]):
        assert first.kind == SpanKind.CONSUMER
        assert first.context.trace_id == producer.trace_id
        assert first.parent.span_id == producer.span_id
    # The failed attempt says so, without the error's text.
    failed = attempts[("flaky", 1)]
    assert failed.status.status_code == StatusCode.ERROR
    assert not failed.status.description
    # The retry is a trace of its own, linked to the enqueuing span.
    retry = attempts[("flaky", 2)]
    assert retry.parent is None
    assert retry.context.trace_id != producer.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in retry.links] == [
        (producer.trace_id, producer.span_id)
    ]
    # The handler's own spans are its attempt's children.
    inside = [s for s in finished if s.name == "inside"]
    assert {s.parent.span_id for s in inside} == {s.context.span_id for s in attempts.values()}
    # Nothing exported holds the payload, the result or the error's text.
    assert SECRET not in "".join(s.to_json() for s in finished)


def test_a_traceparent_given_is_kept_and_a_bad_one_is_refused_with_nothing_stored(store, spans):
    tracer, _ = spans
    assert store.enqueue("given", traceparent=PARENT, tracestate="vendor=1")
    assert store.enqueue_many([{"id": "batch"}], traceparent=PARENT) == [True]
    with pytest.raises(lease.InvalidInput, match="traceparent") as refused:
        store.enqueue("zeros", traceparent="00-" + "0" * 32 + "-00f067aa0ba902b7-01")
    assert isinstance(refused.value, ValueError)
    with pytest.raises(lease.InvalidInput, match="tracestate: needs a traceparent"):
        store.enqueue_many([{"id": "lonely"}], tracestate="vendor=1")
    assert store.state("zeros") is None and store.state("lonely") is None
    seen = {}

    def handler(job):
        seen[job.id] = (job.traceparent, job.tracestate)

    run(store, handler, tracer, 2)
    assert seen == {"given": (PARENT, "vendor=1"), "batch": (PARENT, None)}


def test_outside_a_span_no_trace_is_kept_and_without_a_tracer_the_handler_still_reads_it(
    store, spans
):
    tracer, exporter = spans
    assert store.enqueue("plain", queue="a")
    with tracer.start_as_current_span("produce") as produce:
        assert store.enqueue("traced", queue="b")
    producer = produce.get_span_context()
    enqueued = f"00-{producer.trace_id:032x}-{producer.span_id:016x}-01"
    # The store shows what it keeps, and None for a job without one or no job at all.
    assert store.trace("traced") == {"traceparent": enqueued, "tracestate": None}
    assert store.trace("plain") is None and store.trace("nobody") is None
    seen = {}

    def handler(job):
        seen[job.id] = (job.traceparent, job.tracestate)

    # Without a tracer the worker makes no span, but propagation does not depend on export:
    # the handler reads its job's context when it asks, to continue the trace in its own SDK.
    lease.Worker(store, handler, queue="b", max_jobs=1, idle_poll=0.01).run()
    assert seen == {"traced": (enqueued, None)}
    assert exporter.get_finished_spans()[-1].name == "produce"
    # A job enqueued outside any span has no context: its attempt is a trace of its own.
    run(store, handler, tracer, 1, queue="a")
    assert seen["plain"] == (None, None)
    (attempt,) = [s for s in exporter.get_finished_spans() if s.name == "lease.attempt"]
    assert attempt.parent is None and not attempt.links
