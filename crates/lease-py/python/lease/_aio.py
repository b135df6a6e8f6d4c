"""How a call run on the package's runtime answers its asyncio future."""

import asyncio
from typing import Any


def resolve(future: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    """Sets ``future``'s result (or exception), unless it was cancelled meanwhile."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
