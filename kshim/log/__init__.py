"""The on-disk partition log: segments of RecordBatch v2 bytes with Kafka's sparse indexes."""
from .log import CLEAN_SHUTDOWN_FILE, START_OFFSET_FILE, Log, LogConfig, OffsetOutOfRange

__all__ = ["Log", "LogConfig", "OffsetOutOfRange", "CLEAN_SHUTDOWN_FILE", "START_OFFSET_FILE"]
