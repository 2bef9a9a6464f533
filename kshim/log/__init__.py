"""The on-disk partition log: segments of RecordBatch v2 bytes with Kafka's sparse indexes (log.py),
recovery, the cleaner, and the data directories that hold them. Imports nothing, so that a module
of it (the pytest plugin's ephemeral data dirs) loads alone."""
