"""Fenced leases and a work queue: a stale worker's write is refused and the newer result stands.

Three ways in, over the same Rust stores the ``lease`` command uses:

- The problem statement's functions, each acting on the SQLite file its path names at the call
  (a process keeps its connection to a path while the path names the same file):
  :func:`init_db`, :func:`enqueue`, :func:`state`, :func:`claim`, :func:`renew`,
  :func:`complete`, :func:`release`, :func:`claim_many`.
- The queue: :class:`Store` (blocking) and :class:`AsyncStore` (asyncio) on a SQLite path, a
  ``postgres://`` URL or a ``lease serve`` URL with an API key.
- Workers: :class:`Worker` runs a Python function per job, with the Rust runtime's heartbeat,
  retries and shutdown.

And :mod:`lease.guard` writes a job's result to the resource it goes to under its fence.

Refusals by the lease rules are values (``None``/``False``, or :class:`Refused`); errors are
exceptions under :class:`lease.errors.LeaseError`, invalid input also a ``ValueError``.
"""

from __future__ import annotations

import functools
import os
import socket
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Optional, TypeVar, Union

from . import errors, guard
from ._lease import (
    Accepted,
    AuditRow,
    Backoff,
    Failed,
    Job,
    Lease,
    QueueSettings,
    Throttle,
    GroupLoad,
    Record,
    Refused,
    Schedule,
    StatsRow,
    Summary,
    __version__,
    claim,
    claim_many,
    complete,
    enqueue,
    init_db,
    release,
    renew,
    state,
)
from ._lease import Pending
from ._lease import StoreCore as _StoreCore
from ._lease import WorkerCore as _WorkerCore
from .errors import *  # noqa: F403 - every exception, named in errors.__all__
from .errors import InvalidInput

if TYPE_CHECKING:
    from typing_extensions import Concatenate, ParamSpec

    _P = ParamSpec("_P")

__all__ = [
    "__version__",
    "init_db",
    "enqueue",
    "state",
    "claim",
    "renew",
    "complete",
    "release",
    "claim_many",
    "Store",
    "AsyncStore",
    "Worker",
    "Job",
    "Summary",
    "Lease",
    "Accepted",
    "Refused",
    "Failed",
    "Record",
    "StatsRow",
    "QueueSettings",
    "Throttle",
    "GroupLoad",
    "Schedule",
    "AuditRow",
    "Backoff",
    "errors",
    "guard",
    *errors.__all__,
]

PathOrUrl = Union[str, "os.PathLike[str]"]

_T = TypeVar("_T")


def _blocking(
    method: Callable[Concatenate[_StoreCore, _P], Pending[_T]],
) -> Callable[Concatenate[Store, _P], _T]:
    """The store's ``method`` as a blocking method: the call waits for its answer, with the
    interpreter released."""

    def call(self: Store, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return method(self._core, *args, **kwargs).wait()

    return functools.update_wrapper(call, method)


def _asyncio(
    method: Callable[Concatenate[_StoreCore, _P], Pending[_T]],
) -> Callable[Concatenate[AsyncStore, _P], Coroutine[Any, Any, _T]]:
    """The store's ``method`` as a coroutine: the call runs on the package's runtime when the
    coroutine is awaited, so the event loop is never blocked."""

    async def call(self: AsyncStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await method(self._core, *args, **kwargs)

    return functools.update_wrapper(call, method)


class _Opened:
    """What both stores share: opening, and what was opened."""

    def __init__(
        self,
        target: PathOrUrl,
        *,
        api_key: Optional[str] = None,
        create: bool = False,
        audit: Optional[int] = None,
        busy_timeout: Optional[float] = None,
        ca_cert: Optional[PathOrUrl] = None,
        schema: Optional[str] = None,
    ) -> None:
        self._core = _StoreCore(
            target,
            api_key=api_key,
            create=create,
            audit=audit,
            busy_timeout=busy_timeout,
            ca_cert=ca_cert,
            schema=schema,
        )

    @property
    def kind(self) -> str:
        """``sqlite``, ``postgres`` or ``http``."""
        return self._core.kind

    @property
    def target(self) -> str:
        """The path or URL the store was opened with."""
        return self._core.target

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target!r})"


# Each method of the stores is declared once, on the native ``StoreCore`` (its signature and
# docstring in Rust, its types in ``_lease.pyi``, the two checked against each other by
# stubtest); ``Store`` waits for each call and ``AsyncStore`` awaits it.


class Store(_Opened):
    """A lease store: a SQLite file (a path), a PostgreSQL database (``postgres://...``) or a
    ``lease serve`` (``http://`` or ``https://`` with ``api_key``).

    Every method blocks until the store answers, with the interpreter released, so threads
    run meanwhile; Ctrl-C interrupts a wait. A refusal by the lease rules is returned as
    :class:`Refused` (false in a boolean test); errors raise :class:`LeaseError`. Times are
    Unix seconds; ``now`` defaults to this host's clock (a store that decides by its own clock,
    such as ``lease serve``, uses its own).

    Open a Store in the process that uses it: one opened before ``fork`` refuses to work in the
    child.

    :param target: a SQLite path, a ``postgres://`` URL, or a ``lease serve`` URL.
    :param api_key: the key of a ``lease serve`` URL.
    :param create: make the file (or schema) when missing; otherwise a missing one is
        :class:`NotFound`, so a mistyped path never becomes a database.
    :param audit: record refused writes in the audit trail, keeping the newest ``audit`` rows.
    :param busy_timeout: seconds to wait for a lock another process holds (SQLite) or for a
        pooled connection (PostgreSQL).
    :param ca_cert: a PEM file to trust for an ``https://`` server besides the system's CAs.
    :param schema: the PostgreSQL schema (default ``lease``).
    """

    enqueue = _blocking(_StoreCore.enqueue)
    enqueue_many = _blocking(_StoreCore.enqueue_many)
    claim = _blocking(_StoreCore.claim)
    claim_next = _blocking(_StoreCore.claim_next)
    renew = _blocking(_StoreCore.renew)
    progress = _blocking(_StoreCore.progress)
    complete = _blocking(_StoreCore.complete)
    fail = _blocking(_StoreCore.fail)
    release = _blocking(_StoreCore.release)
    cancel = _blocking(_StoreCore.cancel)
    retry = _blocking(_StoreCore.retry)
    bulk = _blocking(_StoreCore.bulk)
    purge = _blocking(_StoreCore.purge)
    record = _blocking(_StoreCore.record)
    state = _blocking(_StoreCore.state)
    list = _blocking(_StoreCore.list)
    stats = _blocking(_StoreCore.stats)
    audit = _blocking(_StoreCore.audit)
    pause = _blocking(_StoreCore.pause)
    resume = _blocking(_StoreCore.resume)
    limit = _blocking(_StoreCore.limit)
    hold_group = _blocking(_StoreCore.hold_group)
    checkpoint = _blocking(_StoreCore.checkpoint)
    checkpoints = _blocking(_StoreCore.checkpoints)
    attempts = _blocking(_StoreCore.attempts)
    graph = _blocking(_StoreCore.graph)
    trace = _blocking(_StoreCore.trace)
    epoch = _blocking(_StoreCore.epoch)
    throttle = _blocking(_StoreCore.throttle)
    groups = _blocking(_StoreCore.groups)
    queues = _blocking(_StoreCore.queues)
    put_schedule = _blocking(_StoreCore.put_schedule)
    schedules = _blocking(_StoreCore.schedules)
    remove_schedule = _blocking(_StoreCore.remove_schedule)
    run_schedule = _blocking(_StoreCore.run_schedule)


class AsyncStore(_Opened):
    """:class:`Store` for asyncio: the same methods as coroutines, each run on the package's
    own runtime, so the event loop is never blocked. Cancelling the awaiting task drops the
    call; a write already sent stays sent (``state`` tells). The constructor (opening the
    store) blocks briefly. A :class:`Worker` takes either kind of store.
    """

    enqueue = _asyncio(_StoreCore.enqueue)
    enqueue_many = _asyncio(_StoreCore.enqueue_many)
    claim = _asyncio(_StoreCore.claim)
    claim_next = _asyncio(_StoreCore.claim_next)
    renew = _asyncio(_StoreCore.renew)
    progress = _asyncio(_StoreCore.progress)
    complete = _asyncio(_StoreCore.complete)
    fail = _asyncio(_StoreCore.fail)
    release = _asyncio(_StoreCore.release)
    cancel = _asyncio(_StoreCore.cancel)
    retry = _asyncio(_StoreCore.retry)
    bulk = _asyncio(_StoreCore.bulk)
    purge = _asyncio(_StoreCore.purge)
    record = _asyncio(_StoreCore.record)
    state = _asyncio(_StoreCore.state)
    list = _asyncio(_StoreCore.list)
    stats = _asyncio(_StoreCore.stats)
    audit = _asyncio(_StoreCore.audit)
    pause = _asyncio(_StoreCore.pause)
    resume = _asyncio(_StoreCore.resume)
    limit = _asyncio(_StoreCore.limit)
    hold_group = _asyncio(_StoreCore.hold_group)
    checkpoint = _asyncio(_StoreCore.checkpoint)
    checkpoints = _asyncio(_StoreCore.checkpoints)
    attempts = _asyncio(_StoreCore.attempts)
    graph = _asyncio(_StoreCore.graph)
    trace = _asyncio(_StoreCore.trace)
    epoch = _asyncio(_StoreCore.epoch)
    throttle = _asyncio(_StoreCore.throttle)
    groups = _asyncio(_StoreCore.groups)
    queues = _asyncio(_StoreCore.queues)
    put_schedule = _asyncio(_StoreCore.put_schedule)
    schedules = _asyncio(_StoreCore.schedules)
    remove_schedule = _asyncio(_StoreCore.remove_schedule)
    run_schedule = _asyncio(_StoreCore.run_schedule)


def _default_owner() -> str:
    return f"{socket.gethostname()}/{os.getpid()}"


class Worker:
    """Runs ``handler(job)`` for each job of ``queue``, on the Rust runtime of ``lease work``:
    it claims due jobs, renews each lease every ``ttl * renew_fraction`` seconds, stores what
    the handler returns (a ``str``, or None for an empty result) or fails the job with the
    exception's text (retried after ``backoff`` while attempts remain), and stops a job the
    moment its lease is lost or it is cancelled.

    A payload sealed with a key of the environment (``LEASE_PAYLOAD_KEY`` or
    ``LEASE_PAYLOAD_KEY_FILE``, docs/ENCRYPTION.md) reaches the handler opened; with
    ``seal_results`` each result is sealed with it before it is stored. With
    ``require_sealed`` (default: ``LEASE_REQUIRE_SEALED`` in the environment) a plain payload
    is refused (the job fails naming it and the handler does not run) and every result is
    sealed, so a plaintext payload swapped into a sealed queue is never run; it needs a key.

    ``prefetch`` leases are held beyond the running ones, ready to start (renewed while they
    wait, released at the end), while the recent jobs ran shorter than 50 ms on average: a
    finished job's next one then starts while its result commits. The default (``None``)
    holds as many as the handlers run in 20 ms at their recent average, at least one per
    ``concurrency`` and at most 128 beyond that. Each is a real lease, counted by the queue's
    limits; ``prefetch=0`` holds none.

    ``handler`` runs on threads of its own (``concurrency`` at once) and gets a
    :class:`Job`: its ``id``, ``fence``, ``attempt`` and ``payload``, and ``cancelled`` /
    ``wait_cancelled()`` for the stop. A Python thread cannot be killed: a handler that goes on
    after the stop runs to its end, but nothing it returns is stored for that lease, and its
    late writes to a guarded resource are refused by its fence. A program that must be stopped
    for real belongs under ``lease work -- CMD``, which stops the program's whole process
    group.

    With ``tracer`` (an OpenTelemetry ``Tracer``; needs the ``opentelemetry`` package), each
    attempt is a span ``lease.attempt`` (kind consumer; attributes ``job``, ``queue``,
    ``fence``, ``attempt``) joined to the trace its job was enqueued in: a child of the
    enqueuing span on the first attempt, on a retry a trace of its own linked to it. The
    handler runs inside it, so its own spans and enqueues join it. A failed attempt's span has
    status error, without the exception's text (which may quote the payload). Without a
    ``tracer`` the handler still reads its job's context as ``job.traceparent`` (one store
    read, made when it is first asked).

    :meth:`run` returns a :class:`Summary` when ``max_jobs`` are done or, with
    ``exit_when_empty``, the queue is empty. Ctrl-C stops claiming and lets running jobs finish
    within ``drain`` seconds (a second Ctrl-C releases them at once), then the
    ``KeyboardInterrupt`` goes on.
    """

    def __init__(
        self,
        store: Union[Store, "AsyncStore"],
        handler: Callable[[Job], Optional[str]],
        *,
        queue: str = "default",
        owner: Optional[str] = None,
        ttl: float = 30.0,
        concurrency: int = 1,
        prefetch: Optional[int] = None,
        seal_results: bool = False,
        require_sealed: Optional[bool] = None,
        renew_fraction: float = 1.0 / 3.0,
        idle_poll: float = 0.5,
        retry: bool = True,
        backoff: Optional[Backoff] = None,
        max_jobs: Optional[int] = None,
        exit_when_empty: bool = False,
        drain: float = 30.0,
        cancel_grace: float = 5.0,
        tracer: Optional[Any] = None,
    ) -> None:
        if not isinstance(store, _Opened):
            raise InvalidInput(
                f"store: must be a lease.Store or lease.AsyncStore, got {type(store).__name__}"
            )
        self.store = store
        self.owner = owner if owner is not None else _default_owner()
        if tracer is not None:
            handler = _traced(handler, tracer, queue)
        self._core = _WorkerCore(
            store._core,
            handler,
            queue=queue,
            owner=self.owner,
            ttl=ttl,
            concurrency=concurrency,
            prefetch=prefetch,
            seal_results=seal_results,
            require_sealed=require_sealed,
            renew_fraction=renew_fraction,
            idle_poll=idle_poll,
            retry=retry,
            backoff=backoff,
            max_jobs=max_jobs,
            exit_when_empty=exit_when_empty,
            drain=drain,
            cancel_grace=cancel_grace,
            trace=tracer is not None,
        )

    def run(self) -> Summary:
        """Runs the worker until it stops (see the class); what it did."""
        return self._core.run()


def _traced(
    handler: Callable[[Job], Optional[str]], tracer: Any, queue: str
) -> Callable[[Job], Optional[str]]:
    """``handler`` run in a span ``lease.attempt`` of ``tracer``, joined to the trace the job
    was enqueued in (:class:`Worker`'s ``tracer``)."""
    try:
        from opentelemetry import context as otel_context
        from opentelemetry import trace as otel_trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as e:
        raise InvalidInput("tracer: needs the opentelemetry package") from e
    propagator = TraceContextTextMapPropagator()

    def run(job: Job) -> Optional[str]:
        parent = otel_context.Context()
        links: list[Any] = []
        if job.traceparent is not None:
            carrier = {"traceparent": job.traceparent}
            if job.tracestate is not None:
                carrier["tracestate"] = job.tracestate
            enqueued = propagator.extract(carrier)
            if job.attempt <= 1:
                parent = enqueued
            else:
                linked = otel_trace.get_current_span(enqueued).get_span_context()
                links.append(otel_trace.Link(linked))
        with tracer.start_as_current_span(
            "lease.attempt",
            context=parent,
            kind=otel_trace.SpanKind.CONSUMER,
            links=links,
            attributes={"job": job.id, "queue": queue, "fence": job.fence, "attempt": job.attempt},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return handler(job)
            except BaseException:
                span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR))
                raise

    return run
