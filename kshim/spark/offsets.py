"""Spark offsets for Kafka: per-partition offsets as JSON, {"topic": {"0": 12, "1": 40}}.

The same shape as Spark's own Kafka source writes to a query's checkpoint, and the same shape the
startingOffsets/endingOffsets options take. Everything here is pure (no clients), so it is cheap
to reason about and to test.

Spark compares a batch's start and end offsets as JSON *strings* to decide whether there is new
data, so every offset map leaves here normalized: topics sorted, partitions in numeric order.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from kshim.spark.options import EARLIEST, LATEST, OffsetSpec

TP = tuple[str, int]            # (topic, partition)
OffsetMap = dict[TP, int]       # the working form
OffsetJson = dict[str, dict[str, int]]  # the form Spark checkpoints


def to_json(offsets: Mapping[TP, int]) -> OffsetJson:
    out: OffsetJson = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json(data: Mapping[str, Mapping[str, int]] | None) -> OffsetMap:
    return {(topic, int(p)): int(o) for topic, parts in (data or {}).items() for p, o in parts.items()}


def resolve(spec: OffsetSpec, partitions: Iterable[TP], earliest: Mapping[TP, int], latest: Mapping[TP, int],
            name: str) -> OffsetMap:
    """A concrete offset for each partition from `earliest`, `latest` or offset JSON (-2/-1 allowed).

    Like Spark, offset JSON must name every partition read: a partial map is more likely a mistake
    than an intent.
    """
    partitions = sorted(partitions)
    if spec == "earliest":
        return {tp: earliest[tp] for tp in partitions}
    if spec == "latest":
        return {tp: latest[tp] for tp in partitions}
    given = from_json(spec)  # type: ignore[arg-type]
    missing = [tp for tp in partitions if tp not in given]
    if missing:
        raise ValueError(f"{name} must give an offset for every partition read; missing "
                         + ", ".join(f"{t}-{p}" for t, p in missing))
    unknown = sorted(set(given) - set(partitions))
    if unknown:
        raise ValueError(f"{name} names partitions that are not read: " + ", ".join(f"{t}-{p}" for t, p in unknown))
    resolved: OffsetMap = {}
    for tp in partitions:
        offset = given[tp]
        resolved[tp] = earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
    return resolved


def cap(offsets: Mapping[TP, int], bound: Mapping[TP, int]) -> OffsetMap:
    """Offsets no further than `bound` (Trigger.AvailableNow's target); partitions unknown to the
    bound were created after the target was taken and are not read in this run."""
    return {tp: min(off, bound[tp]) for tp, off in offsets.items() if tp in bound}


def rate_limit(start: Mapping[TP, int], end: Mapping[TP, int], max_offsets: int) -> OffsetMap:
    """End offsets covering at most `max_offsets` offsets in total (maxOffsetsPerTrigger).

    As in Spark, the budget is split across partitions in proportion to how far each lags; unlike
    Spark's rounding, the total never exceeds the budget: the floors of the proportional shares
    first, then the remainder one offset at a time to the partitions with the largest fractions.
    `start` must cover every partition of `end` (new partitions at their earliest offset).
    """
    lag = {tp: max(0, end[tp] - start[tp]) for tp in end}
    total = sum(lag.values())
    if total <= max_offsets:
        return dict(end)
    shares = {tp: max_offsets * n / total for tp, n in lag.items()}
    take = {tp: int(s) for tp, s in shares.items()}
    left = max_offsets - sum(take.values())
    for tp in sorted(lag, key=lambda tp: (-(shares[tp] - take[tp]), tp)):
        if left <= 0:
            break
        if take[tp] < lag[tp]:
            take[tp] += 1
            left -= 1
    return {tp: start[tp] + take[tp] for tp in end}


def ranges(start: Mapping[TP, int], end: Mapping[TP, int]) -> list[tuple[TP, int, int]]:
    """The non-empty [from, until) range of each partition, in a stable order."""
    out = []
    for tp in sorted(end):
        begin = start.get(tp)
        if begin is None:
            raise ValueError(f"no start offset for {tp[0]}-{tp[1]}")
        if end[tp] < begin:
            raise ValueError(f"end offset {end[tp]} is before start offset {begin} for {tp[0]}-{tp[1]}")
        if end[tp] > begin:
            out.append((tp, begin, end[tp]))
    return out
