"""Topic and broker configs: the typed table (`definitions`) and the one resolver (`resolver`)."""
from kshim.configs.definitions import (BROKER_CONFIGS, LIST, TOPIC_CONFIGS, ConfigDef, ConfigType, InvalidConfig,
                                       topic_definition)
from kshim.configs.resolver import Resolved, Source, Synonym, TopicConfig, broker_settings, resolve, validate

__all__ = ["BROKER_CONFIGS", "LIST", "TOPIC_CONFIGS", "ConfigDef", "ConfigType", "InvalidConfig", "Resolved",
           "Source", "Synonym", "TopicConfig", "broker_settings", "resolve", "validate", "topic_definition"]
