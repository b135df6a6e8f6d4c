"""The package's types and its one declaration of each store method.

Each method of the stores is declared once, on the native ``StoreCore`` (its signature and
docstring in Rust, its types in ``_lease.pyi``); ``Store`` and ``AsyncStore`` are made from it.
These tests hold that together: stubtest checks the stubs against the built module, mypy checks
the package strictly and what a user's code sees, and every method of the core is on both
classes with its signature and docstring. mypy is installed with the tests (``cargo xtask
test``); without it these tests fail, they are never skipped.
"""

import asyncio
import inspect
import pathlib
import subprocess
import sys

import pytest

import lease
from lease._lease import StoreCore


def mypy(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    """Runs a module of mypy (``mypy`` or ``mypy.stubtest``) with its cache in ``tmp_path``."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"MYPY_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
    )


def core_methods() -> list:
    """The names of ``StoreCore``'s store operations (everything callable but dunders)."""
    return sorted(
        name
        for name, value in vars(StoreCore).items()
        if not name.startswith("_") and callable(value)
    )


def test_the_native_modules_stubs_match_what_it_is_at_run_time(tmp_path):
    done = mypy(tmp_path, "mypy.stubtest", "lease._lease")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout


def test_the_package_type_checks_strictly(tmp_path):
    done = mypy(tmp_path, "mypy", "--strict", "-p", "lease")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_users_code_sees_each_method_typed_blocking_and_as_a_coroutine(tmp_path):
    (tmp_path / "use.py").write_text(
        "import lease\n"
        "store = lease.Store('x.db')\n"
        "reveal_type(store.claim)\n"
        "reveal_type(store.list())\n"
        "async def main(a: lease.AsyncStore) -> None:\n"
        "    reveal_type(a.claim)\n"
        "    reveal_type(await a.stats())\n"
        "    await a.claim('job', 'worker', 'not a number')\n"
    )
    done = mypy(tmp_path, "mypy", "--strict", "use.py")
    lines = done.stdout.splitlines()
    claim = "def (job_id: builtins.str, owner: builtins.str, ttl: builtins.float, *, now: Union[builtins.float, None] =)"
    answer = "Union[lease._lease.Lease, lease._lease.Refused]"
    assert f'use.py:3: note: Revealed type is "{claim} -> {answer}"' in lines, done.stdout
    assert 'use.py:4: note: Revealed type is "builtins.list[lease._lease.Record]"' in lines
    assert (
        f'use.py:6: note: Revealed type is "{claim} -> typing.Coroutine[Any, Any, {answer}]"'
        in lines
    ), done.stdout
    assert 'use.py:7: note: Revealed type is "builtins.list[lease._lease.StatsRow]"' in lines
    assert any(
        line.startswith("use.py:8: error: Argument 3") and '"float"' in line for line in lines
    ), done.stdout


def test_every_store_operation_is_on_both_classes_with_its_signature_and_docstring():
    names = core_methods()
    assert "claim" in names and "put_schedule" in names and "kind" not in names
    for name in names:
        core = getattr(StoreCore, name)
        assert core.__doc__, f"StoreCore.{name} has no docstring"
        for cls in (lease.Store, lease.AsyncStore):
            method = getattr(cls, name, None)
            assert method is not None, f"{cls.__name__}.{name} is missing"
            assert method.__doc__ == core.__doc__, f"{cls.__name__}.{name}"
            assert inspect.signature(method) == inspect.signature(core), f"{cls.__name__}.{name}"
        assert not inspect.iscoroutinefunction(getattr(lease.Store, name)), name
        assert inspect.iscoroutinefunction(getattr(lease.AsyncStore, name)), name


def test_an_async_call_checks_its_arguments_when_awaited_and_sends_nothing(tmp_path):
    store = lease.AsyncStore(tmp_path / "q.db", create=True)
    call = store.enqueue("")  # an empty id: refused, but only once awaited
    with pytest.raises(lease.InvalidInput, match="job id"):
        asyncio.run(call)
    assert asyncio.run(store.list()) == []


def test_a_store_refuses_an_option_it_does_not_take_by_name(tmp_path):
    with pytest.raises(TypeError, match="bogus"):
        lease.Store(tmp_path / "q.db", create=True, bogus=1)
    with pytest.raises(TypeError, match="audit"):
        lease.Store(tmp_path / "q.db", create=True, audit="many")
