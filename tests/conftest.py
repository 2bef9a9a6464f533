"""Fixtures shared by the unit tests (markers and the skip policy are in the root conftest.py)."""
from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """The broker runs on asyncio; its async unit tests do too."""
    return "asyncio"
