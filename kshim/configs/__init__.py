"""Topic and broker configs: the typed table (`definitions`) and the one resolver (`resolver`); client
quotas' model (`quotas`)."""
from kshim.configs.definitions import (BROKER_CONFIGS, COMPRESSION_CODECS, LIST, TOPIC_CONFIGS, ConfigDef, ConfigType,
                                       InvalidConfig, broker_definition, topic_definition)
from kshim.configs import quotas
from kshim.configs.resolver import (BrokerLevel, Resolved, Source, Synonym, TopicConfig, broker_settings,
                                    check_values, resolve, validate, validate_broker)

__all__ = ["BROKER_CONFIGS", "COMPRESSION_CODECS", "LIST", "TOPIC_CONFIGS", "BrokerLevel", "ConfigDef", "ConfigType",
           "InvalidConfig", "Resolved", "Source", "Synonym", "TopicConfig", "broker_definition", "broker_settings",
           "check_values", "quotas", "resolve", "topic_definition", "validate", "validate_broker"]
