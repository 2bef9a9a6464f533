"""Consumer groups, classic protocol: the group state machine (`group`), the coordinator that
places groups on `__consumer_offsets` partition leaders and keeps their committed offsets
(`coordinator`), and the offsets record format (`offsets_format`). KIP-848 groups come later."""
from kshim.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator, java_string_hashcode, partition_for
from kshim.groups.group import Group, GroupConfig, Member

__all__ = ["GroupCoordinator", "Group", "GroupConfig", "Member", "OFFSETS_TOPIC", "java_string_hashcode",
           "partition_for"]
