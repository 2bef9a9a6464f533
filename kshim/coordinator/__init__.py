"""The coordinators: the group and transaction coordinators, shards of one coordinator runtime on
their internal topics (docs/architecture.md).

Their internal topics are named here, where nothing is imported: a broker builds each coordinator
on first use or once it leads a partition of its topic (kshim.net.broker_server), and must know
the names without loading the coordinators."""

OFFSETS_TOPIC = "__consumer_offsets"  # the group coordinator's
TRANSACTION_TOPIC = "__transaction_state"  # the transaction coordinator's
SHARE_STATE_TOPIC = "__share_group_state"  # the share coordinator's
