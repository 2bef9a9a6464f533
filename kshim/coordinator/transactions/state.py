"""What the coordinator knows of one transactional id, and the states its transaction goes through.

    Empty --AddPartitions--> Ongoing --EndTxn--> PrepareCommit --markers--> CompleteCommit
                                     \\--EndTxn/timeout/re-init--> PrepareAbort --markers--> CompleteAbort
    Complete* / Empty --AddPartitions--> Ongoing ...;  InitProducerId bumps the epoch from
    Empty / Complete*, and fences an Ongoing transaction by aborting it with a bumped epoch.

The names are Kafka's (DescribeTransactions and ListTransactions report them).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum


class TxnState(str, Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def completed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


STATE_IDS = {s: i for i, s in enumerate(TxnState)}
STATES_BY_ID = {i: s for s, i in STATE_IDS.items()}
MAX_EPOCH = 32766  # Short.MaxValue - 1: at it, InitProducerId hands out a new producer id


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    start_ms: int = -1     # when the transaction began (first AddPartitions), -1 when none is open
    update_ms: int = -1    # last change
    # the producer id and epoch before InitProducerId's last bump: a retry of that bump whose
    # answer was lost (KIP-360) names them and gets the current ones
    last_producer_id: int = -1
    last_epoch: int = -1
    # transactions v2 (KIP-890): the client ended (or implicitly joined) this transaction with the
    # v2 protocol, so every EndTxn bumps the epoch; next_producer_id is the id its Complete record
    # switches to when that bump exhausts the epoch (-1: none)
    tv2: bool = False
    next_producer_id: int = -1
    pending: bool = False  # a change is being written to the log: other requests must wait

    @property
    def marker_version(self) -> int:
        """The transaction version its markers carry (WriteTxnMarkers v2): 2 when the epoch they are
        written with is one the coordinator bumped past the transaction's data (a partition then
        refuses a marker at an epoch it already has), else 1."""
        bumped = self.last_producer_id == self.producer_id and self.last_epoch == self.producer_epoch - 1
        return 2 if self.tv2 and bumped else 1

    @property
    def client_ids(self) -> tuple[int, int]:
        """The producer id and epoch the client goes on with (EndTxn v5's answer)."""
        if self.next_producer_id >= 0:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

    def but(self, **changes) -> "TxnMetadata":
        """A copy with changes: what the coordinator writes before it applies it. Built field by
        field (dataclasses.replace took 2.5 us, three times per transaction; this 0.6 us):
        _COPIED below keeps the list in step with the fields."""
        new = TxnMetadata(self.transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                          self.partitions, self.start_ms, self.update_ms, self.last_producer_id, self.last_epoch,
                          self.tv2, self.next_producer_id)
        for name, value in changes.items():
            setattr(new, name, value)  # slots: a name that is no field raises AttributeError
        return new


# every field but `pending` is copied by TxnMetadata.but, in this order: a new field goes there too
_COPIED = ("transactional_id", "producer_id", "producer_epoch", "timeout_ms", "state", "partitions", "start_ms",
           "update_ms", "last_producer_id", "last_epoch", "tv2", "next_producer_id")
assert tuple(f.name for f in fields(TxnMetadata)) == (*_COPIED, "pending"), "update TxnMetadata.but"
