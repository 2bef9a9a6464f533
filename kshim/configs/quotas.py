"""Client quotas (KIP-546's AlterClientQuotas/DescribeClientQuotas model): which entities may carry
which quota keys, the validation Kafka's controller applies, DescribeClientQuotas' filters, and the
resolution of the quota that applies to a (user, client id).

An entity is a set of (entity type, name) pairs, the name None meaning the type's default entity:
{user: alice, client-id: None} is "/users/alice/clients/<default>". Kafka's combinations: user,
client-id, user and client-id, or ip alone. Values are floats on the wire; the integral keys
(byte rates, connection_creation_rate) must be whole numbers.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable, Mapping

from kshim.cluster.image import ClientQuota, QuotaEntityPart
from kshim.errors import BrokerError
from wire.errors import ErrorCode

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

_LONG_MAX = float(2 ** 63 - 1)
_INT_MAX = float(2 ** 31 - 1)
# key -> the largest whole value, or None for a double (Kafka's QuotaConfig types: LONG, INT, DOUBLE)
USER_CLIENT_KEYS: dict[str, float | None] = {
    PRODUCER_BYTE_RATE: _LONG_MAX, CONSUMER_BYTE_RATE: _LONG_MAX,
    REQUEST_PERCENTAGE: None, CONTROLLER_MUTATION_RATE: None}
IP_KEYS: dict[str, float | None] = {CONNECTION_CREATION_RATE: _INT_MAX}

# DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = tuple[QuotaEntityPart, ...]  # sorted by type: the canonical form, a dict key


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The canonical entity of (type, name) pairs; INVALID_REQUEST for an empty entity, a type
    given twice, an unknown type, an empty name or a combination Kafka refuses."""
    parts: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in parts:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in ENTITY_TYPES:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")
        parts[entity_type] = name
    if not parts:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    if IP in parts and len(parts) > 1:
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          "Invalid quota entity combination, IP entity should not be combined with User or ClientId")
    ip = parts.get(IP)
    if ip is not None:
        try:
            ipaddress.ip_address(ip)  # kshim resolves no host names: an address or the default
        except ValueError:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"{ip} is not a valid IP") from None
    return tuple(QuotaEntityPart(t, parts[t]) for t in sorted(parts))


def describe_entity(entity: Entity) -> str:
    return "{" + ", ".join(f"{p.type}={'<default>' if p.name is None else p.name}" for p in entity) + "}"


def check_value(entity: Entity, key: str, value: float) -> None:
    """INVALID_REQUEST unless `key` belongs to the entity's kind and `value` is a valid quota."""
    keys = IP_KEYS if any(p.type == IP for p in entity) else USER_CLIENT_KEYS
    if key not in keys:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if not value > 0.0:  # NaN too
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    largest = keys[key]
    if largest is not None:
        if value > largest:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large")
        if abs(value % 1.0) > 1e-6:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def alter(current: Mapping[str, float], entity: Entity, ops: Mapping[str, float | None]) -> dict[str, float]:
    """The entity's quotas after `ops` (key -> new value, None to remove); BrokerError if invalid."""
    result = dict(current)
    for key, value in ops.items():
        if value is None:
            result.pop(key, None)  # removing an absent key is no error, as in Kafka
        else:
            check_value(entity, key, value)
            result[key] = float(value)
    return result


@dataclass(frozen=True)
class Filter:
    exact: dict[str, str | None]  # type -> name (None: the default entity)
    specified: frozenset[str]  # types the entity must have, any name
    strict: bool

    def matches(self, entity: Entity) -> bool:
        names = {p.type: p.name for p in entity}
        if self.strict and len(names) != len(self.exact) + len(self.specified):
            return False
        return all(t in names and names[t] == name for t, name in self.exact.items()) and \
            all(t in names for t in self.specified)


def parse_filter(components: Iterable[tuple[str, int, str | None]], strict: bool) -> Filter:
    """DescribeClientQuotas' filter from (entity type, match type, match) components, with Kafka's
    errors: INVALID_REQUEST for a malformed component, UNSUPPORTED_VERSION for an unknown type."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if entity_type in exact or entity_type in specified:
            raise BrokerError(ErrorCode.INVALID_REQUEST,
                              f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in ENTITY_TYPES:
            raise BrokerError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(entity_type)
        else:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}")
    types = set(exact) | specified
    if IP in types and types & {USER, CLIENT_ID}:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                                                     "component should not be used with user or clientId filter component.")
    return Filter(exact, frozenset(specified), strict)


def describe(quotas: Iterable[ClientQuota], flt: Filter) -> list[ClientQuota]:
    return [q for q in quotas if flt.matches(q.entity)]


# ---------------------------------------------------------------------------------------- resolution
_U, _C = USER, CLIENT_ID


def _e(user: str | None | bool, client: str | None | bool) -> Entity:
    """An entity of a user and/or a client id part (False: no such part)."""
    parts = []
    if client is not False:
        parts.append(QuotaEntityPart(_C, client))  # type: ignore[arg-type]
    if user is not False:
        parts.append(QuotaEntityPart(_U, user))  # type: ignore[arg-type]
    return tuple(parts)


def resolve_quota(quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str,
                  client_id: str) -> tuple[float, str, str] | None:
    """The quota `key` that applies to (user, client id), with the (user, client id) tags whose
    clients share it, by Kafka's precedence (ClientQuotaManager's default callback):
    /users/u/clients/c, /users/u/clients/<default>, /users/u, /users/<default>/clients/c,
    /users/<default>/clients/<default>, /users/<default>, /clients/c, /clients/<default>.
    None if no level sets `key`."""
    levels: list[tuple[Entity, str, str]] = [
        (_e(user, client_id), user, client_id),
        (_e(user, None), user, client_id),
        (_e(user, False), user, ""),
        (_e(None, client_id), user, client_id),
        (_e(None, None), user, client_id),
        (_e(None, False), user, ""),
        (_e(False, client_id), "", client_id),
        (_e(False, None), "", client_id),
    ]
    for entity, user_tag, client_tag in levels:
        values = quotas.get(entity)
        if values is not None and key in values:
            return values[key], user_tag, client_tag
    return None
