"""How a call run on the package's runtime answers its asyncio future."""


def resolve(future, ok, value):
    """Sets ``future``'s result (or exception), unless it was cancelled meanwhile."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
