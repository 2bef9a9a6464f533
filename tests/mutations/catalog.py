"""One deliberate bug per rule of docs/consistency.md: a text patch of the kshim source that
breaks exactly that rule. `python -m tests.mutations.run` applies each to a copy of the tree and
runs the tests the row names; a rule whose tests still pass is not proved by them.

`row` is a phrase found in exactly one rule cell of docs/consistency.md; the tests to run are
read from that row, so the document and the proof cannot drift apart.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    row: str                            # a phrase unique to the rule's cell in docs/consistency.md
    path: str                           # file under the project root
    hunks: tuple[tuple[str, str], ...]  # (old, new): each old text occurs exactly once in the file
    breaks: str                         # what the patched broker does wrong


PARTITION, PRODUCE = "kshim/partition.py", "kshim/net/handlers/00_produce.py"
REPLICAS, FETCH = "kshim/replica/manager.py", "kshim/replica/fetch.py"
TXN_COORDINATOR = "kshim/coordinator/transactions/coordinator.py"

MUTATIONS: tuple[Mutation, ...] = (
    # ------------------------------------------------------------------ producers
    Mutation("`acks=0` gets no response", PRODUCE, (
        ("            raise ProtocolError(f\"acks=0 produce failed for {failed[:3]}: closing so the producer refreshes metadata\")\n        return None",
         "            raise ProtocolError(f\"acks=0 produce failed for {failed[:3]}: closing so the producer refreshes metadata\")\n        return {\"responses\": responses, \"throttle_time_ms\": 0}"),),
        "acks=0 requests get a response"),
    Mutation("`acks=1` answers once the leader has appended", REPLICAS, (
        ("        appended = partition.submit_append(data)\n",
         "        appended = partition.submit_append(data) if acks != 1 else AppendResult(\n"
         "            base_offset=partition.log_end_offset, last_offset=partition.log_end_offset)\n"),),
        "acks=1 answers without appending"),
    Mutation("`acks=all` answers only once the records are COMMITTED", PARTITION, (
        ("        if result.appended_batches:\n            self._advance_hw()\n            self.wake_all()\n        return result",
         "        if result.appended_batches:\n            self.wake_all()\n        return result"),
        ("        self.log.maybe_flush(now)  # the high watermark",
         "        self._advance_hw()\n        self.log.maybe_flush(now)  # the high watermark")),
        "on one broker records become COMMITTED only at the next housekeeping run (up to 1 s later)"),
    Mutation("offsets are unique and increasing", PRODUCE, (
        ("\"base_offset\": result.base_offset if result.error == ErrorCode.NONE else -1,",
         "\"base_offset\": result.last_offset if result.error == ErrorCode.NONE else -1,"),),
        "the producer is told the batch's last offset as its base: not where its records are"),
    Mutation("no atomicity across a request", PARTITION, (
        # a request of several batches is appended batch by batch (Partition._append_in_turn)
        ("        result.log_append_time = append_time\n        pos, end = 0, len(buf)\n",
         "        result.log_append_time = append_time\n        pos, end = 0, len(buf)\n"
         "        start = self.log.log_end_offset\n"),
        ("            if header is None:\n                break\n            if header is _DUPLICATE:\n"
         "                pos += result.skipped\n                continue\n            job = ",
         "            if header is None:\n                self.log.truncate_to(start)\n"
         "                result.appended_batches = 0\n                break\n            if header is _DUPLICATE:\n"
         "                pos += result.skipped\n                continue\n            job = ")),
        "an invalid batch rolls back the batches of the request appended before it"),
    Mutation("each partition of a request succeeds or fails on its own", REPLICAS, (
        ("        return self._await_commit(results, waits, timeout_s) if waits else results\n",
         "        first = next((r.error for r in results if r.error), ErrorCode.NONE)\n"
         "        for r in results:\n            r.error = first\n"
         "        return self._await_commit(results, waits, timeout_s) if waits else results\n"),),
        "one failed partition fails every partition of the request"),
    Mutation("an idempotent producer's retried batch", PARTITION, (
        ("            if check.is_duplicate:", "            if False and check.is_duplicate:"),),
        "a retried idempotent batch is appended again"),
    Mutation("`flush.messages` opts into fsync", "kshim/configs/resolver.py", (
        ("flush_messages=None if flush_messages == LONG_MAX else flush_messages,", "flush_messages=None,"),),
        "the topic's flush.messages never reaches the log"),
    # ------------------------------------------------------------------ consumers
    Mutation("`read_committed` sees only COMMITTED records", PARTITION, (
        ("        lso = self._high_watermark\n        if self.dormant is not None:",
         "        lso = self.log.log_end_offset\n        if self.dormant is not None:"),),
        "read_committed reads up to the log end, past the high watermark"),
    Mutation("an open transaction holds it at the transaction's first offset", PARTITION, (
        ("        if self.producers.ongoing:\n", "        if False:\n"),),
        "open transactions do not hold the last stable offset"),
    Mutation("`read_committed` never sees records of aborted transactions", FETCH, (
        ("result.aborted_transactions = partition.log.aborted_between(p.fetch_offset, _end_of(data))",
         "result.aborted_transactions = []"),),
        "read_committed fetches do not name the aborted transactions"),
    Mutation("`read_uncommitted` may also see UNCOMMITTED records", PARTITION, (
        ("        if isolation_level == 1:\n            return self.last_stable_offset",
         "        if True:\n            return self.last_stable_offset"),),
        "read_uncommitted is bounded like read_committed"),
    Mutation("ListOffsets latest and the Fetch watermarks follow the same bound", FETCH, (
        ("result.last_stable_offset = partition.last_stable_offset",
         "result.last_stable_offset = partition.high_watermark"),),
        "Fetch reports the high watermark as its last stable offset"),
    # ------------------------------------------------------------------ with followers
    Mutation("acks=1 records are UNCOMMITTED until the in-sync followers have them", "kshim/net/handlers/02_list_offsets.py", (
        ("        return partition.read_bound(isolation_level), -1", "        return partition.read_bound(0), -1"),),
        "ListOffsets latest answers the log end offset under read_committed"),
    Mutation("acks=all with in-sync followers that do not fetch", REPLICAS, (
        ("        result.error, result.message = ErrorCode.REQUEST_TIMED_OUT, (",
         "        result.error, result.message = ErrorCode.NONE, ("),),
        "acks=all answers success at the timeout though the records are not COMMITTED"),
    Mutation("acks=all when the ISR is smaller than `min.insync.replicas`", REPLICAS, (
        ("        if acks == -1 and len(partition.isr) < partition.min_insync_replicas:",
         "        if acks == -1 and len(partition.isr) < partition.min_insync_replicas and partition.append(data):"),),
        "NOT_ENOUGH_REPLICAS after appending the records"),
    Mutation("NOT_ENOUGH_REPLICAS_AFTER_APPEND", REPLICAS, (
        ("    if len(partition.isr) < partition.min_insync_replicas:\n        result.error, result.message = "
         "ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND",
         "    if False:\n        result.error, result.message = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND"),),
        "acks=all answers success though the ISR fell below min.insync.replicas while it waited"),
    Mutation("`kshim.commit.quorum=majority` commits", PARTITION, (
        ("        if self.majority_quorum:\n            ends", "        if False:\n            ends"),),
        "the majority commit quorum waits for the whole ISR"),
    Mutation("`kshim.uncommitted.read.limit=high-watermark` bounds", PARTITION, (
        ("return self._high_watermark if self.uncommitted_reads_to_hw else self.log_end_offset",
         "return self.log_end_offset"),),
        "read_uncommitted reads to the log end whatever the topic says"),
    Mutation("a leader crash never loses a COMMITTED record", PARTITION, (
        ("        if self.log.truncate_to(offset):\n            log.warning(\"%s-%d: truncated",
         "        if False:\n            log.warning(\"%s-%d: truncated"),),
        "a returning former leader keeps its divergent suffix"),
    Mutation("an idempotent acks=all producer across repeated leader crashes", PARTITION, (
        ("            if header.producer_id >= 0:\n                self._track(self.producers, header, memoryview(data)",
         "            if False:\n                self._track(self.producers, header, memoryview(data)"),),
        "followers do not replicate producer state: a new leader takes retries for new batches"),
    Mutation("leaders are elected from the ISR only", "kshim/controller/controller.py", (
        ("        in_sync = [r for r in p.replicas if r in p.isr and r in alive]",
         "        in_sync = [r for r in p.replicas if r in alive]"),),
        "any alive replica may be elected leader"),
    Mutation("an admin's preferred leader election", "kshim/controller/controller.py", (
        ("            if preferred not in p.isr or preferred not in alive or not self._holds_the_leaders_log(topic, p, preferred):",
         "            if preferred not in alive:"),),
        "a preferred election hands leadership to an out-of-sync replica"),
    Mutation("a partition reassignment completes only once every target replica is in the ISR",
             "kshim/controller/controller.py", (
        ("        if not isr or not replicas or any(r not in isr for r in replicas):\n            return []",
         "        if not replicas:\n            return []"),),
        "a reassignment drops the old replicas before the new ones caught up"),
    # ------------------------------------------------------------------ transactions
    Mutation("become visible to read_committed all at once when it commits", "kshim/coordinator/groups/coordinator.py", (
        ("        if not committed or index not in self.loaded:\n            return",
         "        if True:\n            return"),),
        "offsets sent with a transaction never take effect when it commits"),
    Mutation("a new instance with the same transactional.id fences the old one", TXN_COORDINATOR, (
        ("        if meta.state == TxnState.ONGOING:\n            # a previous instance",
         "        if False:\n            # a previous instance"),),
        "a new instance leaves the old one's transaction open"),
    Mutation("a transaction open longer than transaction.timeout.ms", TXN_COORDINATOR, (
        ("tg.start_soon(self._begin_end, meta, False, True)",
         "tg.start_soon(self._begin_end, meta, False, False)"),),
        "the timeout aborts the transaction without bumping the producer epoch (no fencing)"),
    Mutation("a SIGKILLed transaction coordinator or partition leader mid-transaction", TXN_COORDINATOR, (
        ("            if meta is not None:\n                self.txns[tid] = meta",
         "            if meta is not None and meta.state != TxnState.ONGOING:\n                self.txns[tid] = meta"),),
        "a new transaction coordinator forgets the open transactions it loads"),
    Mutation("exactly once: 100,000 records copied", TXN_COORDINATOR, (
        ("                if meta.state.preparing:\n                    self._to_complete.append(tid)",
         "                if False:\n                    self._to_complete.append(tid)"),),
        "a new transaction coordinator never finishes the commits and aborts it finds half-written"),
    Mutation("exactly once with the Java client", "kshim/coordinator/groups/coordinator.py", (
        ("                    if marker is not None and marker.committed:\n                        self._apply_record",
         "                    if False:\n                        self._apply_record"),),
        "a new group coordinator forgets offsets committed in transactions"),
)
