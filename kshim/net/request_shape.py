"""What the server needs to know of any request or response without its handler, read from the
message schemas: the topic-partitions a request names (fault rules, the request log), the error
codes a response carries (the request log), and an error answer for any request (fault rules),
the way Kafka's AbstractRequest.getErrorResponse builds one: the request's topics and partitions
echoed, each with the error, and the top-level error code set where the response has one.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, Mapping

from wire import codec
from wire.schema.model import Field, in_range

_PARTITION_KEYS = ("partition_index", "partition", "index", "partition_id")
_ERROR_FIELDS = frozenset({"error_code", "partition_error_code"})
_MESSAGE_FIELDS = frozenset({"error_message", "message"})
# a response array and the request array it answers, where their names differ: (api key, response field)
_ANSWERS: dict[tuple, str] = {  # (api key, field[, "v0": an older name])
    (0, "responses"): "topic_data", (0, "partition_responses"): "partition_data",
    (1, "responses"): "topics",
    (10, "coordinators"): "coordinator_keys",
    (9, "partitions"): "partition_indexes",
    (15, "groups"): "groups",
    (20, "responses"): "topics", (20, "responses", "v0"): "topic_names",
    (24, "results_by_transaction"): "transactions", (24, "topic_results"): "topics",
    (24, "results_by_partition"): "partitions", (24, "results_by_topic_v3_and_below"): "v3_and_below_topics",
    (27, "partitions"): "partition_indexes",
    (32, "results"): "resources", (33, "responses"): "resources", (44, "responses"): "resources",
    (37, "results"): "topics",
    (42, "results"): "groups_names",
    (61, "partitions"): "partition_indexes",
    (65, "transaction_states"): "transactional_ids",
    (69, "groups"): "group_ids", (77, "groups"): "group_ids",
    (30, "results"): "creations", (31, "filter_results"): "filters",
    (43, "replica_election_results"): "topic_partitions", (43, "partition_result"): "partitions",
    (51, "results"): "upsertions",
    (78, "responses"): "topics", (79, "responses"): "topics",
    (83, "results"): "topics", (84, "results"): "topics", (85, "results"): "topics", (86, "results"): "topics",
    (91, "responses"): "topics", (92, "responses"): "topics",
}
# a response element's field and the request element's field it echoes, where their names differ
_ECHOES = {"partition_index": ("partition", "index"), "partition": ("partition_index", "index"),
           "topic": ("name",), "name": ("topic",), "user": ("name",)}

# request arrays that name topics the request does not act on
_NOT_ASKED = frozenset({"forgotten_topics_data"})  # Fetch: partitions dropped from the fetch session

TopicNames = Callable[[uuid.UUID], "str | None"]


_LIVE: dict[tuple[int, int], tuple[Field, ...]] = {}
_ERROR_PLAN: dict[tuple[int, int], tuple[tuple[str, ...], tuple]] = {}


def _live(fields: tuple[Field, ...], version: int) -> tuple[Field, ...]:
    """The fields a version has; cached by the schema tuple's identity (schemas are module constants)."""
    key = (id(fields), version)
    live = _LIVE.get(key)
    if live is None:
        live = _LIVE[key] = tuple(f for f in fields if in_range(version, f.versions))
    return live


def _get(obj: Any, name: str) -> Any:
    try:
        return obj[name]
    except (KeyError, TypeError):
        return None


def request_partitions(api_key: int, version: int, body: Any, topic_name: TopicNames | None = None
                       ) -> list[tuple[str, int | None]]:
    """(topic, partition) for each partition the request names, (topic, None) for a topic named
    without partitions (Metadata, CreateTopics); topic ids become names through `topic_name`."""
    if body is None:
        return []
    fields = _REQUEST_FIELDS.get(api_key)
    if fields is None:
        fields = _REQUEST_FIELDS[api_key] = codec.message(api_key, "request").fields
    if _topic_plan(fields, version) == _NO_TOPICS:  # most small requests (Heartbeat, ApiVersions...)
        return []
    out: list[tuple[str, int | None]] = []
    _walk_topics(fields, version, body, topic_name, out)
    return out


_REQUEST_FIELDS: dict[int, tuple[Field, ...]] = {}
_RESPONSE_FIELDS: dict[int, tuple[Field, ...]] = {}
_NO_TOPICS: tuple = ((), ())


_TOPIC_PLAN: dict[tuple[int, int], tuple] = {}


def _topic_plan(fields: tuple[Field, ...], version: int) -> tuple:
    """(lists of topic names here, ((list name, topic name fields, topic id field, partition
    sources (list name, partition key of its elements; "" for a list of indexes), element fields)
    for each list of structs)), cached per schema and version."""
    key = (id(fields), version)
    plan = _TOPIC_PLAN.get(key)
    if plan is not None:
        return plan
    live = _live(fields, version)
    names = tuple(f.name for f in live if f.type == "[]string" and f.name == "topic_names")  # DeleteTopics v0-5
    lists = []
    for f in live:
        if f.type != "[]struct" or f.name in _NOT_ASKED:
            continue
        members = _live(f.fields, version)
        topic_names = tuple(g.name for g in members if g.type == "string" and g.entity_type == "topicName")
        topic_id = next((g.name for g in members if g.type == "uuid" and g.name == "topic_id"), None)
        sources = []
        for g in members:
            if g.type == "[]int32" and g.name in ("partitions", "partition_indexes"):
                sources.append((g.name, ""))
            elif g.type == "[]struct":
                keys = [h.name for h in _live(g.fields, version) if h.type == "int32" and h.name in _PARTITION_KEYS]
                if keys:
                    sources.append((g.name, keys[0]))
        lists.append((f.name, topic_names, topic_id, tuple(sources), f.fields))
    plan = _TOPIC_PLAN[key] = (names, tuple(lists))
    return plan


def _walk_topics(fields: tuple[Field, ...], version: int, obj: Any, topic_name: TopicNames | None,
                 out: list[tuple[str, int | None]]) -> None:
    names, lists = _topic_plan(fields, version)
    for name in names:
        out.extend((t, None) for t in _get(obj, name) or ())
    for list_name, topic_names, topic_id, sources, element_fields in lists:
        for element in _get(obj, list_name) or ():
            topic = None
            for n in topic_names:
                topic = _get(element, n)
                if topic:
                    break
            if not topic and topic_id is not None and topic_name is not None:
                tid = _get(element, topic_id)
                if tid is not None and tid.int:
                    topic = topic_name(tid) or str(tid)
            if not topic:
                _walk_topics(element_fields, version, element, topic_name, out)  # transactions[].topics[], ...
                continue
            partitions: list[int] = []
            for source, key in sources:
                value = _get(element, source)
                if value:
                    partitions.extend(value if not key else (_get(item, key) for item in value))
            if partitions:
                out.extend((topic, p) for p in partitions)
            else:
                out.append((topic, None))


def response_errors(api_key: int, version: int, body: Mapping[str, Any] | None) -> list[int]:
    """The distinct non-zero error codes anywhere in a response, in the order met."""
    if body is None:
        return []
    fields = _RESPONSE_FIELDS.get(api_key)
    if fields is None:
        fields = _RESPONSE_FIELDS[api_key] = codec.message(api_key, "response").fields
    here, nested = _error_plan(fields, version)
    if not nested:  # a flat answer (Heartbeat, FindCoordinator v0-3...): its own fields only
        codes = [code for name in here if (code := _get(body, name))]
        return codes if len(codes) < 2 else list(dict.fromkeys(codes))
    found: dict[int, None] = {}
    _collect_errors(fields, version, body, found)
    return list(found)


def _error_plan(fields: tuple[Field, ...], version: int) -> tuple[tuple[str, ...], tuple]:
    """(error fields here, ((name, is_list, sub-fields) of the members that hold errors further down))."""
    key = (id(fields), version)
    plan = _ERROR_PLAN.get(key)
    if plan is None:
        live = _live(fields, version)
        nested = tuple((f.name, f.type == "[]struct", f.fields) for f in live
                       if f.type in ("[]struct", "struct") and f.fields and _error_plan(f.fields, version) != ((), ()))
        plan = _ERROR_PLAN[key] = (tuple(f.name for f in live if f.name in _ERROR_FIELDS), nested)
    return plan


def _collect_errors(fields: tuple[Field, ...], version: int, obj: Any, found: dict[int, None]) -> None:
    here, nested = _error_plan(fields, version)
    for name in here:
        code = _get(obj, name)
        if code:
            found[code] = None
    for name, is_list, sub in nested:
        value = _get(obj, name)
        if value is None:
            continue
        for element in value if is_list else (value,):
            _collect_errors(sub, version, element, found)


def error_response(api_key: int, version: int, request: Any, error_code: int, message: str | None = None
                   ) -> dict[str, Any]:
    """An answer to `request` that carries `error_code` wherever the response has an error field,
    echoing the request's topics, partitions, groups or resources so the client can match it."""
    if api_key == 34:  # AlterReplicaLogDirs asks per dir, then topic; it answers per topic
        asked: dict[str, list[int]] = {}
        for d in _get(request, "dirs") or ():
            for t in d.topics:
                asked.setdefault(t.name, []).extend(t.partitions)
        return {"throttle_time_ms": 0, "results": [
            {"topic_name": name, "partitions": [{"partition_index": i, "error_code": error_code} for i in parts]}
            for name, parts in asked.items()]}
    return _mirror(api_key, codec.message(api_key, "response").fields, version,
                   codec.message(api_key, "request").fields, request, error_code, message)


def carries_errors(api_key: int, version: int) -> bool:
    """Whether a response of this API and version has any error field a fault can fill."""
    def has(fields: tuple[Field, ...]) -> bool:
        return any(f.name in _ERROR_FIELDS or has(f.fields) for f in _live(fields, version))
    return has(codec.message(api_key, "response").fields)


def _mirror(api_key: int, fields: tuple[Field, ...], version: int, request_fields: tuple[Field, ...],
            request: Any, error_code: int, message: str | None) -> dict[str, Any]:
    by_name = {f.name: f for f in _live(request_fields, version)}
    out: dict[str, Any] = {}
    for f in _live(fields, version):
        if f.name in _ERROR_FIELDS:
            out[f.name] = error_code
        elif f.name in _MESSAGE_FIELDS and f.type == "string" and message is not None:
            out[f.name] = message
        elif f.type == "[]struct":
            source = by_name.get(f.name) or by_name.get(_ANSWERS.get((api_key, f.name), "")) \
                or by_name.get(_ANSWERS.get((api_key, f.name, "v0"), ""))
            if source is None or not source.type.startswith("[]"):
                continue  # nothing in the request to echo: an empty list (brokers, members, ...)
            items = _get(request, source.name) or ()
            if source.type == "[]struct":
                out[f.name] = [_mirror(api_key, f.fields, version, source.fields, item, error_code, message)
                               for item in items]
            else:  # a list of names or partition indexes: each becomes an element keyed by it
                key = _element_key(f.fields, version, source)
                if key is not None:
                    out[f.name] = [{key: item, **_mirror(api_key, f.fields, version, (), None, error_code, message)}
                                   for item in items]
        else:
            for name in (f.name, *_ECHOES.get(f.name, ())):
                if name in by_name and by_name[name].type == f.type:
                    value = _get(request, name)
                    if value is not None:
                        out[f.name] = value
                    break
    return out


def _element_key(fields: tuple[Field, ...], version: int, source: Field) -> str | None:
    """The field of a response element that a request's scalar list item fills."""
    for f in _live(fields, version):
        if source.entity_type and f.entity_type == source.entity_type:
            return f.name
    for f in _live(fields, version):
        if source.type == "[]int32" and f.type == "int32" and f.name in _PARTITION_KEYS:
            return f.name
        if source.type == "[]string" and f.type == "string" and f.name == "key":  # FindCoordinator v4+
            return f.name
    return None
