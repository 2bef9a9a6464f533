"""The mutation catalog keeps up with the code and the document (the runs themselves are slow and
made by hand: `python -m tests.mutations.run`)."""
from __future__ import annotations

import pytest

from tests.mutations.catalog import MUTATIONS
from tests.mutations.run import ROOT, doc_rows, patched, row_of


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.row)
def test_every_patch_still_applies_and_changes_the_source(mutation):
    source = (ROOT / mutation.path).read_text()
    mutant = patched(source, mutation)
    assert mutant != source
    compile(mutant, mutation.path, "exec")


def test_every_row_has_exactly_one_mutation_and_names_tests_that_exist():
    rows = doc_rows()
    assert len(rows) >= 20
    covered = [row_of(m, rows).rule for m in MUTATIONS]
    assert sorted(covered) == sorted(r.rule for r in rows), "rows without a mutation, or with two"
    for row in rows:
        assert row.tests, f"no test named for: {row.rule}"
        for test in row.tests:
            path, _, name = test.partition("::")
            assert (ROOT / path).is_file(), test
            assert not name or f"def {name.split('[')[0]}(" in (ROOT / path).read_text(), test


def test_rows_are_read_from_both_columns_of_a_table():
    doc = "| rule | proved by |\n|---|---|\n| a rule | `tests/x.py::test_a`, `compat_tests/y.py` |\n"
    [row] = doc_rows(doc)
    assert row.rule == "a rule" and row.tests == ("tests/x.py::test_a", "compat_tests/y.py")
