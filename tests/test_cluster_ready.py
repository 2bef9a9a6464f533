"""`kshim serve --brokers N` says it is ready only once every broker has registered with the
controller and applied a metadata image that lists them all: a client that connects at the ready
line to any broker is told of every broker (a broker that registered first and had not yet applied
the image with the last one listed only the brokers before it)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kshim.controller.process import SupervisorService

pytestmark = pytest.mark.unit


def _child(pid: int) -> SimpleNamespace:
    return SimpleNamespace(proc=SimpleNamespace(pid=pid), started=SimpleNamespace(poll=lambda: None),
                           state="running", log_path="broker.log")


class _Views(SupervisorService):
    """The supervisor's service over a controller whose status answers are scripted."""

    def __init__(self, views: list[dict[str, Any]]) -> None:
        self.supervisor = SimpleNamespace(brokers={0: _child(100), 1: _child(101)}, log_tail=lambda b: "")
        self.views = views
        self.asked = 0

    async def controller_view(self) -> dict[str, Any] | None:
        view = self.views[min(self.asked, len(self.views) - 1)]
        self.asked += 1
        return view


def _view(version: int, applied: dict[int, int]) -> dict[str, Any]:
    return {"controller": {"image_version": version},
            "brokers": [{"id": n, "alive": True, "pid": 100 + n, "image_version": v} for n, v in applied.items()]}


@pytest.mark.anyio
async def test_the_cluster_is_ready_once_every_broker_applied_the_image_that_lists_them_all():
    service = _Views([_view(7, {0: 5, 1: 7}),  # both registered; broker 0 still on the image before broker 1's
                      _view(8, {0: 6, 1: 8}),  # a later change: broker 0 still behind the registrations
                      _view(9, {0: 7, 1: 8})])  # broker 0 has the image that lists broker 1
    await service.wait_registered([0, 1], 5.0, applied=True)
    assert service.asked == 3


@pytest.mark.anyio
async def test_a_started_broker_is_waited_for_until_it_registered():
    service = _Views([{"controller": {"image_version": 3}, "brokers": [{"id": 0, "alive": True, "pid": 100}]},
                      _view(4, {0: 4, 1: 4})])
    await service.wait_registered([1], 5.0)
    assert service.asked == 2
