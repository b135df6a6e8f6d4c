"""schemathesis hooks for `tests/schemathesis.rs`.

A claim's `wait` is a long poll: on an empty queue the server answers after `wait` seconds,
up to 20. The coverage phase tries the bounds of every field, so a run would spend most of its
time waiting. Here a `wait` the document allows (0 to 20) is scaled to a fortieth of itself
(still within the document, so a positive case stays positive); a `wait` outside it is left
as drawn, so the server's refusal of it is still checked. Long polls themselves are tested in
crates/lease-server/tests/api.rs.

In the stateful phase, which follows the document's links from an enqueue to a claim and from
a claim to its lease's writes (renew, progress, hold-group, checkpoints, complete, fail,
release, with the lease's token), a claim asks for a lease long enough for the next steps to find it live (300 s, within
the document): a lease drawn at a millisecond has expired before its holder's next write, so
every write the links lead to would be refused and none of them would be tested as accepted.
For the same reason an enqueue in the stateful phase is due at once (no `run_at`), and a
holder's write names no `owner` of its own (it writes as the lease's owner). A job enqueued
there is in a group (a hold of a job's group is refused for a job without one) and first in
claim order (so that the claim of its queue takes it, not a job another phase left there), and
a hold lasts a moment, so that one scenario's hold does not keep the next one's claims empty.
The other phases keep the drawn `ttl`, bounds included.
"""

import time

import schemathesis


CLAIMS = ("/v1/queues/{queue}/claims", "/v1/jobs/{id}/claim")
HOLDER_WRITES = tuple(
    f"/v1/jobs/{{id}}/{write}"
    for write in ("renew", "progress", "hold-group", "checkpoints", "complete", "fail", "release")
)




def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@schemathesis.hook
def map_case(context, case):
    body = case.body
    if case.operation.path == "/v1/queues/{queue}/claims" and isinstance(body, dict):
        wait = body.get("wait")
        if number(wait) and 0 <= wait <= 20:
            body["wait"] = wait / 40
    meta = case.meta
    stateful = meta is not None and str(meta.phase.name) == "stateful"
    # Fields are dropped only from a case drawn to be valid: a dropped field may be the one a
    # case drawn to be invalid got wrong, which would then be sent as valid data.
    valid = meta is not None and str(meta.generation.mode.value) == "positive"
    if stateful and case.operation.path in CLAIMS and isinstance(body, dict):
        if number(body.get("ttl")) and 0 < body["ttl"] < 300:
            body["ttl"] = 300
    dropping = stateful and valid and isinstance(body, dict)
    if dropping and case.operation.path in CLAIMS + HOLDER_WRITES:
        # At the server's time (a caller's clock is refused by a server that does not trust
        # caller clocks).
        body.pop("now", None)
    if dropping and case.operation.path in HOLDER_WRITES:
        # Written as the lease's own owner (a drawn one is refused as not the owner).
        body.pop("owner", None)
    if dropping and case.operation.path == "/v1/queues/{queue}/jobs":
        # Due now and for as long as its lease, so that the claim the links lead to finds it
        # and the writes after the claim find the lease live: no `run_at`, no `debounce` (due
        # later), no parents to wait for (`after`), no `timeout` that ends the lease early.
        for field in ("run_at", "debounce", "after", "on_parent_failure", "timeout"):
            body.pop(field, None)
        # In a group, so that a hold of its group (which a job without one is refused) can
        # be accepted too; first in claim order, so that the claim of its queue the links lead
        # to takes it, not a job without a group that another phase left in the same queue.
        body.setdefault("group", "schemathesis")
        body["priority"] = 2**63 - 1
    if dropping and case.operation.path == "/v1/jobs/{id}/hold-group":
        # Held for a moment only: a group held far into the future would keep the next
        # scenarios' jobs of it from being claimed, and their writes from being reached.
        if number(body.get("until")):
            body["until"] = time.time() + 0.2
    return case
