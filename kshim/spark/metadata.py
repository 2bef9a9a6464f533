"""Driver-side questions to the brokers: which partitions exist, and their earliest/latest offsets.

Latest offsets come from ListOffsets with the read's isolation level, so under read_committed
"latest" is the last stable offset (LSO: below it no transaction is still open), which is exactly
where a read_committed fetch stops; under read_uncommitted it is the high watermark. That is what
a consumer configured with isolation.level=read_committed gets as the high offset of
query_watermark_offsets(); the admin client asks for all partitions in one request per broker.
"""
from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kshim.spark.offsets import TP, OffsetMap
from kshim.spark.options import ReadOptions

REQUEST_TIMEOUT_S = 30.0


class Brokers:
    """One admin client for one read; created lazily, never pickled."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.opts.admin_config())
        return self._admin

    def partitions(self) -> list[TP]:
        """The partitions read: assign's as given, or every partition of the subscribed topics.

        A subscribed topic that does not exist has no partitions (yet): a streaming query picks
        its partitions up, from the earliest offset, once they appear. Metadata for all topics is
        asked for, not for the subscribed ones, so that asking never auto-creates a topic.
        """
        if self.opts.assign:
            return list(self.opts.assign)
        metadata = self._retry(lambda: self.admin.list_topics(timeout=REQUEST_TIMEOUT_S))
        found: list[TP] = []
        for topic in self.opts.topics:
            meta = metadata.topics.get(topic)
            if meta is None or (meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                continue
            if meta.error is not None:
                raise KafkaException(meta.error)
            found.extend((topic, p) for p in meta.partitions)
        return sorted(found)

    def earliest(self, partitions: Iterable[TP]) -> OffsetMap:
        return self._list_offsets(partitions, OffsetSpec.earliest())

    def latest(self, partitions: Iterable[TP]) -> OffsetMap:
        return self._list_offsets(partitions, OffsetSpec.latest())

    def _list_offsets(self, partitions: Iterable[TP], spec: OffsetSpec) -> OffsetMap:
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        isolation = (IsolationLevel.READ_COMMITTED if self.opts.isolation_level == "read_committed"
                     else IsolationLevel.READ_UNCOMMITTED)

        def ask() -> OffsetMap:
            futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in wanted},
                                              isolation_level=isolation, request_timeout=REQUEST_TIMEOUT_S)
            return {(tp.topic, tp.partition): f.result(timeout=REQUEST_TIMEOUT_S + 5).offset
                    for tp, f in futures.items()}

        return self._retry(ask)

    def _retry(self, ask):
        # fetchOffset.numRetries / fetchOffset.retryIntervalMs, as in Spark: a leader move or a
        # broker restart fails a request or two, not the query
        for attempt in range(self.opts.offset_retries + 1):
            try:
                return ask()
            except KafkaException:
                if attempt == self.opts.offset_retries:
                    raise
                time.sleep(self.opts.offset_retry_interval_s)
        raise AssertionError("unreachable")
