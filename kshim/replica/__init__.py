"""The replicas this broker hosts and the operations on them (Kafka's ReplicaManager)."""
from kshim.replica.manager import ReplicaManager

__all__ = ["ReplicaManager"]
