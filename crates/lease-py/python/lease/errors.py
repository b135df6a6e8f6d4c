"""The exceptions of ``lease``, all under :class:`LeaseError`.

A refusal by the lease rules (a stale fence, a lease that expired, a job that is done) is not
an exception: it comes back as a value (``None`` or ``False`` from the problem statement's
functions, a :class:`lease.Refused` from the queue). These are for what went wrong instead.
"""

__all__ = [
    "LeaseError",
    "InvalidInput",
    "NotFound",
    "Incompatible",
    "Denied",
    "StoreUnavailable",
    "StoreFull",
    "ReadOnly",
    "OutcomeUnknown",
    "ClockSkew",
    "Corrupt",
    "GuardError",
    "Unsupported",
    "LeaseLost",
]


class LeaseError(Exception):
    """Every error ``lease`` raises."""


class InvalidInput(LeaseError, ValueError):
    """An argument the rules refuse (a ``ttl`` not above 0, an empty id, a fence out of
    range, a time that is not finite), named in the message; nothing was touched."""


class NotFound(LeaseError):
    """There is no lease database there (create it with ``init_db``, or ``create=True``)."""


class Incompatible(LeaseError):
    """The file or schema is not a lease database this version can use; it was left as it
    is."""


class Denied(LeaseError):
    """The server refused the API key (not known, revoked, or not allowed to do this)."""


class StoreUnavailable(LeaseError):
    """The store (or a guarded resource) could not be reached, or stayed busy; nothing was
    written."""


class StoreFull(LeaseError):
    """The disk or the database is full; nothing was written."""


class ReadOnly(LeaseError):
    """The store can only be read here."""


class OutcomeUnknown(LeaseError):
    """A write was sent and its answer lost: it may or may not have been applied (read the
    job's ``state`` to know)."""


class ClockSkew(LeaseError):
    """The caller's clock is too far from the store's."""


class Corrupt(LeaseError):
    """The store holds a value that is not valid."""


class GuardError(LeaseError):
    """A guarded resource failed."""


class Unsupported(GuardError):
    """The resource cannot do what was asked (an expiry on an object store, an object store
    without conditional writes, a URL no guard takes)."""


class LeaseLost(LeaseError):
    """This run's lease of its job is no longer its own (it expired and another worker took
    the job, or the job was cancelled): stop, because nothing this run writes will count.
    Raised by ``job.step`` when the step's value cannot be kept."""
