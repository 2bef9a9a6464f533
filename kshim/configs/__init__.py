"""Topic, broker and group configs: the typed table (`definitions`), the one resolver (`resolver`),
group configs (`groups`: `group_config` reads a group's effective configs); client quotas' model
(`quotas`)."""
from kshim.configs.definitions import (BROKER_CONFIGS, COMPRESSION_CODECS, LIST, TOPIC_CONFIGS, ConfigDef, ConfigType,
                                       InvalidConfig, broker_definition, topic_definition)
from kshim.configs import quotas
from kshim.configs.groups import EffectiveGroupConfig, GroupSettings, group_config
from kshim.configs.resolver import (BrokerLevel, Resolved, Source, Synonym, TopicConfig, broker_settings,
                                    check_values, resolve, resolve_group, validate, validate_broker)

__all__ = ["BROKER_CONFIGS", "COMPRESSION_CODECS", "LIST", "TOPIC_CONFIGS", "BrokerLevel", "ConfigDef", "ConfigType",
           "EffectiveGroupConfig", "GroupSettings", "InvalidConfig", "Resolved", "Source", "Synonym", "TopicConfig",
           "broker_definition", "broker_settings", "check_values", "group_config", "quotas", "resolve", "resolve_group",
           "topic_definition", "validate", "validate_broker"]
