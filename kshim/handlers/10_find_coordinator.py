"""FindCoordinator: where a consumer group's coordinator is.

- Key type 0 (group): the leader of `__consumer_offsets` partition
  abs(java_string_hashcode(group)) % N (Kafka's placement). The first request creates that topic
  through the controller (N = `offsets_topic_partitions`, 10 by default; replication factor
  min(3, live brokers); retention.ms=-1). COORDINATOR_NOT_AVAILABLE while the partition has no
  live leader; clients retry.
- Key type 1 (transaction): COORDINATOR_NOT_AVAILABLE, transactions are not served yet.
- v4+ batches keys in `coordinator_keys`, one answer per key.
"""
from __future__ import annotations

API_KEY = 10
VERSIONS = (0, 6)


async def handle(ctx, req):
    coordinator = ctx.broker.groups
    key_type = req.get("key_type", 0) if ctx.version >= 1 else 0
    if ctx.version >= 4:
        answers = []
        for key in req.coordinator_keys:
            answer = await coordinator.find(key, key_type)
            answers.append({"key": key, **answer})
        return {"throttle_time_ms": 0, "coordinators": answers}
    answer = await coordinator.find(req.key, key_type)
    if ctx.version == 0:
        answer.pop("error_message")
    return {"throttle_time_ms": 0, **answer}
