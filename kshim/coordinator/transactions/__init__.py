"""Transactions: the coordinator that owns transactional ids on the leaders of
`__transaction_state` (`coordinator`), their durable records (`log_format`), their states
(`state`) and the writer of COMMIT/ABORT markers to the partitions of a transaction (`markers`)."""
from kshim.coordinator.transactions.coordinator import TRANSACTION_TOPIC, TransactionCoordinator
from kshim.coordinator.transactions.state import TxnMetadata, TxnState

__all__ = ["TRANSACTION_TOPIC", "TransactionCoordinator", "TxnMetadata", "TxnState"]
