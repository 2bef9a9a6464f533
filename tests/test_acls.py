"""The authorizer's decisions (kshim.security.acls), as Kafka's StandardAuthorizer makes them, and the
controller's storage of ACL bindings."""
from __future__ import annotations

import pytest

from kshim.security.acls import (AclBinding, AclFilter, AclIndex, AclOperation as Op, Authorizer, AuthorizerConfig,
                        InvalidAcl, PatternType as Pat, Permission, ResourceType as RT, host_of, parse_super_users,
                        validate_binding, validate_filter)
from kshim.broker import BrokerConfig
from kshim.cli import build_parser
from kshim.configs.options import authorizer_argv, authorizer_config
from kshim.configs.resolver import broker_settings
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.store import MetadataStore
from kshim.errors import BrokerError
from wire.errors import ErrorCode

ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def acl(name: str, principal: str = ALICE, op: Op = Op.READ, perm: Permission = ALLOW, *,
        rtype: RT = RT.TOPIC, pattern: Pat = Pat.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def auth(*acls: AclBinding, super_users=(), everyone: bool = False, enabled: bool = True) -> Authorizer:
    return Authorizer(AuthorizerConfig(enabled, frozenset(super_users), everyone), AclIndex(acls))


def may(a: Authorizer, principal: str, op: Op, name: str, rtype: RT = RT.TOPIC, host: str = "10.0.0.1") -> bool:
    return a.allowed(principal, host, op, rtype, name)


# ------------------------------------------------------------------ patterns
def test_literal_acl_applies_to_its_name_only():
    a = auth(acl("orders"))
    assert may(a, ALICE, Op.READ, "orders")
    assert not may(a, ALICE, Op.READ, "orders2")  # no ACL applies and allow.everyone is off
    assert not may(a, BOB, Op.READ, "orders")


def test_prefixed_acl_applies_to_names_starting_with_it():
    a = auth(acl("sales-", pattern=Pat.PREFIXED))
    assert may(a, ALICE, Op.READ, "sales-eu") and may(a, ALICE, Op.READ, "sales-")
    assert not may(a, ALICE, Op.READ, "sale") and not may(a, ALICE, Op.READ, "presales-eu")


def test_literal_wildcard_name_applies_to_every_resource_of_its_type():
    a = auth(acl("*"))
    assert may(a, ALICE, Op.READ, "anything") and may(a, ALICE, Op.READ, "*")
    assert not may(a, ALICE, Op.READ, "anything", RT.GROUP)  # another resource type
    # a PREFIXED "*" is a prefix like any other: it does not mean everything
    b = auth(acl("*", pattern=Pat.PREFIXED))
    assert not may(b, ALICE, Op.READ, "anything") and may(b, ALICE, Op.READ, "*x")


def test_wildcard_principal_and_host():
    a = auth(acl("t", "User:*"), acl("u", host="10.0.0.9"))
    assert may(a, ALICE, Op.READ, "t") and may(a, BOB, Op.READ, "t")
    assert may(a, ALICE, Op.READ, "u", host="10.0.0.9")
    assert not may(a, ALICE, Op.READ, "u", host="10.0.0.1")


def test_resource_types_are_separate():
    a = auth(acl("x", rtype=RT.GROUP), acl("x", rtype=RT.TRANSACTIONAL_ID, op=Op.WRITE))
    assert may(a, ALICE, Op.READ, "x", RT.GROUP)
    assert not may(a, ALICE, Op.READ, "x", RT.TOPIC)
    assert may(a, ALICE, Op.WRITE, "x", RT.TRANSACTIONAL_ID)


# ------------------------------------------------------------------ decisions
def test_deny_wins_over_allow_whatever_pattern_gives_it():
    a = auth(acl("orders"), acl("ord", op=Op.READ, perm=DENY, pattern=Pat.PREFIXED))
    assert not may(a, ALICE, Op.READ, "orders")
    a = auth(acl("*", op=Op.ALL), acl("secret", perm=DENY, op=Op.ALL, principal="User:*"))
    assert may(a, ALICE, Op.WRITE, "public") and not may(a, ALICE, Op.WRITE, "secret")


def test_deny_from_one_host_only():
    a = auth(acl("t", "User:*", Op.ALL), acl("t", "User:*", Op.ALL, DENY, host="10.6.6.6"))
    assert may(a, ALICE, Op.READ, "t", host="10.0.0.1")
    assert not may(a, ALICE, Op.READ, "t", host="10.6.6.6")


@pytest.mark.parametrize("given", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_describe_is_implied_by_read_write_delete_alter(given):
    a = auth(acl("t", op=given))
    assert may(a, ALICE, Op.DESCRIBE, "t")
    assert may(a, ALICE, given, "t")


@pytest.mark.parametrize("given", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.CLUSTER_ACTION])
def test_describe_is_not_implied_by_others(given):
    assert not may(auth(acl("t", op=given)), ALICE, Op.DESCRIBE, "t")


def test_describe_configs_is_implied_by_alter_configs_only():
    assert may(auth(acl("t", op=Op.ALTER_CONFIGS)), ALICE, Op.DESCRIBE_CONFIGS, "t")
    assert not may(auth(acl("t", op=Op.ALTER)), ALICE, Op.DESCRIBE_CONFIGS, "t")
    assert not may(auth(acl("t", op=Op.DESCRIBE_CONFIGS)), ALICE, Op.ALTER_CONFIGS, "t")


def test_implication_is_not_the_other_way_and_deny_denies_its_own_operation_only():
    assert not may(auth(acl("t", op=Op.DESCRIBE)), ALICE, Op.READ, "t")
    # DENY READ with ALLOW ALL: DESCRIBE stays allowed (a DENY implies nothing)
    a = auth(acl("t", op=Op.ALL), acl("t", op=Op.READ, perm=DENY))
    assert may(a, ALICE, Op.DESCRIBE, "t") and may(a, ALICE, Op.WRITE, "t")
    assert not may(a, ALICE, Op.READ, "t")


def test_all_allows_and_denies_every_operation():
    assert all(may(auth(acl("t", op=Op.ALL)), ALICE, op, "t") for op in (Op.READ, Op.WRITE, Op.ALTER_CONFIGS))
    a = auth(acl("t", op=Op.ALL), acl("t", op=Op.ALL, perm=DENY))
    assert not any(may(a, ALICE, op, "t") for op in (Op.READ, Op.DESCRIBE, Op.DELETE))


def test_allow_everyone_if_no_acl_found():
    # no ACL applies to the resource: decided by the setting
    assert not may(auth(), ALICE, Op.READ, "t")
    assert may(auth(everyone=True), ALICE, Op.READ, "t")
    # an ACL for someone else applies to the resource: it is no longer open to all
    a = auth(acl("t", BOB), everyone=True)
    assert may(a, BOB, Op.READ, "t") and not may(a, ALICE, Op.READ, "t")
    assert may(a, ALICE, Op.READ, "other")
    # a DENY alone closes the resource to its principal only
    d = auth(acl("t", BOB, Op.ALL, DENY), everyone=True)
    assert not may(d, BOB, Op.READ, "t")


def test_super_users_and_disabled_authorizer_allow_everything():
    a = auth(acl("t", "User:*", Op.ALL, DENY), super_users={"User:admin"})
    assert may(a, "User:admin", Op.WRITE, "t") and may(a, "User:admin", Op.ALTER, "kafka-cluster", RT.CLUSTER)
    assert not may(a, ALICE, Op.WRITE, "t")
    off = auth(acl("t", "User:*", Op.ALL, DENY), enabled=False)
    assert may(off, ALICE, Op.WRITE, "t")


def test_allowed_operations_bits():
    a = auth(acl("t", op=Op.WRITE), acl("t", op=Op.ALTER_CONFIGS))
    bits = a.allowed_operations(ALICE, "h", RT.TOPIC, "t")
    assert bits == (1 << Op.WRITE) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)
    assert a.allowed_operations(BOB, "h", RT.TOPIC, "t") == 0


def test_some_topic_writable_for_idempotent_producers():
    assert auth(acl("t", op=Op.WRITE)).any_allowed(ALICE, "h", Op.WRITE, RT.TOPIC)
    assert not auth(acl("t", op=Op.READ)).any_allowed(ALICE, "h", Op.WRITE, RT.TOPIC)
    assert not auth(acl("t", op=Op.WRITE), acl("t", op=Op.WRITE, perm=DENY)).any_allowed(ALICE, "h", Op.WRITE, RT.TOPIC)
    assert not auth(acl("t", op=Op.WRITE), acl("*", op=Op.ALL, perm=DENY)).any_allowed(ALICE, "h", Op.WRITE, RT.TOPIC)
    # a prefixed DENY covering the prefixed ALLOW
    assert not auth(acl("ab", op=Op.WRITE, pattern=Pat.PREFIXED),
                    acl("a", op=Op.WRITE, perm=DENY, pattern=Pat.PREFIXED)).any_allowed(ALICE, "h", Op.WRITE, RT.TOPIC)
    assert auth(everyone=True).any_allowed(ALICE, "h", Op.WRITE, RT.TOPIC)


# ------------------------------------------------------------------ filters
BINDINGS = (
    acl("orders"), acl("orders", BOB, Op.WRITE, DENY), acl("ord", pattern=Pat.PREFIXED), acl("*"),
    acl("orders", rtype=RT.GROUP), acl("kafka-cluster", rtype=RT.CLUSTER, op=Op.ALTER),
)


def found(f: AclFilter) -> list[AclBinding]:
    return AclIndex(BINDINGS).find(f)


def test_filter_any_matches_everything():
    assert found(AclFilter(RT.ANY, None, Pat.ANY, None, None, Op.ANY, Permission.ANY)) == list(BINDINGS)


def test_filter_literal_prefixed_any_and_match_patterns():
    assert found(AclFilter(RT.TOPIC, "orders", Pat.LITERAL, None, None, Op.ANY, Permission.ANY)) == list(BINDINGS[:2])
    assert found(AclFilter(RT.TOPIC, None, Pat.PREFIXED, None, None, Op.ANY, Permission.ANY)) == [BINDINGS[2]]
    assert found(AclFilter(RT.ANY, "orders", Pat.ANY, None, None, Op.ANY, Permission.ANY)) == \
        [BINDINGS[0], BINDINGS[1], BINDINGS[4]]
    # MATCH: every binding that applies to the topic "orders"
    assert found(AclFilter(RT.TOPIC, "orders", Pat.MATCH, None, None, Op.ANY, Permission.ANY)) == list(BINDINGS[:4])


def test_filter_entry_fields():
    assert found(AclFilter(RT.ANY, None, Pat.ANY, BOB, None, Op.ANY, Permission.ANY)) == [BINDINGS[1]]
    assert found(AclFilter(RT.ANY, None, Pat.ANY, None, None, Op.ANY, DENY)) == [BINDINGS[1]]
    assert found(AclFilter(RT.ANY, None, Pat.ANY, None, "*", Op.ALTER, Permission.ANY)) == [BINDINGS[5]]
    assert found(AclFilter(RT.ANY, None, Pat.ANY, None, "10.0.0.1", Op.ANY, Permission.ANY)) == []


def test_filters_with_unknown_codes_are_invalid():
    with pytest.raises(InvalidAcl):
        validate_filter(AclFilter(RT.UNKNOWN, None, Pat.ANY, None, None, Op.ANY, Permission.ANY))
    with pytest.raises(InvalidAcl):
        validate_filter(AclFilter(RT.ANY, None, 9, None, None, Op.ANY, Permission.ANY))
    validate_filter(AclFilter(RT.ANY, None, Pat.MATCH, None, None, Op.ANY, Permission.ANY))


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize("bad", [
    acl("t", rtype=RT.ANY), acl("t", rtype=RT.UNKNOWN), acl("t", rtype=42),
    acl("t", pattern=Pat.MATCH), acl("t", pattern=Pat.ANY),
    acl("t", op=Op.ANY), acl("t", op=Op.UNKNOWN),
    acl("t", perm=Permission.ANY), acl("t", perm=Permission.UNKNOWN),
    acl(""), acl("my-cluster", rtype=RT.CLUSTER, op=Op.ALTER),
    acl("t", principal="alice"), acl("t", principal="User:"), acl("t", host=""),
])
def test_invalid_bindings(bad):
    with pytest.raises(InvalidAcl):
        validate_binding(bad)


def test_valid_bindings():
    for good in (acl("t"), acl("*", "User:*"), acl("kafka-cluster", rtype=RT.CLUSTER, op=Op.IDEMPOTENT_WRITE),
                 acl("p-", pattern=Pat.PREFIXED, perm=DENY), acl("tx", rtype=RT.TRANSACTIONAL_ID, op=Op.WRITE)):
        validate_binding(good)


def test_super_users_and_hosts_parse():
    assert parse_super_users(" User:a ;User:b;;") == {"User:a", "User:b"}
    with pytest.raises(InvalidAcl):
        parse_super_users("admin")
    assert host_of("10.1.2.3:5555") == "10.1.2.3" and host_of("[::1]:9092") == "::1"


# ------------------------------------------------------------------ the controller stores them
def test_controller_stores_publishes_and_deletes_acls(tmp_path):
    path = tmp_path / "metadata.sqlite"
    controller = Controller(MetadataStore(path), ControllerConfig())
    version = controller.image.version
    controller.create_acls((acl("t"), acl("t"), acl("g", rtype=RT.GROUP)))
    assert controller.image.acls == (acl("t"), acl("g", rtype=RT.GROUP)) and controller.image.version > version
    version = controller.image.version
    controller.create_acls((acl("t"),))  # already there: nothing changes, nothing published
    assert controller.image.version == version
    with pytest.raises(BrokerError) as e:
        controller.create_acls((acl("x"), acl("", BOB)))
    assert e.value.code == ErrorCode.INVALID_REQUEST and len(controller.image.acls) == 2
    controller.close()

    controller = Controller(MetadataStore(path), ControllerConfig())  # a restarted controller has them
    assert set(controller.image.acls) == {acl("t"), acl("g", rtype=RT.GROUP)}
    deleted = controller.delete_acls((AclFilter(RT.GROUP, None, Pat.ANY, None, None, Op.ANY, Permission.ANY),
                                      AclFilter(RT.ANY, None, Pat.ANY, BOB, None, Op.ANY, Permission.ANY)))
    assert [d.acls for d in deleted] == [(acl("g", rtype=RT.GROUP),), ()]
    assert controller.image.acls == (acl("t"),)
    controller.close()
    controller = Controller(MetadataStore(path), ControllerConfig())
    assert controller.image.acls == (acl("t"),)
    controller.close()


# ------------------------------------------------------------------ settings
def test_command_line_settings_and_what_describe_configs_reports():
    def settings(*argv: str) -> AuthorizerConfig:
        return authorizer_config(build_parser().parse_args(["serve", *argv]))

    assert settings() == AuthorizerConfig()
    on = settings("--authorizer", "--super-users", "User:admin;User:ops", "--allow-everyone-if-no-acl-found")
    assert on == AuthorizerConfig(True, frozenset({"User:admin", "User:ops"}), True)
    assert settings(*authorizer_argv(on)) == on  # what the supervisor hands its brokers
    for ignored in (["--super-users", "User:a"], ["--allow-everyone-if-no-acl-found"]):
        with pytest.raises(SystemExit):
            settings(*ignored)  # would do nothing without --authorizer
    with pytest.raises(SystemExit):
        settings("--authorizer", "--super-users", "admin")

    def reported(config: AuthorizerConfig) -> dict:
        names = ("authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found")
        return {r.name: r.raw for r in broker_settings(BrokerConfig(authorizer=config)) if r.name in names}

    assert reported(AuthorizerConfig()) == {"authorizer.class.name": "", "super.users": None,
                                            "allow.everyone.if.no.acl.found": "false"}
    assert reported(on) == {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                            "super.users": "User:admin;User:ops", "allow.everyone.if.no.acl.found": "true"}
