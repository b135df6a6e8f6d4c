"""Type stubs of the native module ``lease._lease`` (the Rust half of ``lease``)."""

import os
from typing import (
    Any,
    Callable,
    Generator,
    Generic,
    Iterable,
    Optional,
    Sequence,
    TypeVar,
    Union,
    final,
)

# What the module exports at run time (PyO3 lists every name added), checked by stubtest.
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
    "Pending",
    "StoreCore",
    "WorkerCore",
    "Job",
    "Summary",
    "ValueGuard",
    "Guarded",
    "install",
    "sqlite_write",
]

__version__: str

_Path = Union[str, "os.PathLike[str]"]

# The problem statement's functions.
def init_db(path: _Path) -> None: ...
def enqueue(path: _Path, job_id: str) -> bool: ...
def state(path: _Path, job_id: str) -> Optional[dict[str, Any]]: ...
def claim(path: _Path, job_id: str, owner: str, now: float, ttl: float) -> Optional[int]: ...
def renew(
    path: _Path, job_id: str, owner: str, fence: int, now: float, ttl: float
) -> bool: ...
def complete(
    path: _Path, job_id: str, owner: str, fence: int, now: float, result: str
) -> bool: ...
def release(path: _Path, job_id: str, owner: str, fence: int) -> bool: ...
def claim_many(
    path: _Path, job_id: str, owners: Sequence[str], now: float, ttl: float
) -> list[Optional[int]]: ...

@final
class Lease:
    """A granted lease."""

    @property
    def id(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def now(self) -> float: ...
    @property
    def until(self) -> float: ...
    @property
    def attempt(self) -> int: ...
    @property
    def payload(self) -> Optional[bytes]: ...
    @property
    def timeout(self) -> Optional[float]: ...
    @property
    def group(self) -> Optional[str]: ...
    @property
    def ok(self) -> bool: ...

@final
class Accepted:
    """A write the rules (or a guard) accepted; true."""

    @property
    def ok(self) -> bool: ...
    def __bool__(self) -> bool: ...

@final
class Refused:
    """A write or claim refused by the rules (or a guard); false; nothing changed."""

    @property
    def ok(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def presented_fence(self) -> Optional[int]: ...
    @property
    def current_fence(self) -> Optional[int]: ...
    @property
    def owner(self) -> Optional[str]: ...
    @property
    def until(self) -> Optional[float]: ...
    @property
    def run_at(self) -> Optional[float]: ...
    @property
    def status(self) -> Optional[str]: ...
    def __bool__(self) -> bool: ...

@final
class Failed:
    """A failure the store took: ``status`` ``pending`` (retried at ``run_at``) or ``dead``."""

    @property
    def ok(self) -> bool: ...
    @property
    def status(self) -> str: ...
    @property
    def run_at(self) -> Optional[float]: ...
    def __bool__(self) -> bool: ...

@final
class Record:
    """Every field of a stored job."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def owner(self) -> Optional[str]: ...
    @property
    def until(self) -> float: ...
    @property
    def fence(self) -> int: ...
    @property
    def result(self) -> Optional[str]: ...
    @property
    def done(self) -> bool: ...
    @property
    def priority(self) -> int: ...
    @property
    def run_at(self) -> Optional[float]: ...
    @property
    def attempts(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def payload(self) -> Optional[bytes]: ...
    @property
    def error(self) -> Optional[str]: ...
    @property
    def result_fence(self) -> Optional[int]: ...
    @property
    def updated(self) -> Optional[float]: ...
    @property
    def timeout(self) -> Optional[float]: ...
    @property
    def progress(self) -> Optional[str]: ...
    @property
    def group(self) -> Optional[str]: ...
    @property
    def after(self) -> list[str]: ...
    @property
    def on_parent_failure(self) -> Optional[str]: ...

@final
class StatsRow:
    @property
    def queue(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def count(self) -> int: ...

@final
class QueueSettings:
    @property
    def queue(self) -> str: ...
    @property
    def paused(self) -> bool: ...
    @property
    def paused_until(self) -> Optional[float]: ...
    @property
    def concurrency(self) -> Optional[int]: ...
    @property
    def timeout(self) -> Optional[float]: ...
    @property
    def per_group(self) -> Optional[int]: ...
    @property
    def ordered(self) -> bool: ...
    @property
    def paused_groups(self) -> dict[str, Optional[float]]: ...
    @property
    def rate(self) -> Optional[str]: ...
    @property
    def rate_per_group(self) -> Optional[str]: ...
    @property
    def fair(self) -> bool: ...

@final
class GroupLoad:
    @property
    def group(self) -> str: ...
    @property
    def backlog(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def paused(self) -> bool: ...
    @property
    def paused_until(self) -> Optional[float]: ...
    @property
    def throttled_until(self) -> Optional[float]: ...

@final
class Throttle:
    @property
    def queue(self) -> str: ...
    @property
    def until(self) -> Optional[float]: ...
    @property
    def groups(self) -> dict[str, float]: ...

@final
class Schedule:
    @property
    def name(self) -> str: ...
    @property
    def cron(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> Optional[int]: ...
    @property
    def timeout(self) -> Optional[float]: ...
    @property
    def catch_up(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def created(self) -> float: ...
    @property
    def last_tick(self) -> Optional[float]: ...
    @property
    def next_tick(self) -> Optional[float]: ...

@final
class AuditRow:
    @property
    def time(self) -> float: ...
    @property
    def job(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def operation(self) -> str: ...
    @property
    def presented_fence(self) -> int: ...
    @property
    def current_fence(self) -> Optional[int]: ...
    @property
    def reason(self) -> str: ...
    @property
    def late_by(self) -> Optional[float]: ...

@final
class Backoff:
    """``base`` seconds, times ``factor`` per attempt, at most ``max``, up to ``jitter``
    shorter at random."""

    def __init__(
        self, base: float = 1.0, factor: float = 2.0, max: float = 3600.0, jitter: float = 0.25
    ) -> None: ...

_T = TypeVar("_T")
_Payload = Union[bytes, str, None]
_List = list  # ``StoreCore.list`` hides the builtin inside the class.

@final
class Pending(Generic[_T]):
    """A call not run yet: ``wait()`` runs it here; awaiting it runs it on the runtime."""

    def wait(self) -> _T: ...
    def __await__(self) -> Generator[Any, None, _T]: ...

@final
class StoreCore:
    """One open store; ``lease.Store`` and ``lease.AsyncStore`` are made from its methods."""

    def __init__(self, target: _Path, **options: Any) -> None: ...
    @property
    def kind(self) -> str: ...
    @property
    def target(self) -> str: ...
    def enqueue(
        self,
        job_id: str,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: Optional[float] = None,
        max_attempts: Optional[int] = None,
        payload: _Payload = None,
        timeout: Optional[float] = None,
        replace_finished: bool = False,
        group: Optional[str] = None,
        debounce: Optional[float] = None,
        after: Optional[Sequence[str]] = None,
        on_parent_failure: Optional[str] = None,
        traceparent: Optional[str] = None,
        tracestate: Optional[str] = None,
    ) -> Pending[bool]: ...
    def enqueue_many(
        self,
        jobs: Iterable[dict[str, Any]],
        *,
        queue: str = "default",
        traceparent: Optional[str] = None,
        tracestate: Optional[str] = None,
    ) -> Pending[_List[bool]]: ...
    def claim(
        self, job_id: str, owner: str, ttl: float, *, now: Optional[float] = None
    ) -> Pending[Union[Lease, Refused]]: ...
    def claim_next(
        self, queue: str, owner: str, ttl: float, *, limit: int = 1, now: Optional[float] = None
    ) -> Pending[_List[Lease]]: ...
    def renew(
        self, job_id: str, owner: str, fence: int, ttl: float, *, now: Optional[float] = None
    ) -> Pending[Union[Accepted, Refused]]: ...
    def progress(
        self,
        job_id: str,
        owner: str,
        fence: int,
        text: str,
        *,
        ttl: Optional[float] = None,
        now: Optional[float] = None,
    ) -> Pending[Union[Accepted, Refused]]: ...
    def hold_group(
        self, job_id: str, owner: str, fence: int, until: float, *, now: Optional[float] = None
    ) -> Pending[Union[Accepted, Refused]]: ...
    def checkpoint(
        self,
        job_id: str,
        owner: str,
        fence: int,
        name: str,
        value: str,
        *,
        now: Optional[float] = None,
    ) -> Pending[Union[Accepted, Refused]]: ...
    def checkpoints(self, job_id: str) -> Pending[dict[str, str]]: ...
    def attempts(self, job_id: str) -> Pending[dict[str, Any]]: ...
    def graph(self, job_id: str, limit: int = 50) -> Pending[dict[str, Any] | None]: ...
    def trace(self, job_id: str) -> Pending[Optional[dict[str, Optional[str]]]]: ...
    def epoch(self) -> Pending[int]: ...
    def complete(
        self, job_id: str, owner: str, fence: int, result: str = "", *, now: Optional[float] = None
    ) -> Pending[Union[Accepted, Refused]]: ...
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
    ) -> Pending[Union[Failed, Refused]]: ...
    def release(
        self, job_id: str, owner: str, fence: int, *, unstarted: bool = False
    ) -> Pending[Union[Accepted, Refused]]: ...
    def cancel(
        self, job_id: str, *, now: Optional[float] = None
    ) -> Pending[Union[Accepted, Refused]]: ...
    def retry(
        self, job_id: str, *, now: Optional[float] = None
    ) -> Pending[Union[Accepted, Refused]]: ...
    def purge(
        self, before: float, statuses: Optional[Iterable[str]] = None
    ) -> Pending[int]: ...
    def bulk(
        self,
        action: str,
        *,
        queue: Optional[str] = None,
        group: Optional[str] = None,
        status: Optional[str] = None,
        prefix: Optional[str] = None,
        dry_run: bool = False,
        now: Optional[float] = None,
    ) -> Pending[dict[str, int]]: ...
    def record(self, job_id: str) -> Pending[Optional[Record]]: ...
    def state(self, job_id: str) -> Pending[Optional[dict[str, Any]]]: ...
    def list(
        self,
        *,
        queue: Optional[str] = None,
        status: Optional[str] = None,
        limit: int = 100,
        after: Optional[str] = None,
        now: Optional[float] = None,
        group: Optional[str] = None,
        prefix: Optional[str] = None,
    ) -> Pending[_List[Record]]: ...
    def stats(self, *, now: Optional[float] = None) -> Pending[_List[StatsRow]]: ...
    def audit(
        self, *, job: Optional[str] = None, since: Optional[float] = None, limit: int = 100
    ) -> Pending[_List[AuditRow]]: ...
    def pause(
        self,
        queue: str,
        *,
        until: Optional[float] = None,
        group: Optional[str] = None,
        now: Optional[float] = None,
    ) -> Pending[QueueSettings]: ...
    def resume(
        self, queue: str, *, group: Optional[str] = None, now: Optional[float] = None
    ) -> Pending[QueueSettings]: ...
    def limit(
        self,
        queue: str,
        *,
        concurrency: Optional[int] = None,
        timeout: Optional[float] = None,
        no_timeout: bool = False,
        per_group: Optional[int] = None,
        ordered: Optional[bool] = None,
        rate: Optional[str] = None,
        rate_per_group: Optional[str] = None,
        fair: Optional[bool] = None,
        now: Optional[float] = None,
    ) -> Pending[QueueSettings]: ...
    def throttle(self, queue: str, *, now: Optional[float] = None) -> Pending[Throttle]: ...
    def groups(
        self, queue: str, *, limit: int = 10, now: Optional[float] = None
    ) -> Pending[_List[GroupLoad]]: ...
    def queues(self, *, now: Optional[float] = None) -> Pending[_List[QueueSettings]]: ...
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
        payload: _Payload = None,
        catch_up: str = "latest",
        now: Optional[float] = None,
    ) -> Pending[Schedule]: ...
    def schedules(self, *, now: Optional[float] = None) -> Pending[_List[Schedule]]: ...
    def remove_schedule(self, name: str) -> Pending[bool]: ...
    def run_schedule(
        self, name: str, *, now: Optional[float] = None
    ) -> Pending[Optional[tuple[str, bool]]]: ...

@final
class Job:
    """One job as a worker's handler gets it."""

    @property
    def id(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def payload(self) -> Optional[bytes]: ...
    @property
    def cancelled(self) -> bool: ...
    def wait_cancelled(self, timeout: Optional[float] = None) -> bool: ...
    @property
    def timeout(self) -> Optional[float]: ...
    @property
    def group(self) -> Optional[str]: ...
    @property
    def traceparent(self) -> Optional[str]: ...
    @property
    def tracestate(self) -> Optional[str]: ...
    def progress(self, text: str) -> bool: ...
    def hold_group(self, seconds: float) -> bool: ...
    def parents(self) -> dict[str, dict[str, Any]]: ...
    def checkpoint(self, name: str, value: str) -> bool: ...
    def checkpoints(self) -> dict[str, str]: ...
    def step(self, name: str, step: Callable[[], str]) -> str: ...

@final
class Summary:
    @property
    def completed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def lost(self) -> int: ...
    @property
    def released(self) -> int: ...
    @property
    def unreported(self) -> int: ...

@final
class WorkerCore:
    def __init__(
        self, store: StoreCore, handler: Callable[[Job], Optional[str]], **options: Any
    ) -> None: ...
    def run(self) -> Summary: ...

@final
class Guarded:
    """A value read back with the fence it was written under."""

    @property
    def fence(self) -> int: ...
    @property
    def value(self) -> bytes: ...

@final
class ValueGuard:
    """A resource that keeps, per key, a value and the highest fence that wrote it."""

    def __init__(self, url: str) -> None: ...
    @property
    def resource(self) -> str: ...
    def put(
        self,
        key: str,
        value: Union[bytes, str],
        *,
        fence: int,
        job: Optional[str] = None,
        expiry: Optional[float] = None,
    ) -> Union[Accepted, Refused]: ...
    def get(self, key: str) -> Optional[Guarded]: ...
    def delete(self, key: str, *, fence: int) -> Union[Accepted, Refused]: ...

def install(url: str) -> bool: ...
def sqlite_write(
    path: _Path,
    key: str,
    fence: int,
    sql: str,
    params: Optional[Iterable[Union[None, int, float, str, bytes]]] = None,
    busy_timeout: float = 5.0,
) -> Union[Accepted, Refused]: ...
