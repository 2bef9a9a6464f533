"""The mutation catalog keeps up with the code and the document, and the runner's verdict holds:
for a few cheap rows (unit tests of a few seconds) the named tests pass on the real code and fail
on the mutant by a failed check, and a mutant that merely breaks an import is no kill. The full
runs are slow and made by hand: `python -m tests.mutations.run`."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.mutations.catalog import MUTATIONS, Mutation
from tests.mutations.run import ROOT, SKIP, doc_rows, mutant, patched, row_of, run_tests, verdict

# rows proved here in every run: their tests are unit tests of a few seconds
SAMPLE = ("the cleaner cleans only below the last stable offset",
          "each delivery of a share group's record counts",
          "an incremental fetch at another epoch than the session's is refused")
SAMPLED = [m for m in MUTATIONS if m.row.startswith(SAMPLE)]
RUN_TIMEOUT_S = 120  # a guard: each run takes a few seconds


def _exists(test: str) -> bool:
    path, _, name = test.partition("::")
    return (ROOT / path).is_file() and (not name or f"def {name.split('[')[0]}(" in (ROOT / path).read_text())


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.row)
def test_every_patch_still_applies_and_changes_the_source(mutation):
    for path, _ in mutation.patches():
        source = (ROOT / path).read_text()
        changed = patched(source, mutation, path)
        assert changed != source
        compile(changed, path, "exec")


def test_every_row_has_exactly_one_mutation_and_names_tests_that_exist():
    rows = doc_rows()
    assert len(rows) >= 20
    covered = [row_of(m, rows).rule for m in MUTATIONS if not m.tests]
    assert sorted(covered) == sorted(r.rule for r in rows), "rows without a mutation, or with two"
    for row in rows:
        assert row.tests, f"no test named for: {row.rule}"
        for test in row.tests:
            assert _exists(test), test


def test_the_other_areas_name_their_own_tests_which_exist():
    own = [m for m in MUTATIONS if m.tests]
    assert {m.area for m in own} >= {"security", "compaction", "share groups", "fault rules", "topic configs",
                                     "quotas", "fetch sessions"}
    assert len({m.row for m in MUTATIONS}) == len(MUTATIONS), "two mutations under one rule"
    rules = [r.rule for r in doc_rows()]
    for m in own:
        assert m.area != "consistency", f"{m.row!r}: a rule of docs/consistency.md names its tests there"
        assert not any(m.row in rule for rule in rules), f"{m.row!r} is a row of docs/consistency.md"
        for test in m.tests:
            assert _exists(test), f"{m.row!r}: {test}"
    assert all(m.area == "consistency" for m in MUTATIONS if not m.tests)


def test_rows_are_read_from_both_columns_of_a_table():
    doc = "| rule | proved by |\n|---|---|\n| a rule | `tests/x.py::test_a`, `compat_tests/y.py` |\n"
    [row] = doc_rows(doc)
    assert row.rule == "a rule" and row.tests == ("tests/x.py::test_a", "compat_tests/y.py")


# ------------------------------------------------------------------ the verdict, proved on a sample
@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the project, as the runner makes one."""
    copy = tmp_path_factory.mktemp("mutant") / "tree"
    shutil.copytree(ROOT, copy, ignore=SKIP)
    return copy


def _mutated_run(tree: Path, mutation: Mutation):
    with mutant(tree, mutation):
        return run_tests(tree, mutation.tests, RUN_TIMEOUT_S)


def test_the_sample_is_cheap_rows_with_unit_tests_only():
    assert len(SAMPLED) == len(SAMPLE)
    assert all(t.startswith("tests/") and "::" in t for m in SAMPLED for t in m.tests)


def test_the_sampled_rows_tests_pass_on_the_real_code(tree):
    outcome = run_tests(tree, tuple(t for m in SAMPLED for t in m.tests), RUN_TIMEOUT_S)
    assert outcome.code == 0, outcome.output


@pytest.mark.parametrize("mutation", SAMPLED, ids=lambda m: m.area)
def test_a_sampled_mutant_fails_its_tests_by_a_failed_check(tree, mutation):
    outcome = _mutated_run(tree, mutation)
    assert verdict(outcome) == "killed", (outcome.failures, outcome.output)
    assert outcome.code == 1 and "AssertionError" in outcome.output, outcome.output
    phase, kind, test = outcome.failures[0][:3]
    assert (phase, kind) == ("call", "assertion") and test in mutation.tests


def test_a_mutant_that_breaks_an_import_is_no_kill(tree):
    """What fails before any check runs (here: an import) is an ERROR of the run, not a proof."""
    [fetch_sessions] = [m for m in SAMPLED if m.area == "fetch sessions"]
    broken = Mutation("an import broken", fetch_sessions.path, (("import logging\n", "import logging_gone\n"),),
                      "the module cannot be imported", tests=fetch_sessions.tests)
    outcome = _mutated_run(tree, broken)
    assert outcome.code not in (0, 1) or not outcome.by_assertion, outcome.output
    assert verdict(outcome).startswith("ERROR"), verdict(outcome)
