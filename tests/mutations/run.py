"""Mutation runs for docs/consistency.md: for each rule, patch a copy of the tree with the rule's
deliberate bug (catalog.py), run the tests the row names against the copy, and report whether
they caught it ("killed") or not ("SURVIVED"). Slow (minutes per cluster test): run by hand.

    python -m tests.mutations.run                 # every row
    python -m tests.mutations.run -k timeout -k acks=0   # rows whose rule contains either phrase
    python -m tests.mutations.run --baseline      # also run each row's tests unpatched first

Exits 1 if any mutation survived (or a baseline failed, or a patch no longer applies).
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
from dataclasses import dataclass
from pathlib import Path

from tests.mutations.catalog import MUTATIONS, Mutation

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "consistency.md"
TEST_ID = re.compile(r"`((?:compat_tests|tests)/[\w/]+\.py(?:::[\w\[\]-]+)?)`")
SKIP = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.egg-info", "build", ".venv")
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
    found = [r for r in rows if mutation.row in r.rule]
    if len(found) != 1:
        raise LookupError(f"{mutation.row!r} is in {len(found)} rows of {DOC.name}, not 1")
    return found[0]


def patched(source: str, mutation: Mutation) -> str:
    """The source with every hunk applied; raises ValueError if a hunk's old text is not there once."""
    for old, new in mutation.hunks:
        count = source.count(old)
        if count != 1:
            raise ValueError(f"{mutation.path}: a hunk of {mutation.row!r} matches {count} times, not once:\n{old}")
        source = source.replace(old, new)
    return source


def run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    """pytest in `tree` (so `python -m kshim` subprocesses import the copy's kshim)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # -n 0: with the project's xdist workers (pyproject's addopts) a first failure under -x ends
    # the run as "interrupted" (exit 2), which read as an error, not as a killed mutant
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *tests],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT_S)
    return proc.returncode, proc.stdout[-3000:] + proc.stderr[-2000:]


def verdict(code: int) -> str:
    return {0: "SURVIVED", 1: "killed"}.get(code, f"ERROR (pytest exit {code})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", action="append", default=[], help="only rows whose rule contains this phrase")
    parser.add_argument("--baseline", action="store_true", help="run each row's tests unpatched first")
    parser.add_argument("-v", action="store_true", help="print pytest's output tail for each run")
    args = parser.parse_args(argv)
    rows = doc_rows()
    chosen = [m for m in MUTATIONS if not args.k or any(k in row_of(m, rows).rule for k in args.k)]
    failed = False
    results = []
    with tempfile.TemporaryDirectory(prefix="kshim-mutant-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(ROOT, tree, ignore=SKIP)
        for m in chosen:
            row = row_of(m, rows)
            target = tree / m.path
            original = target.read_text()
            if args.baseline:
                code, out = run_tests(tree, row.tests)
                if code:
                    failed = True
                    results.append((m, f"baseline fails ({verdict(code)})", 0.0))
                    print(f"{m.row}: the unpatched tests fail\n{out}", flush=True)
                    continue
            began = time.monotonic()
            try:
                target.write_text(patched(original, m))
                code, out = run_tests(tree, row.tests)
            except ValueError as e:
                code, out = 2, str(e)
            finally:
                target.write_text(original)
            outcome = verdict(code)
            failed |= code != 1
            results.append((m, outcome, time.monotonic() - began))
            print(f"{outcome:>10}  {time.monotonic() - began:6.0f}s  {m.row}: {m.breaks}", flush=True)
            if args.v or code not in (0, 1):
                print(out, flush=True)
    print("\n| rule | mutation | outcome |\n|---|---|---|")
    for m, outcome, _ in results:
        print(f"| {m.row} | {m.breaks} | {outcome} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
