"""Fenced leases and a work queue: a stale worker's write is refused and the newer result stands.

Three ways in, over the same Rust stores the ``lease`` command uses:

- The problem statement's functions, each opening the SQLite file afresh:
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

import os
import socket
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from . import errors, guard
from ._lease import (
    Accepted,
    AuditRow,
    Backoff,
    Failed,
    Job,
    Lease,
    QueueSettings,
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
from ._lease import StoreCore as _StoreCore
from ._lease import WorkerCore as _WorkerCore
from .errors import *  # noqa: F403 - every exception, named in errors.__all__
from .errors import InvalidInput

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
    "Schedule",
    "AuditRow",
    "Backoff",
    "errors",
    "guard",
    *errors.__all__,
]

Payload = Union[bytes, str, None]
PathOrUrl = Union[str, "os.PathLike[str]"]


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

    def _finish(self, pending: Any) -> Any:
        return pending.wait()

    def enqueue(
        self,
        job_id: str,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: Optional[float] = None,
        max_attempts: Optional[int] = None,
        payload: Payload = None,
        timeout: Optional[float] = None,
        replace_finished: bool = False,
    ) -> bool:
        """Adds a job: True when it was made, False when the id existed (nothing changes then).

        Higher ``priority`` is claimed first; the job is not claimable before ``run_at``;
        ``claim_next`` leases it at most ``max_attempts`` times (default 5); ``payload`` is
        bytes (or text, kept as UTF-8), at most 1 MiB. An attempt may run ``timeout`` seconds
        (default: its queue's, if any) before its worker stops it and fails it "timed out".
        With ``replace_finished``, an id that is done, dead or cancelled runs again (pending,
        attempts from 0, its fence going on, its last result kept until the new run
        completes); a pending or running job is never touched.
        """
        return self._finish(
            self._core.enqueue(
                job_id, queue, priority, run_at, max_attempts, payload, timeout, replace_finished
            )
        )

    def enqueue_many(self, jobs: Iterable[dict], *, queue: str = "default") -> list:
        """Adds many jobs in one transaction, all or none; for each, in order, whether it was
        made. Each job is a dict with ``id`` and any of ``queue`` (default ``queue``),
        ``priority``, ``run_at``, ``max_attempts``, ``payload``, ``timeout`` and ``replace``
        (``"finished"``: as ``replace_finished``)."""
        return self._finish(self._core.enqueue_many(list(jobs), queue))

    def claim(
        self, job_id: str, owner: str, ttl: float, *, now: Optional[float] = None
    ) -> Union[Lease, Refused]:
        """Leases one job by its id for ``ttl`` seconds: a :class:`Lease` with its new fence,
        or :class:`Refused` (``missing``, ``done``, ``live``, ...)."""
        return self._finish(self._core.claim(job_id, owner, ttl, now))

    def claim_next(
        self,
        queue: str,
        owner: str,
        ttl: float,
        *,
        limit: int = 1,
        now: Optional[float] = None,
    ) -> list:
        """Leases up to ``limit`` due jobs of ``queue`` (highest priority first, then the
        oldest), each a :class:`Lease` with its fence, attempt and payload; an empty list when
        none is due."""
        return self._finish(self._core.claim_next(queue, owner, ttl, limit, now))

    def renew(
        self,
        job_id: str,
        owner: str,
        fence: int,
        ttl: float,
        *,
        now: Optional[float] = None,
    ) -> Union[Accepted, Refused]:
        """Extends the live lease of ``owner`` at ``fence`` to ``now + ttl``."""
        return self._finish(self._core.renew(job_id, owner, fence, ttl, now))

    def progress(
        self,
        job_id: str,
        owner: str,
        fence: int,
        text: str,
        *,
        ttl: Optional[float] = None,
        now: Optional[float] = None,
    ) -> Union[Accepted, Refused]:
        """Stores ``text`` (up to 1,024 bytes) as the job's progress, only for the live current
        lease; with ``ttl`` the lease is renewed to ``now + ttl``, without it the lease keeps
        its end."""
        return self._finish(self._core.progress(job_id, owner, fence, text, ttl, now))

    def complete(
        self,
        job_id: str,
        owner: str,
        fence: int,
        result: str = "",
        *,
        now: Optional[float] = None,
    ) -> Union[Accepted, Refused]:
        """Stores ``result`` and marks the job done, only for the live current lease; a stale
        holder gets :class:`Refused` (``stale``, with both fences) and the stored result
        stands."""
        return self._finish(self._core.complete(job_id, owner, fence, result, now))

    def fail(
        self,
        job_id: str,
        owner: str,
        fence: int,
        error: str,
        *,
        retry: bool = True,
        backoff: Optional[Backoff] = None,
        now: Optional[float] = None,
    ) -> Union[Failed, Refused]:
        """Reports a failure of the live current lease: the job is retried after ``backoff``
        while attempts remain (``retry=False``: straight to dead)."""
        return self._finish(
            self._core.fail(job_id, owner, fence, error, retry, backoff, now)
        )

    def release(self, job_id: str, owner: str, fence: int) -> Union[Accepted, Refused]:
        """Gives the lease back (the fence is kept), so the job can be claimed at once."""
        return self._finish(self._core.release(job_id, owner, fence))

    def cancel(self, job_id: str, *, now: Optional[float] = None) -> Union[Accepted, Refused]:
        """Cancels a pending or running job; its holder's later writes are refused."""
        return self._finish(self._core.cancel(job_id, now))

    def retry(self, job_id: str, *, now: Optional[float] = None) -> Union[Accepted, Refused]:
        """Puts a dead or cancelled job back to pending, its attempts starting over."""
        return self._finish(self._core.retry(job_id, now))

    def purge(self, before: float, statuses: Sequence[str] = ("done",)) -> int:
        """Deletes finished jobs (``done``, ``dead``, ``cancelled``) last changed before
        ``before``; how many. A purged id enqueued again goes on from its old fence."""
        return self._finish(self._core.purge(before, list(statuses)))

    def record(self, job_id: str) -> Optional[Record]:
        """Every field of the job (its status judged now), or None."""
        return self._finish(self._core.record(job_id))

    def state(self, job_id: str) -> Optional[dict]:
        """The statement's six fields of the job (``id``, ``owner``, ``until``, ``fence``,
        ``result``, ``done``), or None."""
        return self._finish(self._core.state(job_id))

    def list(
        self,
        *,
        queue: Optional[str] = None,
        status: Optional[str] = None,
        limit: int = 100,
        after: Optional[str] = None,
        now: Optional[float] = None,
    ) -> list:
        """Jobs in id order, as :class:`Record`: of ``queue``, with ``status``, after the id
        ``after`` (the last of the previous page)."""
        return self._finish(self._core.list(queue, status, limit, after, now))

    def stats(self, *, now: Optional[float] = None) -> list:
        """How many jobs each queue has in each status, as :class:`StatsRow`."""
        return self._finish(self._core.stats(now))

    def audit(
        self, *, job: Optional[str] = None, since: Optional[float] = None, limit: int = 100
    ) -> list:
        """The refused writes the audit trail recorded (open the store with ``audit=N``), as
        :class:`AuditRow`, oldest first."""
        return self._finish(self._core.audit(job, since, limit))

    def pause(
        self, queue: str, *, until: Optional[float] = None, now: Optional[float] = None
    ) -> QueueSettings:
        """Pauses ``queue`` (until resumed, or until the time ``until``): no claim leases its
        jobs from the moment the pause commits; enqueueing goes on and running leases are
        untouched. Returns the queue's :class:`QueueSettings`."""
        return self._finish(self._core.pause(queue, until, now))

    def resume(self, queue: str, *, now: Optional[float] = None) -> QueueSettings:
        """Ends a pause of ``queue``."""
        return self._finish(self._core.resume(queue, now))

    def limit(
        self,
        queue: str,
        *,
        concurrency: Optional[int] = None,
        timeout: Optional[float] = None,
        no_timeout: bool = False,
        now: Optional[float] = None,
    ) -> QueueSettings:
        """Sets ``queue``'s concurrency limit (the most of its leases live at once, across
        every worker; 0 removes it) and/or its default timeout in seconds (``no_timeout=True``
        removes it). Both given are one change, applied together or not at all."""
        return self._finish(self._core.limit(queue, concurrency, timeout, no_timeout, now))

    def queues(self, *, now: Optional[float] = None) -> list:
        """Every queue that has settings, as :class:`QueueSettings` (``paused`` as of ``now``)."""
        return self._finish(self._core.queues(now))

    def put_schedule(
        self,
        name: str,
        *,
        cron: str,
        queue: str,
        tz: str = "UTC",
        priority: int = 0,
        max_attempts: Optional[int] = None,
        timeout: Optional[float] = None,
        payload: Payload = None,
        catch_up: str = "latest",
        now: Optional[float] = None,
    ) -> Schedule:
        """Makes or changes the schedule ``name``: each tick of ``cron`` in the time zone ``tz``
        enqueues one job in ``queue``, its id ``NAME@TICK`` (the tick in UTC). ``catch_up`` is
        what a pass does after downtime: ``latest``, ``none``, ``all`` or ``all:N``. A change
        keeps the last tick, so no tick fires twice. Every ``lease serve`` and ``lease work``
        on the store runs the schedules."""
        return self._finish(
            self._core.put_schedule(
                name, cron, queue, tz, priority, max_attempts, timeout, payload, catch_up, now
            )
        )

    def schedules(self, *, now: Optional[float] = None) -> list:
        """Every schedule, as :class:`Schedule` (with its next tick after ``now``)."""
        return self._finish(self._core.schedules(now))

    def remove_schedule(self, name: str) -> bool:
        """Removes a schedule (the jobs its ticks made stay); ``False`` when there was none."""
        return self._finish(self._core.remove_schedule(name))

    def run_schedule(self, name: str, *, now: Optional[float] = None) -> Optional[tuple]:
        """Enqueues the schedule's job now, outside its ticks, as ``NAME@run-TIME`` (runs asked
        for within one second are one job). Returns ``(job_id, inserted)``, or ``None`` when
        there is no such schedule."""
        return self._finish(self._core.run_schedule(name, now))


class AsyncStore(_Opened):
    """:class:`Store` for asyncio: the same methods as coroutines, each run on the package's
    own runtime, so the event loop is never blocked. Cancelling the awaiting task drops the
    call; a write already sent stays sent (``state`` tells). The constructor (opening the
    store) blocks briefly. A :class:`Worker` takes either kind of store.
    """

    async def enqueue(
        self,
        job_id: str,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: Optional[float] = None,
        max_attempts: Optional[int] = None,
        payload: Payload = None,
        timeout: Optional[float] = None,
        replace_finished: bool = False,
    ) -> bool:
        """As :meth:`Store.enqueue`."""
        return await self._core.enqueue(
            job_id, queue, priority, run_at, max_attempts, payload, timeout, replace_finished
        )

    async def enqueue_many(self, jobs: Iterable[dict], *, queue: str = "default") -> list:
        """As :meth:`Store.enqueue_many`."""
        return await self._core.enqueue_many(list(jobs), queue)

    async def claim(
        self, job_id: str, owner: str, ttl: float, *, now: Optional[float] = None
    ) -> Union[Lease, Refused]:
        """As :meth:`Store.claim`."""
        return await self._core.claim(job_id, owner, ttl, now)

    async def claim_next(
        self,
        queue: str,
        owner: str,
        ttl: float,
        *,
        limit: int = 1,
        now: Optional[float] = None,
    ) -> list:
        """As :meth:`Store.claim_next`."""
        return await self._core.claim_next(queue, owner, ttl, limit, now)

    async def renew(
        self,
        job_id: str,
        owner: str,
        fence: int,
        ttl: float,
        *,
        now: Optional[float] = None,
    ) -> Union[Accepted, Refused]:
        """As :meth:`Store.renew`."""
        return await self._core.renew(job_id, owner, fence, ttl, now)

    async def progress(
        self,
        job_id: str,
        owner: str,
        fence: int,
        text: str,
        *,
        ttl: Optional[float] = None,
        now: Optional[float] = None,
    ) -> Union[Accepted, Refused]:
        """As :meth:`Store.progress`."""
        return await self._core.progress(job_id, owner, fence, text, ttl, now)

    async def complete(
        self,
        job_id: str,
        owner: str,
        fence: int,
        result: str = "",
        *,
        now: Optional[float] = None,
    ) -> Union[Accepted, Refused]:
        """As :meth:`Store.complete`."""
        return await self._core.complete(job_id, owner, fence, result, now)

    async def fail(
        self,
        job_id: str,
        owner: str,
        fence: int,
        error: str,
        *,
        retry: bool = True,
        backoff: Optional[Backoff] = None,
        now: Optional[float] = None,
    ) -> Union[Failed, Refused]:
        """As :meth:`Store.fail`."""
        return await self._core.fail(job_id, owner, fence, error, retry, backoff, now)

    async def release(self, job_id: str, owner: str, fence: int) -> Union[Accepted, Refused]:
        """As :meth:`Store.release`."""
        return await self._core.release(job_id, owner, fence)

    async def cancel(
        self, job_id: str, *, now: Optional[float] = None
    ) -> Union[Accepted, Refused]:
        """As :meth:`Store.cancel`."""
        return await self._core.cancel(job_id, now)

    async def retry(
        self, job_id: str, *, now: Optional[float] = None
    ) -> Union[Accepted, Refused]:
        """As :meth:`Store.retry`."""
        return await self._core.retry(job_id, now)

    async def purge(self, before: float, statuses: Sequence[str] = ("done",)) -> int:
        """As :meth:`Store.purge`."""
        return await self._core.purge(before, list(statuses))

    async def record(self, job_id: str) -> Optional[Record]:
        """As :meth:`Store.record`."""
        return await self._core.record(job_id)

    async def state(self, job_id: str) -> Optional[dict]:
        """As :meth:`Store.state`."""
        return await self._core.state(job_id)

    async def list(
        self,
        *,
        queue: Optional[str] = None,
        status: Optional[str] = None,
        limit: int = 100,
        after: Optional[str] = None,
        now: Optional[float] = None,
    ) -> list:
        """As :meth:`Store.list`."""
        return await self._core.list(queue, status, limit, after, now)

    async def stats(self, *, now: Optional[float] = None) -> list:
        """As :meth:`Store.stats`."""
        return await self._core.stats(now)

    async def audit(
        self, *, job: Optional[str] = None, since: Optional[float] = None, limit: int = 100
    ) -> list:
        """As :meth:`Store.audit`."""
        return await self._core.audit(job, since, limit)

    async def pause(
        self, queue: str, *, until: Optional[float] = None, now: Optional[float] = None
    ) -> QueueSettings:
        """As :meth:`Store.pause`."""
        return await self._core.pause(queue, until, now)

    async def resume(self, queue: str, *, now: Optional[float] = None) -> QueueSettings:
        """As :meth:`Store.resume`."""
        return await self._core.resume(queue, now)

    async def limit(
        self,
        queue: str,
        *,
        concurrency: Optional[int] = None,
        timeout: Optional[float] = None,
        no_timeout: bool = False,
        now: Optional[float] = None,
    ) -> QueueSettings:
        """As :meth:`Store.limit`."""
        return await self._core.limit(queue, concurrency, timeout, no_timeout, now)

    async def queues(self, *, now: Optional[float] = None) -> list:
        """As :meth:`Store.queues`."""
        return await self._core.queues(now)

    async def put_schedule(
        self,
        name: str,
        *,
        cron: str,
        queue: str,
        tz: str = "UTC",
        priority: int = 0,
        max_attempts: Optional[int] = None,
        timeout: Optional[float] = None,
        payload: Payload = None,
        catch_up: str = "latest",
        now: Optional[float] = None,
    ) -> Schedule:
        """As :meth:`Store.put_schedule`."""
        return await self._core.put_schedule(
            name, cron, queue, tz, priority, max_attempts, timeout, payload, catch_up, now
        )

    async def schedules(self, *, now: Optional[float] = None) -> list:
        """As :meth:`Store.schedules`."""
        return await self._core.schedules(now)

    async def remove_schedule(self, name: str) -> bool:
        """As :meth:`Store.remove_schedule`."""
        return await self._core.remove_schedule(name)

    async def run_schedule(self, name: str, *, now: Optional[float] = None) -> Optional[tuple]:
        """As :meth:`Store.run_schedule`."""
        return await self._core.run_schedule(name, now)


def _default_owner() -> str:
    return f"{socket.gethostname()}/{os.getpid()}"


class Worker:
    """Runs ``handler(job)`` for each job of ``queue``, on the Rust runtime of ``lease work``:
    it claims due jobs, renews each lease every ``ttl * renew_fraction`` seconds, stores what
    the handler returns (a ``str``, or None for an empty result) or fails the job with the
    exception's text (retried after ``backoff`` while attempts remain), and stops a job the
    moment its lease is lost or it is cancelled.

    ``handler`` runs on threads of its own (``concurrency`` at once) and gets a
    :class:`Job`: its ``id``, ``fence``, ``attempt`` and ``payload``, and ``cancelled`` /
    ``wait_cancelled()`` for the stop. A Python thread cannot be killed: a handler that goes on
    after the stop runs to its end, but nothing it returns is stored for that lease, and its
    late writes to a guarded resource are refused by its fence. A program that must be stopped
    for real belongs under ``lease work -- CMD``, which stops the program's whole process
    group.

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
        renew_fraction: float = 1.0 / 3.0,
        idle_poll: float = 0.5,
        retry: bool = True,
        backoff: Optional[Backoff] = None,
        max_jobs: Optional[int] = None,
        exit_when_empty: bool = False,
        drain: float = 30.0,
        cancel_grace: float = 5.0,
    ) -> None:
        if not isinstance(store, _Opened):
            raise InvalidInput(
                f"store: must be a lease.Store or lease.AsyncStore, got {type(store).__name__}"
            )
        self.store = store
        self.owner = owner if owner is not None else _default_owner()
        self._core = _WorkerCore(
            store._core,
            handler,
            queue=queue,
            owner=self.owner,
            ttl=ttl,
            concurrency=concurrency,
            renew_fraction=renew_fraction,
            idle_poll=idle_poll,
            retry=retry,
            backoff=backoff,
            max_jobs=max_jobs,
            exit_when_empty=exit_when_empty,
            drain=drain,
            cancel_grace=cancel_grace,
        )

    def run(self) -> Summary:
        """Runs the worker until it stops (see the class); what it did."""
        return self._core.run()
