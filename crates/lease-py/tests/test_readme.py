"""The Python examples of the README and of docs/guide/python.md run as written."""

import pathlib
import re
import subprocess

import lease
from conftest import REPO


def blocks(path):
    text = (REPO / path).read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_readme_s_example_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (front,) = blocks("README.md")
    scope = {}
    exec(front, scope)
    assert scope["store"].record("invoice-42").fence == 2


def test_the_python_guide_s_examples_run_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    statement, queue, worker = blocks("docs/guide/python.md")
    scope = {}
    exec(statement, scope)
    assert lease.state("jobs.db", "invoice-42")["result"] == "from B"
    exec(queue, scope)
    assert scope["store"].record("mail-7").result == "sent"
    # The worker runs until stopped; here it stops when the queue is empty.
    scope["store"].enqueue("mail-8", queue="mail", payload=b"hello")
    runs = worker.replace("concurrency=8)", "concurrency=8, exit_when_empty=True)")
    assert runs != worker
    try:
        exec(runs, scope)
        assert scope["store"].record("mail-8").result == "sent"
        assert scope["outbox"].get("sent:mail-8").value == b"HELLO"
    finally:
        # The example's key, and its fence beside it (docs/GUARDS.md).
        subprocess.run(
            ["redis-cli", "DEL", "sent:mail-8", "{sent:mail-8}:lease-fence"], capture_output=True
        )
    assert pathlib.Path("jobs.db").exists()
