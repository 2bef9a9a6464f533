"""Suite-wide policy: markers come from where a test lives, and a skip fails the run unless allowed.

Markers (registered in pyproject.toml, strict): `unit` for tests/, `process` for compat_tests/
(real kshim processes and clients over TCP), plus `java` for modules that drive the Java client
and `spark` for the PySpark tests. Nobody tags by hand: `python -m pytest -q -m unit` is the quick run.

A skipped test is a check that did not run, so the session fails on any skip whose reason is not
in ALLOWED_SKIPS; with KSHIM_STRICT_SKIPS=1 (the project's CI, which has ../shared and root)
nothing may skip at all. Not CI=true: every hosted CI sets that, and a clone's own CI has no ../shared.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
JAVA_CLIENT_MODULE = "compat_tests.java_client"

# Substrings of skip reasons tolerated outside CI, each with why.
ALLOWED_SKIPS = {
    "needs ../shared": "Kafka's JSON message specs live beside the checkout; CI has them",
    "needs root to mount": "a real full disk is a small tmpfs, which only root can mount; CI runs as root",
}


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte code for kshim and wire, written once per session: with PYTHONDONTWRITEBYTECODE set
    (as on some machines, CI's included) no import writes it, and each of the hundreds of broker
    and ctl processes the compat tests start would compile the whole package again (1.6x the CPU
    of its import; docs/benchmarks.md, "Start time"). Files already compiled are only checked."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller compiled before it started the workers
    import compileall
    for package in ("kshim", "wire"):
        compileall.compile_dir(str(ROOT / package), quiet=2, workers=1)


MAX_WORKERS = 4  # each process test starts brokers and clients of its own: more workers only contend


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject.toml): the cores this process may use, as the scheduler and a cgroup
    quota allow (os.cpu_count() counts a container's host), at most MAX_WORKERS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, min(cores, MAX_WORKERS))


def _markers_for(item: pytest.Item) -> list[str]:
    try:
        top = Path(item.path).resolve().relative_to(ROOT).parts[0]
    except ValueError:
        return []
    if top == "tests":
        return ["unit"]
    if top != "compat_tests":
        return []
    marks = ["process"]
    module = item.module
    if module is not None:
        name = module.__name__.rsplit(".", 1)[-1]
        uses_java = any(getattr(v, "__module__", None) == JAVA_CLIENT_MODULE
                        or getattr(v, "__name__", None) == JAVA_CLIENT_MODULE for v in vars(module).values())
        if name.startswith("test_java_") or uses_java:
            marks.append("java")
        if name == "test_spark":
            marks.append("spark")
    return marks


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in _markers_for(item):
            item.add_marker(name)


def in_ci() -> bool:
    return os.environ.get("KSHIM_STRICT_SKIPS", "") == "1"


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2])
    return str(longrepr)


def unexpected_skip(reason: str) -> bool:
    return in_ci() or not any(allowed in reason for allowed in ALLOWED_SKIPS)


_unexpected: list[str] = []


def _note_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if unexpected_skip(reason):
            _unexpected.append(f"{report.nodeid}: {reason}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_skip(report)  # e.g. a module-level importorskip that would hide a whole file


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _unexpected:
        where = "with KSHIM_STRICT_SKIPS=1 nothing may skip" if in_ci() else "reason not in ALLOWED_SKIPS (conftest.py)"
        terminalreporter.section("unexpected skips", red=True)
        for line in _unexpected:
            terminalreporter.write_line(f"{line}  [{where}]")

