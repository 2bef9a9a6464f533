"""The coordinators: the group and transaction coordinators, shards of one coordinator runtime on
their internal topics (docs/architecture.md)."""
