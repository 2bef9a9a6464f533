"""Server-side assignors of KIP-848 consumer groups (the `server_assignor` of ConsumerGroupHeartbeat).

An assignor maps the members' subscriptions to a target assignment:
    assign(subscriptions, topics, current) -> {member_id: {(topic_id, partition), ...}}
- subscriptions: member id -> names of the topics it subscribes to (regexes already resolved);
- topics: name -> (topic_id, partition count), the subscribed topics that exist;
- current: the previous target assignment (member id -> partitions), for stickiness.

- `uniform` (Kafka's default): every partition of a subscribed topic goes to one of its
  subscribers; partition counts differ by at most one between members that could take each other's
  partitions; partitions stay where they were whenever balance allows (sticky).
- `range`: per topic, the subscribers sorted by member id get contiguous ranges of partitions, the
  first `count % subscribers` of them one more (not sticky, like the classic range assignor).
"""
from __future__ import annotations

from typing import Callable, Hashable, Mapping

TP = tuple[Hashable, int]  # (topic id, partition)
Subscriptions = Mapping[str, set[str] | frozenset[str]]
Topics = Mapping[str, tuple[Hashable, int]]
Assignment = dict[str, set[TP]]

DEFAULT_ASSIGNOR = "uniform"


def _partitions(subscriptions: Subscriptions, topics: Topics) -> list[tuple[TP, list[str]]]:
    """Every assignable partition (topics by name, partitions in order) with its subscribers."""
    out: list[tuple[TP, list[str]]] = []
    for name in sorted(topics):
        topic_id, count = topics[name]
        subscribers = sorted(m for m, subs in subscriptions.items() if name in subs)
        if subscribers:
            out.extend(((topic_id, p), subscribers) for p in range(count))
    return out


def uniform(subscriptions: Subscriptions, topics: Topics, current: Mapping[str, set[TP]] | None = None) -> Assignment:
    current = current or {}
    out: Assignment = {m: set() for m in subscriptions}
    eligible: dict[TP, list[str]] = dict(_partitions(subscriptions, topics))
    owner: dict[TP, str] = {}
    for m in sorted(subscriptions):  # stickiness: keep what is still valid
        for tp in current.get(m, ()):
            if tp in eligible and m in eligible[tp] and tp not in owner:
                owner[tp] = m
                out[m].add(tp)
    for tp, members in eligible.items():  # new partitions to the least loaded subscriber
        if tp not in owner:
            m = min(members, key=lambda x: (len(out[x]), x))
            owner[tp] = m
            out[m].add(tp)
    # balance: move a partition from a more loaded member to one with at least two fewer
    while True:
        moved = False
        for a in sorted(out, key=lambda x: (-len(out[x]), x)):
            best = None
            for tp in sorted(out[a], key=lambda t: (str(t[0]), t[1]), reverse=True):
                b = min(eligible[tp], key=lambda x: (len(out[x]), x))
                if len(out[b]) < len(out[a]) - 1 and (best is None or len(out[b]) < len(out[best[1]])):
                    best = (tp, b)
            if best is not None:
                tp, b = best
                out[a].discard(tp)
                out[b].add(tp)
                moved = True
                break
        if not moved:
            return out


def range_assignor(subscriptions: Subscriptions, topics: Topics,
                   current: Mapping[str, set[TP]] | None = None) -> Assignment:
    out: Assignment = {m: set() for m in subscriptions}
    for name in sorted(topics):
        topic_id, count = topics[name]
        subscribers = sorted(m for m, subs in subscriptions.items() if name in subs)
        if not subscribers:
            continue
        per, extra = divmod(count, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            n = per + (1 if i < extra else 0)
            out[m].update((topic_id, p) for p in range(start, start + n))
            start += n
    return out


ASSIGNORS: dict[str, Callable[..., Assignment]] = {"uniform": uniform, "range": range_assignor}
