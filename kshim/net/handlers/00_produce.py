"""Produce: append record batches to the partition leaders' logs. The appends and the wait for
COMMITTED are the ReplicaManager's (kshim/replica); this module auto-creates topics and maps the
request and response.

- acks must be 0, 1 or -1 (all); anything else gets INVALID_REQUIRED_ACKS for every partition.
- acks=0 gets no response at all (the connection keeps its response order for the others); if
  any partition failed, the connection is closed instead, as Kafka does: that is the only way an
  acks=0 producer learns to refresh its metadata (after a leader moved, say).
- acks=1 answers once the leader appended.
- acks=all: NOT_ENOUGH_REPLICAS (19) without appending when the ISR is smaller than
  min.insync.replicas; otherwise it answers once the high watermark covers the records
  (COMMITTED), waiting on an event while the connection goes on with later requests. At the
  request timeout it answers REQUEST_TIMED_OUT (7) and keeps the records: the outcome is unknown,
  they may still be committed and delivered. If the ISR fell below min.insync.replicas while
  waiting it answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (20); if this broker stopped leading,
  NOT_LEADER_OR_FOLLOWER.
- Each partition succeeds or fails on its own. Within one partition's records, batches are
  appended one after another and an error stops the rest without rolling back what was appended.
- Batches stay opaque: header read, CRC32C checked, base offset and leader epoch patched in place.
  A compressed batch is first decompressed and its records walked in a worker thread
  (kshim/replica/validation.py): an unknown codec is UNSUPPORTED_COMPRESSION_TYPE, a payload that
  does not decompress within the request size limit CORRUPT_MESSAGE, records that do not match
  the header INVALID_RECORD. Bad CRC: CORRUPT_MESSAGE; over max.message.bytes: MESSAGE_TOO_LARGE; idempotence errors:
  OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH; a retried duplicate is acknowledged with
  its original offset.
- producer_byte_rate (client quotas, kshim/net/quota_manager.py): the bytes of the records count
  once appended (or answered); over the quota, throttle_time_ms says how long the client must wait
  and the connection handles no request of it before then (acks=0: the mute alone).
- Unknown topics are auto-created when the broker allows it; a partition this broker does not
  lead gets NOT_LEADER_OR_FOLLOWER, and the client finds the leader through Metadata.
- v13 names topics by id (KIP-516): an id this broker's metadata does not know (never created, or
  deleted, even if a topic of the same name was created since) is UNKNOWN_TOPIC_ID for each of its
  partitions and is never auto-created; the response echoes the ids.
- Transaction verification (KIP-890, kshim/coordinator/transactions/verification.py): a
  transactional batch on a partition where its producer has no open transaction at its epoch is
  appended only once the transaction coordinator says it belongs to the open transaction (v3-11:
  AddPartitionsToTxn came first) or, from v12 (transactions v2, sent by clients when the cluster
  finalizes transaction.version 2), has added the partition to it. Refused: INVALID_TXN_STATE
  (TRANSACTION_ABORTABLE from v11), INVALID_PRODUCER_EPOCH for a fenced or bumped epoch,
  INVALID_PRODUCER_ID_MAPPING; NOT_ENOUGH_REPLICAS (retried by clients) while the coordinator
  cannot answer yet. So a retry arriving after its transaction was aborted opens no transaction.
  Batches of more than one producer id in one transactional request: INVALID_PRODUCER_ID_MAPPING;
  transactional batches in a request without a transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  for every partition (Kafka's answer; such a write could not be verified).
- ACLs (docs/security.md): WRITE on each topic, else TOPIC_AUTHORIZATION_FAILED for its
  partitions (nothing appended, never auto-created); auto-creation also needs CREATE on the
  cluster or the topic (else UNKNOWN_TOPIC_OR_PARTITION); a transactional produce needs WRITE on
  its transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition.
"""
from __future__ import annotations

from typing import Awaitable, Callable

from construct import Container

from kshim.configs.quotas import PRODUCER_BYTE_RATE
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.throttling import charge
from kshim.net.protocol import ProtocolError
from kshim.replica import PartitionAppend, Records
from kshim.replica.validation import Rejection
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire import records
from wire.errors import ErrorCode

API_KEY = 0
VERSIONS = (3, 13)
BY_ID = 13  # topics named by id from this version
UNKNOWN_ID = ""  # no topic has an empty name: the key under which unknown ids fail


async def handle(ctx: RequestContext, req: Container) -> Response:
    broker = ctx.broker
    entries: list[tuple[str, int, Records]] = []
    topic_errors: dict[str, ErrorCode] = {}
    by_id = ctx.version >= BY_ID
    names: list[str] = []
    for topic_data in req.topic_data:
        if by_id:
            known = broker.topics_by_id.get(topic_data.topic_id)
            names.append(known.name if known is not None else UNKNOWN_ID)
            if known is None:
                topic_errors[UNKNOWN_ID] = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            names.append(topic_data.name)
    asked = [n for n in names if n != UNKNOWN_ID]
    tid = req.get("transactional_id")
    if tid is not None and not authz.txn_allowed(ctx, AclOperation.WRITE, tid):
        topic_errors.update(dict.fromkeys(asked, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    else:
        topic_errors.update(dict.fromkeys(authz.denied_topics(ctx, AclOperation.WRITE, asked),
                                          ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    for topic_data, name in zip(req.topic_data, names):
        if name in topic_errors or by_id:
            pass
        elif name not in broker.topics and not authz.may_create_topic(ctx, name):
            topic_errors[name] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif name not in broker.topics:
            try:
                await broker.auto_create(name)
            except BrokerError as e:
                topic_errors[name] = e.code
        entries.extend((name, pd.index, pd.records) for pd in topic_data.partition_data)
    replicas = broker.replica_manager
    rejected = await replicas.validator.check([data for _, _, data in entries],
                                              [replicas.requires_keys(name, index) for name, index, _ in entries])
    refused = await _verify(ctx, tid, entries, {i for i, (name, _, _) in enumerate(entries)
                                                if name in topic_errors or name not in broker.topics} | set(rejected))
    if refused:
        rejected = {**rejected, **refused}
    results = replicas.append(req.acks, req.timeout_ms / 1000, entries, topic_errors, rejected=rejected)
    size = sum(len(data) for _, _, data in entries if data is not None)
    if req.acks == 0:
        charge(ctx, PRODUCER_BYTE_RATE, size)  # no answer to carry it: the mute alone throttles
        if not isinstance(results, list):  # compression.type recompression ran in a worker thread
            results = await results
        failed = [(name, index, r.error) for (name, index, _), r in zip(entries, results) if r.error]
        if failed:
            raise ProtocolError(f"acks=0 produce failed for {failed[:3]}: closing so the producer refreshes metadata")
        return None
    if isinstance(results, list):
        return _response(req, results, charge(ctx, PRODUCER_BYTE_RATE, size))
    return _when_committed(ctx, req, results, size)


async def _verify(ctx: RequestContext, tid: str | None, entries: list[tuple[str, int, Records]],
                  skip: set[int]) -> dict[int, Rejection]:
    """Ask the transaction coordinator about the entries whose transactional batch would open a
    transaction on its partition; the refusals, by entry. Transactional batches without a
    transactional id: the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers."""
    verifier = None  # the transaction coordinator's, built by the first transactional batch (not for plain produce)
    producer: tuple[int, int] | None = None
    wanted: dict[int, tuple[str, int]] = {}
    refused: dict[int, Rejection] = {}
    for i, (name, index, data) in enumerate(entries):
        if i in skip or not data:
            continue
        try:
            header = records.read_header(data, 0)
        except records.CorruptRecordError:
            continue  # the append answers for a bad batch
        if header.producer_id < 0 or not header.is_transactional:
            continue
        if tid is None:
            return {j: Rejection(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                 "transactional records in a request without a transactional id", 0)
                    for j in range(len(entries))}
        if producer is None:
            producer = (header.producer_id, header.producer_epoch)
        elif producer != (header.producer_id, header.producer_epoch):
            refused[i] = Rejection(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                   "transactional records of more than one producer in one request", 0)
            continue
        if verifier is None:
            verifier = ctx.transactions.verifier
        if verifier.needs(name, index, *producer):
            wanted[i] = (name, index)
    if not wanted or producer is None or tid is None or verifier is None:
        return refused
    codes, stale = await verifier.verify(tid, *producer, set(wanted.values()), add=ctx.version >= 12)
    for_client = _for_client or _load_for_client()
    for i, tp in wanted.items():
        answer = codes.get(tp, ErrorCode.NETWORK_EXCEPTION)
        code = for_client(answer, abortable_known=ctx.version >= 11)
        if code:
            refused[i] = Rejection(code, f"the transaction coordinator of {tid!r} answered {answer.name} "
                                         f"for {tp[0]}-{tp[1]}", 0)
        elif tp in stale:
            refused[i] = Rejection(ErrorCode.INVALID_TXN_STATE,
                                   "a marker for this producer was written while verifying", 0)
    return refused


# start-up and plain produce: the transaction code loads with the first transactional batch. Kept
# here once loaded: an import statement per transactional Produce cost 1.5% of a transaction's CPU
_for_client: Callable[..., ErrorCode] | None = None


def _load_for_client() -> Callable[..., ErrorCode]:
    global _for_client
    from kshim.coordinator.transactions.verification import for_client
    _for_client = for_client
    return for_client


async def _when_committed(ctx: RequestContext, req: Container, pending: Awaitable[list[PartitionAppend]],
                          size: int) -> dict:
    results = await pending
    return _response(req, results, charge(ctx, PRODUCER_BYTE_RATE, size))


def _response(req: Container, results: list[PartitionAppend], throttle_ms: int) -> dict:
    answers = iter(results)
    return {"throttle_time_ms": throttle_ms, "responses": [
        {**({"topic_id": t.topic_id} if "topic_id" in t else {"name": t.name}),  # as the request named it
         "partition_responses": [_partition_response(pd.index, next(answers)) for pd in t.partition_data]}
        for t in req.topic_data]}


def _partition_response(index: int, result: PartitionAppend) -> dict:
    return {
        "index": index,
        "error_code": result.error,
        "base_offset": result.base_offset if result.error == ErrorCode.NONE else -1,
        "log_append_time_ms": result.log_append_time,
        "log_start_offset": result.log_start_offset,
        "record_errors": [],
        "error_message": result.message,
    }
