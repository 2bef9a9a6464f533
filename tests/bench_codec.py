"""Microbenchmark of wire.codec on the hot messages (issue 18): `python -m tests.bench_codec`.

Prints CPU microseconds per call (best of 5 repeats) of decode/encode for a 1-partition produce
request, its response, a fetch request, fetch responses with 1 and 100 partitions and a 10-topic
metadata response. Each is timed for the construct tree (the reference) and the generated code (wire.codegen).
"""
from __future__ import annotations

import time
import timeit
import uuid

from wire import codec
from wire.primitives import GatherStream

BATCH = bytes(range(70))  # a small record batch's size; the codec never looks inside


def _cases() -> list[tuple[str, int, int, str, dict]]:
    t = uuid.UUID(int=7)
    produce = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
               "topic_data": [{"name": "bench", "topic_id": t, "partition_data": [{"index": 0, "records": BATCH}]}]}
    produce_resp = {"responses": [{"name": "bench", "topic_id": t, "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 1234, "log_append_time_ms": -1, "log_start_offset": 0}]}],
        "throttle_time_ms": 0}
    fetch = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
             "session_id": 0, "session_epoch": -1, "topics": [{"topic": "bench", "topic_id": t, "partitions": [
                 {"partition": 0, "current_leader_epoch": 0, "fetch_offset": 100, "last_fetched_epoch": -1,
                  "log_start_offset": -1, "partition_max_bytes": 1048576}]}],
             "forgotten_topics_data": [], "rack_id": ""}

    def fetch_resp(n: int) -> dict:
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 1, "responses": [
            {"topic": "bench", "topic_id": t, "partitions": [
                {"partition_index": p, "error_code": 0, "high_watermark": 1000, "last_stable_offset": 1000,
                 "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
                 "records": BATCH} for p in range(n)]}]}

    metadata = {"throttle_time_ms": 0, "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
                "cluster_id": "kshim", "controller_id": 0, "topics": [
                    {"error_code": 0, "name": f"topic-{i}", "topic_id": uuid.UUID(int=i + 1), "is_internal": False,
                     "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 0, "leader_epoch": 0,
                                     "replica_nodes": [0], "isr_nodes": [0], "offline_replicas": []}],
                     "topic_authorized_operations": -2147483648} for i in range(10)]}
    return [("Produce v9 request", 0, 9, "request", produce), ("Produce v11 request", 0, 11, "request", produce),
            ("Produce v11 response", 0, 11, "response", produce_resp),
            ("Fetch v12 request", 1, 12, "request", fetch), ("Fetch v16 request", 1, 16, "request", fetch),
            ("Fetch v16 response, 1 partition", 1, 16, "response", fetch_resp(1)),
            ("Fetch v16 response, 100 partitions", 1, 16, "response", fetch_resp(100)),
            ("Metadata v12 response, 10 topics", 3, 12, "response", metadata)]


def _best(fn, number: int) -> float:
    """CPU microseconds per call, best of 5 (CPU time: the machine's other load counts less)."""
    return min(timeit.repeat(fn, number=number, repeat=5, timer=time.process_time)) / number * 1e6


def main() -> None:
    """Each figure is the best of 5 repeats; the tree (reference) and the generated code alternate
    per message, so both see the same machine load."""
    print(f"{'message':36} {'bytes':>6} | {'decode us: tree':>15} {'generated':>9} | "
          f"{'encode_into us: tree':>20} {'generated':>9}")
    for name, api, version, kind, obj in _cases():
        data = codec.encode(api, version, kind, obj)
        number = 100 if len(data) > 5000 else 1000
        codec.decode(api, version, kind, data)  # generate outside the timing
        d_ref = _best(lambda: codec.decode_reference(api, version, kind, data), number)
        d_gen = _best(lambda: codec.decode(api, version, kind, data), number)
        e_ref = _best(lambda: codec.encode_into_reference(api, version, kind, obj, GatherStream()), number)
        e_gen = _best(lambda: codec.encode_into(api, version, kind, obj, GatherStream()), number)
        print(f"{name:36} {len(data):6} | {d_ref:15.1f} {d_gen:9.1f} | {e_ref:20.1f} {e_gen:9.1f}")


if __name__ == "__main__":
    main()
