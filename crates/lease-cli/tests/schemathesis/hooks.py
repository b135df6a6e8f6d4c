"""schemathesis hooks for `tests/schemathesis.rs`.

A claim's `wait` is a long poll: on an empty queue the server answers after `wait` seconds,
up to 20. The coverage phase tries the bounds of every field, so a run would spend most of its
time waiting. Here a `wait` the document allows (0 to 20) is scaled to a fortieth of itself
(still within the document, so a positive case stays positive); a `wait` outside it is left
as drawn, so the server's refusal of it is still checked. Long polls themselves are tested in
crates/lease-server/tests/api.rs.
"""

import schemathesis


@schemathesis.hook
def map_case(context, case):
    body = case.body
    if case.operation.path == "/v1/queues/{queue}/claims" and isinstance(body, dict):
        wait = body.get("wait")
        if isinstance(wait, (int, float)) and not isinstance(wait, bool) and 0 <= wait <= 20:
            body["wait"] = wait / 40
    return case
