"""The registry's store: the compacted topic `_schemas`, reached as a Kafka client of the broker
(Confluent's KafkaStore). At start it creates the topic when missing (1 partition, replication
factor min(3, brokers), cleanup.policy=compact; min.insync.replicas the broker's default, as
Confluent leaves it), then reads it from the start into the state before serving. A reader task
keeps fetching (read_committed: only what the in-sync replicas hold, so nothing it applied can be
truncated away) and applies each record; `write` produces with acks=all and returns once the
reader has applied the written offsets (read-your-write). Connection loss and leadership moves are
retried with the leader found again through Metadata, until a deadline."""
from __future__ import annotations

import logging
from typing import Any, Sequence

import anyio

from kshim.replication.client import CONNECTION_LOST, BrokerConnection, ClientSecurity
from kshim.schema_registry.state import RegistryState
from wire.compression import CorruptRecordError
from wire.errors import ErrorCode
from wire.records import decode_records, encode_batch, iter_batches

log = logging.getLogger("kshim.schema_registry")

TOPIC = "_schemas"
METADATA, PRODUCE, FETCH, CREATE_TOPICS = 3, 0, 1, 19
METADATA_V, PRODUCE_V, FETCH_V, CREATE_TOPICS_V = 12, 9, 12, 7
REQUEST_TIMEOUT_S = 15.0
WRITE_TIMEOUT_S = 30.0  # Confluent's kafkastore.timeout.ms is 500 ms; a cluster electing a leader needs more
FETCH_WAIT_MS = 500
RETRY_S = 0.2
RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
             ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
             ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
             ErrorCode.NOT_CONTROLLER, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


class StoreError(Exception):
    """The topic could not be written or read in time (Confluent's 50001/50002)."""

    def __init__(self, message: str, code: int = 50001) -> None:
        super().__init__(message)
        self.code = code


class KafkaStore:
    def __init__(self, bootstrap: Sequence[tuple[str, int]], security: ClientSecurity | None,
                 topic: str = TOPIC, client_id: str = "kshim-schema-registry") -> None:
        self.bootstrap = list(bootstrap)
        self.security = security if security is not None else ClientSecurity()  # explicit: no inter-broker default
        self.topic, self.client_id = topic, client_id
        self.state = RegistryState()
        self.applied = anyio.Event()  # set (and replaced) each time the reader applied records
        self.brokers: dict[int, tuple[str, int]] = {}
        self.cluster_id: str | None = None
        self._writer: BrokerConnection | None = None

    # ------------------------------------------------------------------ connections and metadata
    async def _connect(self, host: str, port: int) -> BrokerConnection:
        conn = BrokerConnection(host, port, self.client_id, self.security)
        await conn.connect(REQUEST_TIMEOUT_S)
        return conn

    async def _any(self) -> BrokerConnection:
        failures = []
        for host, port in self.bootstrap + sorted(set(self.brokers.values()) - set(self.bootstrap)):
            try:
                return await self._connect(host, port)
            except CONNECTION_LOST as e:
                failures.append(f"{host}:{port}: {type(e).__name__}: {e}")
        raise ConnectionError("no broker answered: " + "; ".join(failures))

    async def _metadata(self) -> Any:
        conn = await self._any()
        try:
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                answer = await conn.request(METADATA, METADATA_V, {
                    "topics": [{"name": self.topic}], "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False})
        finally:
            await conn.aclose()
        self.brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        self.cluster_id = answer.cluster_id
        return answer

    async def _leader(self) -> tuple[str, int]:
        """The address of the partition's leader, creating the topic when it is missing."""
        while True:
            answer = await self._metadata()
            topic = next((t for t in answer.topics if t.name == self.topic), None)
            if topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                await self._create()
                continue
            if topic.error_code not in (ErrorCode.NONE, *RETRIABLE):
                raise StoreError(f"Metadata of {self.topic}: {ErrorCode(topic.error_code).name}")
            part = next((p for p in topic.partitions if p.partition_index == 0), None)
            if topic.error_code == ErrorCode.NONE and part is not None and part.leader_id in self.brokers:
                return self.brokers[part.leader_id]
            await anyio.sleep(RETRY_S)  # a leader being elected

    async def _create(self) -> None:
        conn = await self._any()
        try:
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                answer = await conn.request(CREATE_TOPICS, CREATE_TOPICS_V, {
                    "topics": [{"name": self.topic, "num_partitions": 1,
                                "replication_factor": min(3, max(1, len(self.brokers))), "assignments": [],
                                "configs": [{"name": "cleanup.policy", "value": "compact"}]}],
                    "timeout_ms": int(REQUEST_TIMEOUT_S * 1000), "validate_only": False})
        finally:
            await conn.aclose()
        code = answer.topics[0].error_code
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS, *RETRIABLE):
            raise StoreError(f"cannot create {self.topic}: {ErrorCode(code).name} {answer.topics[0].error_message or ''}")
        log.info("schema registry: created %s (%s)", self.topic, ErrorCode(code).name)

    # ------------------------------------------------------------------ reading
    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Read the topic from its start, report started once caught up with its end, then go on."""
        started = False
        target: int | None = None
        conn: BrokerConnection | None = None
        try:
            while True:
                try:
                    if conn is None:
                        conn = await self._connect(*await self._leader())
                    with anyio.fail_after(REQUEST_TIMEOUT_S + FETCH_WAIT_MS / 1000):
                        end = await self._fetch(conn, 0 if not started else FETCH_WAIT_MS)
                except (*CONNECTION_LOST, StoreError, _Retry) as e:
                    # a refusal (StoreError) says something is misconfigured: seen at warning level
                    (log.warning if isinstance(e, StoreError) else log.info)(
                        "schema registry: reading %s: %s; retrying", self.topic, e)
                    if conn is not None:
                        await _close(conn)
                        conn = None
                    await anyio.sleep(RETRY_S)
                    continue
                if target is None:
                    target = end
                if not started and self.state.offset >= target:
                    started = True
                    task_status.started()
        finally:
            if conn is not None:
                await _close(conn)

    async def _fetch(self, conn: BrokerConnection, wait_ms: int) -> int:
        """Apply one fetch's records; the partition's last stable offset."""
        answer = await conn.request(FETCH, FETCH_V, {
            "replica_id": -1, "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 16 * 1024 * 1024,
            "isolation_level": 1, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": self.topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": self.state.offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 16 * 1024 * 1024}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        if answer.error_code:
            raise _Retry(ErrorCode(answer.error_code).name)
        part = answer.responses[0].partitions[0]
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and part.log_start_offset > self.state.offset:
            self.state.offset = part.log_start_offset  # records deleted below (DeleteRecords): none to apply
            return part.last_stable_offset
        if part.error_code:
            raise _Retry(ErrorCode(part.error_code).name)
        before = self.state.offset
        if part.records:
            try:
                self._apply_batches(memoryview(part.records))
            except CorruptRecordError as e:  # a batch header it cannot read: where the next one starts is unknown
                raise StoreError(f"{self.topic} at offset {self.state.offset}: {e}") from None
        if self.state.offset != before:
            self.applied.set()
            self.applied = anyio.Event()
        return part.last_stable_offset

    def _apply_batches(self, view: memoryview) -> None:
        for pos, header in iter_batches(view, strict=False):
            if header.next_offset <= self.state.offset:
                continue
            if not header.is_control:
                try:
                    batch = decode_records(view[pos:pos + header.size])
                except CorruptRecordError as e:  # not for this registry to repair: skipped, said
                    log.warning("schema registry: %s offsets %d..%d skipped: %s", self.topic,
                                header.base_offset, header.next_offset - 1, e)
                    batch = []
                for record in batch:
                    if record.offset >= self.state.offset:
                        self.state.apply(record.offset, record.key, record.value)
            self.state.offset = max(self.state.offset, header.next_offset)

    # ------------------------------------------------------------------ writing
    async def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Produce the records in one batch (acks=all) and wait until the reader applied them."""
        batch = encode_batch(records)
        try:
            with anyio.fail_after(WRITE_TIMEOUT_S):
                end = await self._produce(batch) + len(records)
                while self.state.offset < end:
                    await self.applied.wait()
        except TimeoutError:
            raise StoreError(f"the write to {self.topic} was not confirmed within {WRITE_TIMEOUT_S:.0f} s",
                             50002) from None

    async def _produce(self, batch: bytes) -> int:
        while True:
            try:
                if self._writer is None:
                    self._writer = await self._connect(*await self._leader())
                answer = await self._writer.request(PRODUCE, PRODUCE_V, {
                    "transactional_id": None, "acks": -1, "timeout_ms": int(WRITE_TIMEOUT_S * 1000),
                    "topic_data": [{"name": self.topic, "partition_data": [{"index": 0, "records": batch}]}]})
                part = answer.responses[0].partition_responses[0]
                if part.error_code == ErrorCode.NONE:
                    return part.base_offset
                if part.error_code not in RETRIABLE:
                    raise StoreError(f"producing to {self.topic}: {ErrorCode(part.error_code).name} "
                                     f"{part.error_message or ''}")
                log.info("schema registry: producing: %s; retrying", ErrorCode(part.error_code).name)
            except CONNECTION_LOST as e:
                log.info("schema registry: producing: %s; retrying", e)
            except BaseException:  # cancelled (the deadline) mid-request: its answer may still come
                if self._writer is not None:
                    await _close(self._writer)
                    self._writer = None
                raise
            # a retried write may land twice: the same record again changes nothing
            if self._writer is not None:
                await _close(self._writer)
                self._writer = None
            await anyio.sleep(RETRY_S)

    async def aclose(self) -> None:
        if self._writer is not None:
            await _close(self._writer)
            self._writer = None


class _Retry(Exception):
    pass


async def _close(conn: BrokerConnection) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await conn.aclose()
        except OSError:
            pass
