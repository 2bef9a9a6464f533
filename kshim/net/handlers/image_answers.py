"""Answers kept encoded while the metadata image they were made of is current: Metadata and
FindCoordinator answer most clients word for word until the next image (without an authorizer:
then the answer depends on the principal). Not a handler module (no NN_ prefix)."""
from __future__ import annotations

from typing import Awaitable, Callable, Hashable

from kshim.net.handlers import RequestContext
from kshim.net.protocol import Encoded


class ImageAnswers:
    """One API's answers per request shape (what the answer depends on besides the image), at
    most `most` shapes per image, kept per broker (tests run several in one process)."""

    def __init__(self, api_key: int, most: int) -> None:
        self.api_key = api_key
        self.most = most
        # id(broker) -> (the broker and the image the answers are of, kept so that their identities
        # are not reused while cached; shape -> answer)
        self._held: dict[int, tuple[object, object, dict[Hashable, Encoded]]] = {}

    async def answer(self, ctx: RequestContext, shape: Hashable, make: Callable[[], Awaitable[dict]],
                     keep: Callable[[dict], bool] | None = None) -> dict:
        """The answer kept for `shape`, else `make()`'s, kept unless the image changed while it
        was made or `keep` refuses it (a transient error)."""
        broker, image = ctx.broker, ctx.broker.image
        held = self._held.get(id(broker))
        if held is None or held[0] is not broker or held[1] is not image:
            held = self._held[id(broker)] = (broker, image, {})
        answers = held[2]
        answer = answers.get(shape)
        if answer is None:
            body = await make()
            if broker.image is not image or (keep is not None and not keep(body)):
                return body  # an answer older than the image, or one not to repeat
            if len(answers) >= self.most:
                answers.clear()
            answer = answers[shape] = Encoded(self.api_key, ctx.version, body)
        return answer.copy()
