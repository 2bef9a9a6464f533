"""A pytest plugin for mutation runs (`-p tests.mutations.outcome`): how each failure came about,
one line per failure appended to the file $KSHIM_MUTATION_OUTCOME: the phase (collect, setup,
call, teardown), `assertion` or the exception's type name, the test id, and where it was raised
(file:line) with the first line of its message.

A mutant counts as caught only when a test's own check failed (an `assert`, pytest.fail,
pytest.raises' DID NOT RAISE), not when the mutated code broke an import, a fixture or the run.
"""
from __future__ import annotations

import os

import pytest

OUTCOME_ENV = "KSHIM_MUTATION_OUTCOME"


def _record(phase: str, kind: str, nodeid: str, where: str = "") -> None:
    path = os.environ.get(OUTCOME_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{phase}\t{kind}\t{nodeid}\t{where}\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None:
        exc = call.excinfo
        kind = "assertion" if exc.errisinstance((AssertionError, pytest.fail.Exception)) else exc.typename
        root = str(item.config.rootpath)
        ours = [e for e in exc.traceback if str(e.path).startswith(root)]  # not pytest's own frames
        last = ours[-1] if ours else exc.traceback[-1] if exc.traceback else None
        message = (str(exc.value).strip().splitlines() or [""])[0][:200]
        where = f"{os.path.basename(str(last.path))}:{last.lineno + 1}: " if last is not None else ""
        _record(call.when, kind, item.nodeid, (where + message).replace("\t", " "))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _record("collect", "error", report.nodeid)
