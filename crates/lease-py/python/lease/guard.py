"""Fences for the resources a worker writes its result to.

A guard keeps, per key, the highest fence that wrote it, and admits a write only from a fence
at least that high, in one atomic step inside the resource, so a stale worker that wakes up
late cannot overwrite the newer holder's result (the rule is ``lease_domain::decide_guard``;
``docs/GUARDS.md`` gives each resource's protocol).

- :func:`open` (``redis://``, ``rediss://``, ``s3://``, ``gs://``, ``az://``, ``file:///DIR``,
  ``nats://HOST:PORT/BUCKET``, ``mysql://``): a :class:`ValueGuard` with ``put``, ``get`` and
  ``delete`` under a fence.
- :func:`install`: prepares a resource that needs it (the Redis function library, the NATS
  bucket, MariaDB's tables and procedure); idempotent.
- :func:`sqlite_write`: one SQL statement on a SQLite database, run only if the fence is
  admitted, in the same transaction as the check.

A write the guard refuses comes back as :class:`lease.Refused` (``reason`` ``stale``, with both
fences) and changes nothing; an admitted one as :class:`lease.Accepted`.
"""

from ._lease import Guarded, ValueGuard, install, sqlite_write

__all__ = ["open", "install", "sqlite_write", "ValueGuard", "Guarded"]


def open(url: str) -> ValueGuard:  # noqa: A001 - the guard's own verb, as `lease guard` has it
    """The guard of the resource ``url`` names."""
    return ValueGuard(url)
