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

Share groups (KIP-932) have one assignor, `simple` (Kafka's SimpleAssignor), where several members
may share a partition: per topic, every partition gets at least one subscriber; with at least as
many partitions as subscribers each partition has exactly one and the subscribers' counts differ
by at most one, with more subscribers than partitions each subscriber gets exactly one partition
and the partitions' member counts differ by at most one. Pairs of the current assignment stay
whenever balance allows (sticky; balance first, as Kafka's).
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


def _spread(many: list, few: list, current: set[tuple]) -> dict:
    """Map every item of `many` to one item of `few` so that the items of `few` get floor or ceil
    of len(many)/len(few) each; (many, few) pairs of `current` are kept while quotas allow."""
    base, extra = divmod(len(many), len(few))
    count = dict.fromkeys(few, 0)
    out: dict = {}

    def room(f) -> bool:
        return count[f] < base or count[f] == base and extra_left[0] > 0

    extra_left = [extra]

    def take(m, f) -> None:
        if count[f] == base:
            extra_left[0] -= 1
        count[f] += 1
        out[m] = f

    for m in many:
        for f in few:
            if (m, f) in current and room(f):
                take(m, f)
                break
    for m in many:
        if m not in out:
            f = min((f for f in few if room(f)), key=lambda f: count[f])
            take(m, f)
    return out


def simple(subscriptions: Subscriptions, topics: Topics, current: Mapping[str, set[TP]] | None = None) -> Assignment:
    """Kafka's share-group SimpleAssignor (module notes): a partition may go to several members."""
    current = current or {}
    out: Assignment = {m: set() for m in subscriptions}
    for name in sorted(topics):
        topic_id, count = topics[name]
        members = sorted(m for m, subs in subscriptions.items() if name in subs)
        if not members or count <= 0:
            continue
        partitions = list(range(count))
        owned = {(m, p) for m in members for t, p in current.get(m, ()) if t == topic_id}
        if len(members) <= count:  # each partition to one member
            for p, m in _spread(partitions, members, {(p, m) for m, p in owned}).items():
                out[m].add((topic_id, p))
        else:  # each member to one partition
            for m, p in _spread(members, partitions, owned).items():
                out[m].add((topic_id, p))
    return out


ASSIGNORS: dict[str, Callable[..., Assignment]] = {"uniform": uniform, "range": range_assignor}
