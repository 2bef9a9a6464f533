"""Consumer groups: the classic protocol's state machine (`group`), KIP-848 consumer groups with
server-side assignors (`consumer_group`, `assignors`), the coordinator that places groups on
`__consumer_offsets` partition leaders and keeps their committed offsets (`coordinator`), and the
offsets record format (`offsets_format`)."""
from kshim.coordinator.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator
from kshim.coordinator.runtime import java_string_hashcode, partition_for
from kshim.coordinator.groups.group import Group, GroupConfig, Member

__all__ = ["GroupCoordinator", "Group", "GroupConfig", "Member", "OFFSETS_TOPIC", "java_string_hashcode",
           "partition_for"]
