"""mypy, with pyproject.toml's [tool.mypy] settings, finds no errors in the checked packages.

To check another package, add its path to CHECKED.
"""
from __future__ import annotations

from pathlib import Path

from mypy import api  # in the test extra, so CI always runs this check

ROOT = Path(__file__).resolve().parent.parent
CHECKED = [
    "wire",
    "kshim",
]


def test_mypy_is_clean(monkeypatch):
    monkeypatch.chdir(ROOT)  # mypy reads pyproject.toml from the working directory
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--no-incremental",
                                      *CHECKED])
    assert status == 0, f"mypy found errors:\n{stdout}{stderr}"
