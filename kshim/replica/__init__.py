"""The replicas this broker hosts and the operations on them (Kafka's ReplicaManager). Handlers
map requests to these calls and results to responses; coordinators write through them.

- Hosting: each metadata image opens the replicas assigned to this broker, applies their topic
  configs and partition state, and removes (deletes from disk) those no longer assigned; a topic
  deleted and created again under the same name gets a new, empty replica.
- `get_partition_or_error`: the one lookup every partition request goes through: the topic (by
  name, or by id: UNKNOWN_TOPIC_ID), the index in range (else UNKNOWN_TOPIC_OR_PARTITION), hosted
  and led here (else NOT_LEADER_OR_FOLLOWER), and the client's current leader epoch (KIP-320).
- `append` (Produce): acks validated, NOT_ENOUGH_REPLICAS refused before appending for acks=all,
  the partition appends (patching batches in place in the request's buffer where it is
  writable), and acks=all waits on the
  partition's high-watermark signal, not by polling. The wait gives up at once when the replica
  stops leading, even if it leads again (its log may have been truncated and refilled).
- `append_and_wait` (coordinators and transaction markers, Kafka's origin=Coordinator): the same
  append and wait for COMMITTED, without the min.insync.replicas checks; a coordinator's own
  batches are checked for their producer epoch only (no sequence numbers).
- `fetch`: a follower's fetch offset is recorded before reading (it may advance the high
  watermark and so complete acks=all waits); the long-poll waits on an event that appends, high
  watermark moves and leadership changes on the asked partitions set, and re-reads everything
  when woken. Records are the bytes the log read, passed through without copying.
"""
from kshim.replica.appends import PartitionAppend, Records, TxnMarker
from kshim.replica.fetch import FetchParams, FetchPartition, FetchPartitionData
from kshim.replica.manager import ReplicaManager

__all__ = ["FetchParams", "FetchPartition", "FetchPartitionData", "PartitionAppend", "Records", "ReplicaManager", "TxnMarker"]
