"""The replicas this broker hosts and the operations on them (Kafka's ReplicaManager)."""
from kshim.replica.manager import PartitionAppend, ReplicaManager, TxnMarker

__all__ = ["PartitionAppend", "ReplicaManager", "TxnMarker"]
