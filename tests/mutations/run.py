"""Mutation runs: for each rule (docs/consistency.md's rows and the other areas of catalog.py),
patch a copy of the tree with the rule's deliberate bug, run the tests that claim the rule against
the copy, and report whether a test's check caught it ("killed": pytest exits 1 and the first
failure is a failed assertion in a test's body) or not ("SURVIVED"; "ERROR" when the tests failed
some other way: an import error, a fixture that broke, an exception other than a failed check, a
timeout). Slow (minutes per cluster test): run by hand; tests/test_mutations.py runs a few cheap
rows in CI.

    python -m tests.mutations.run                 # every row
    python -m tests.mutations.run -k timeout -k acks=0   # rows whose rule contains either phrase
    python -m tests.mutations.run --area security # the rows of one area (consistency, security, ...)
    python -m tests.mutations.run --baseline      # also run each row's tests unpatched first

Exits 1 if any mutation survived (or a baseline failed, or a patch no longer applies, or a run
ended in an ERROR).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.mutations.catalog import MUTATIONS, Mutation
from tests.mutations.outcome import OUTCOME_ENV

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "consistency.md"
TEST_ID = re.compile(r"`((?:compat_tests|tests)/[\w/]+\.py(?:::[\w\[\]-]+)?)`")
SKIP = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.egg-info", "build", ".venv", ".mypy_cache",
                              ".hypothesis")
TEST_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Row:
    rule: str
    tests: tuple[str, ...]


def doc_rows(text: str | None = None) -> list[Row]:
    """Every rule row of the document's tables with the test ids its "proved by" cell names."""
    rows = []
    for line in (DOC.read_text() if text is None else text).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 2 or cells[0] == "rule" or set(cells[0]) <= {"-"}:
            continue
        rows.append(Row(cells[0], tuple(TEST_ID.findall(cells[1]))))
    return rows


def row_of(mutation: Mutation, rows: list[Row]) -> Row:
    """The rule and its tests: the mutation's own (`tests`), or its row of docs/consistency.md."""
    if mutation.tests:
        return Row(mutation.row, mutation.tests)
    found = [r for r in rows if mutation.row in r.rule]
    if len(found) != 1:
        raise LookupError(f"{mutation.row!r} is in {len(found)} rows of {DOC.name}, not 1")
    return found[0]


def patched(source: str, mutation: Mutation, path: str | None = None) -> str:
    """The source of `path` (default: the mutation's `path`) with every hunk of that file applied; raises
    ValueError if a hunk's old text is not there once."""
    path = mutation.path if path is None else path
    for old, new in dict(mutation.patches())[path]:
        count = source.count(old)
        if count != 1:
            raise ValueError(f"{path}: a hunk of {mutation.row!r} matches {count} times, not once:\n{old}")
        source = source.replace(old, new)
    return source


@contextmanager
def mutant(tree: Path, mutation: Mutation) -> Iterator[None]:
    """`tree` with every file of the mutation patched, as it was again on exit; raises ValueError if a
    hunk does not apply."""
    originals = {path: (tree / path).read_text() for path, _ in mutation.patches()}
    try:
        for path, original in originals.items():
            (tree / path).write_text(patched(original, mutation, path))
        yield
    finally:
        for path, original in originals.items():
            (tree / path).write_text(original)


@dataclass(frozen=True)
class Outcome:
    code: int                        # pytest's exit code; -1: timed out
    output: str                      # the tail of its output
    # (phase, "assertion" or the exception's type, test id, "file:line: message")
    failures: tuple[tuple[str, ...], ...] = ()

    @property
    def by_assertion(self) -> bool:
        """Failed, and first by a test's own check (not an import, a fixture, a crash)."""
        return self.code == 1 and bool(self.failures) and self.failures[0][:2] == ("call", "assertion")


def run_tests(tree: Path, tests: tuple[str, ...], timeout_s: float = TEST_TIMEOUT_S) -> Outcome:
    """pytest in `tree` (so `python -m kshim` subprocesses import the copy's kshim)."""
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.NamedTemporaryFile("r", prefix="kshim-mutant-outcome-") as report:
        env[OUTCOME_ENV] = report.name
        # -n 0: with the project's xdist workers (pyproject's addopts) a first failure under -x ends
        # the run as "interrupted" (exit 2), which read as an error, not as a killed mutant
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
                                   "-p", "tests.mutations.outcome", *tests],
                                  cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            return Outcome(-1, out[-3000:] + f"\ntimed out after {timeout_s:.0f} s")
        failures = tuple(tuple(line.split("\t", 3)) for line in report.read().splitlines() if line)
    return Outcome(proc.returncode, proc.stdout[-3000:] + proc.stderr[-2000:], failures)


def verdict(outcome: Outcome) -> str:
    if outcome.code == 0:
        return "SURVIVED"
    if outcome.by_assertion:
        return "killed"
    if outcome.code == -1:
        return "ERROR (timed out)"
    if outcome.code == 1 and outcome.failures:
        phase, kind = outcome.failures[0][:2]
        return f"ERROR ({kind} in {phase}, not a failed check)"
    return f"ERROR (pytest exit {outcome.code})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", action="append", default=[], help="only rows whose rule contains this phrase")
    parser.add_argument("--area", action="append", default=[],
                        help=f"only the rows of this area ({', '.join(sorted({m.area for m in MUTATIONS}))})")
    parser.add_argument("--baseline", action="store_true", help="run each row's tests unpatched first")
    parser.add_argument("-v", action="store_true", help="print pytest's output tail for each run")
    args = parser.parse_args(argv)
    rows = doc_rows()
    chosen = [m for m in MUTATIONS if (not args.k or any(k in row_of(m, rows).rule for k in args.k))
              and (not args.area or m.area in args.area)]
    failed = False
    results = []
    with tempfile.TemporaryDirectory(prefix="kshim-mutant-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(ROOT, tree, ignore=SKIP)
        for m in chosen:
            row = row_of(m, rows)
            if args.baseline:
                base = run_tests(tree, row.tests)
                if base.code:
                    failed = True
                    results.append((m, f"baseline fails ({verdict(base)})", 0.0))
                    print(f"{m.row}: the unpatched tests fail\n{base.output}", flush=True)
                    continue
            began = time.monotonic()
            try:
                with mutant(tree, m):
                    run = run_tests(tree, row.tests)
            except ValueError as e:
                run = Outcome(2, str(e))
            outcome = verdict(run)
            failed |= outcome != "killed"
            results.append((m, outcome, time.monotonic() - began))
            print(f"{outcome:>10}  {time.monotonic() - began:6.0f}s  {m.row}: {m.breaks}", flush=True)
            if run.failures:  # the first failure: which test, how, where
                phase, kind, test, where = (*run.failures[0], "")[:4]
                print(f"{'':>20}{'caught by' if outcome == 'killed' else f'{kind} in {phase} of'} {test}"
                      f"{f' at {where}' if where else ''}", flush=True)
            if args.v or outcome not in ("killed", "SURVIVED"):
                print(run.output, flush=True)
    print("\n| area | rule | mutation | outcome |\n|---|---|---|---|")
    for m, outcome, _ in results:
        print(f"| {m.area} | {m.row} | {m.breaks} | {outcome} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
