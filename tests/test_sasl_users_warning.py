"""The start-up warning of a SASL listener no client can authenticate on with PLAIN or SCRAM
(kshim.broker.missing_sasl_users): when it is due, and what it tells to do. The process tests
(the WARNING in a serve's log, once, and none once a user exists): compat_tests/test_ctl_scram.py."""
from __future__ import annotations

from pathlib import Path

from kshim.broker import missing_sasl_users
from kshim.cluster.image import MetadataImage, ScramEntry
from kshim.security.config import SecurityConfig, parse_listeners

DATA = Path("/srv/kshim-data")
NO_CREDENTIALS = MetadataImage(1, "c", 0)


def config(listeners: str, mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
           users: dict[str, str] | None = None) -> SecurityConfig:
    return SecurityConfig(listeners=parse_listeners(listeners), sasl_mechanisms=tuple(mechanisms.split(",")),
                          users=users or {})


def stored(*mechanisms: str) -> MetadataImage:
    return MetadataImage(2, "c", 0, scram=tuple(ScramEntry("alice", m, "s", "k", "k", 4096) for m in mechanisms))


def test_a_sasl_listener_without_users_names_itself_and_the_ctl_command():
    why = missing_sasl_users(config("PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093"), NO_CREDENTIALS, DATA)
    assert why is not None
    assert "listener SASL_PLAINTEXT://127.0.0.1:9093 has no SASL user" in why and "9092" not in why
    assert "kshim ctl --data-dir /srv/kshim-data scram add NAME --mechanism SCRAM-SHA-256 --password-stdin" in why


def test_no_warning_once_a_user_exists():
    listeners = "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093"
    assert missing_sasl_users(config(listeners), stored("SCRAM-SHA-512"), DATA) is None
    assert missing_sasl_users(config(listeners, users={"bob": "pw"}), NO_CREDENTIALS, DATA) is None


def test_no_warning_without_a_sasl_listener_or_a_password_mechanism():
    assert missing_sasl_users(config("PLAINTEXT://127.0.0.1:9092"), NO_CREDENTIALS, DATA) is None
    assert missing_sasl_users(config("SASL_PLAINTEXT://127.0.0.1:9093", "OAUTHBEARER"), NO_CREDENTIALS, DATA) is None


def test_credentials_of_a_mechanism_not_enabled_do_not_count():
    why = missing_sasl_users(config("SASL_PLAINTEXT://127.0.0.1:9093", "SCRAM-SHA-512"), stored("SCRAM-SHA-256"), DATA)
    assert why is not None and "--mechanism SCRAM-SHA-512" in why


def test_plain_alone_needs_users_given_at_start():
    why = missing_sasl_users(config("PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093", "PLAIN"),
                             stored("SCRAM-SHA-256"), DATA)
    assert why is not None and "--sasl-users FILE" in why and "scram add" not in why


def test_ctl_cannot_reach_a_sasl_only_broker_without_a_user():
    """ctl connects over the inter-broker listener (the first): SASL, with no user to be."""
    why = missing_sasl_users(config("SASL_PLAINTEXT://127.0.0.1:9093"), NO_CREDENTIALS, DATA)
    assert why is not None and "first user (--sasl-users FILE, --inter-broker-user NAME)" in why
