"""SASL mechanisms, the connection's SASL state machine, listeners and TLS principals, in-process
(kshim/security/sasl.py, kshim/security/session.py, kshim/security/tls.py, kshim/security/config.py)."""
from __future__ import annotations

import base64
import json
import socket
import ssl
import struct
import threading

import pytest

from kshim.net.handlers import load_handlers, supported_versions
from kshim.net.protocol import ConnectionCore, ProtocolError
from kshim.security.config import Listener, SecurityConfig, SecurityConfigError, parse_listeners, parse_users
from kshim.security.sasl import AuthenticationFailed, OAuthBearerUnsecured, Plain, Scram, ScramCredential, scram_credential
from kshim.security.session import ConnectionSecurity, SaslState, StaticCredentials
from kshim.security.tls import certificate_principal, dev_files, issue_client_files, server_context
from wire.errors import ErrorCode

pytestmark = pytest.mark.unit

SASL = Listener("SASL_PLAINTEXT", "127.0.0.1", 9093)
USERS = {"alice": "alice-secret"}


_CREDS: list[StaticCredentials] = []


def creds() -> StaticCredentials:
    if not _CREDS:  # salting takes a while: once per module
        _CREDS.append(StaticCredentials(USERS))
    return _CREDS[0]


# ---------------------------------------------------------------- mechanisms
def test_plain_accepts_the_right_password_only():
    assert Plain(creds()).step(b"\0alice\0alice-secret") == b""
    ok = Plain(creds())
    ok.step(b"alice\0alice\0alice-secret")
    assert ok.complete and ok.user == "alice"
    for token in (b"\0alice\0wrong", b"\0mallory\0alice-secret", b"bob\0alice\0alice-secret", b"\0alice",
                  b"\0\0x", b"\0alice\0"):
        with pytest.raises(AuthenticationFailed) as e:
            Plain(creds()).step(token)
        assert "alice-secret" not in str(e.value) and "wrong" not in str(e.value)


def test_scram_sha_256_matches_rfc_7677():
    # RFC 7677's example exchange: user "user", password "pencil"
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram_credential("SCRAM-SHA-256", "pencil", 4096, salt)

    class One:
        def password(self, user: str) -> None:
            return None

        def scram(self, mech: str, user: str) -> ScramCredential | None:
            return cred if (mech, user) == ("SCRAM-SHA-256", "user") else None

    server = Scram("SCRAM-SHA-256", One(), nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.user == "user"


def scram_client_final(mech: str, password: str, client_first_bare: str, server_first: bytes) -> bytes:
    import hashlib
    import hmac
    algo = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mech]
    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(algo, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.new(algo, client_key).digest(), auth, algo).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_fails_on_a_wrong_password_or_unknown_user(mech):
    server = Scram(mech, creds())
    first = server.step(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed):
        server.step(scram_client_final(mech, "wrong", "n=alice,r=abc", first))
    good = Scram(mech, creds())
    first = good.step(b"n,,n=alice,r=abc")
    assert good.step(scram_client_final(mech, "alice-secret", "n=alice,r=abc", first)).startswith(b"v=")
    with pytest.raises(AuthenticationFailed):
        Scram(mech, creds()).step(b"n,,n=mallory,r=abc")
    with pytest.raises(AuthenticationFailed):
        Scram(mech, creds()).step(b"p=tls-unique,,n=alice,r=abc")  # channel binding
    with pytest.raises(AuthenticationFailed):
        Scram(mech, creds()).step(b"garbage")


def jwt(claims: dict, alg: str = "none") -> str:
    def enc(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    return f"{enc({'alg': alg})}.{enc(claims)}."


def oauth_token(jws: str) -> bytes:
    return f"n,,\x01auth=Bearer {jws}\x01\x01".encode()


def test_oauthbearer_unsecured_tokens():
    now = 1_000_000.0
    ok = OAuthBearerUnsecured(now=lambda: now)
    assert ok.step(oauth_token(jwt({"sub": "alice", "exp": now + 60, "iat": now}))) == b""
    assert ok.complete and ok.user == "alice" and ok.lifetime_s == now + 60
    for claims, alg in (({"sub": "alice", "exp": now - 1}, "none"), ({"exp": now + 60}, "none"),
                        ({"sub": "alice"}, "none"), ({"sub": "alice", "exp": now + 60}, "HS256")):
        bad = OAuthBearerUnsecured(now=lambda: now)
        challenge = json.loads(bad.step(oauth_token(jwt(claims, alg))))
        assert challenge["status"] == "invalid_token" and not bad.complete
        with pytest.raises(AuthenticationFailed):
            bad.step(b"\x01")  # the client's answer to the error challenge
    with pytest.raises(AuthenticationFailed):
        OAuthBearerUnsecured().step(b"not a gs2 header")


# ---------------------------------------------------------------- the connection's state machine
def security(listener: Listener = SASL, **config) -> ConnectionSecurity:
    clock = [100.0]
    sec = ConnectionSecurity(listener, SecurityConfig(listeners=[listener], users=USERS, **config), creds(),
                             now=lambda: clock[0])
    sec.clock = clock  # type: ignore[attr-defined]
    return sec


def test_only_the_sasl_exchange_is_admitted_before_authentication():
    sec = security()
    assert sec.admit(18) is None and sec.admit(17) is None
    assert sec.admit(3) is not None and sec.admit(0) is not None
    assert sec.handshake("PLAIN", 1) == ErrorCode.NONE
    assert sec.admit(36) is None and sec.admit(18) is not None and sec.admit(3) is not None
    answer = sec.authenticate(b"\0alice\0alice-secret")
    assert answer.error == ErrorCode.NONE and answer.session_lifetime_ms == 0
    assert sec.principal == "User:alice" and sec.admit(3) is None


def test_failures_answer_kafkas_errors_and_close():
    sec = security()
    assert sec.authenticate(b"x").error == ErrorCode.ILLEGAL_SASL_STATE and sec.failed
    assert sec.admit(18) is not None
    sec = security()
    assert sec.handshake("GSSAPI", 1) == ErrorCode.UNSUPPORTED_SASL_MECHANISM and sec.failed
    sec = security(sasl_mechanisms=("SCRAM-SHA-512",))
    assert sec.handshake("PLAIN", 1) == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    sec = security()
    sec.handshake("PLAIN", 1)
    assert sec.authenticate(b"\0alice\0nope").error == ErrorCode.SASL_AUTHENTICATION_FAILED and sec.failed
    assert "nope" not in (sec.failure or "")
    sec = security()
    sec.handshake("PLAIN", 1)
    assert sec.handshake("PLAIN", 1) == ErrorCode.ILLEGAL_SASL_STATE and sec.failed


def test_listeners_without_sasl_answer_illegal_state_and_stay_open():
    sec = security(Listener("PLAINTEXT", "127.0.0.1", 9092))
    assert sec.authenticated and sec.admit(3) is None
    assert sec.handshake("PLAIN", 1) == ErrorCode.ILLEGAL_SASL_STATE and not sec.failed
    assert sec.authenticate(b"").error == ErrorCode.ILLEGAL_SASL_STATE and not sec.failed


def test_reauthentication_within_the_session_lifetime():
    sec = security(max_reauth_ms=10_000)
    sec.handshake("PLAIN", 1)
    assert sec.authenticate(b"\0alice\0alice-secret").session_lifetime_ms == 10_000
    sec.clock[0] += 11  # type: ignore[attr-defined]
    assert sec.admit(3) is not None  # expired: only a new handshake
    assert sec.admit(17) is None and sec.handshake("PLAIN", 1) == ErrorCode.NONE
    assert sec.authenticate(b"\0alice\0alice-secret").error == ErrorCode.NONE
    assert sec.admit(3) is None
    # another principal or mechanism on the same connection: refused
    sec.handshake("PLAIN", 1)
    sec._mechanism.credentials = StaticCredentials({"bob": "b"})  # type: ignore[union-attr]
    assert sec.authenticate(b"\0bob\0b").error == ErrorCode.SASL_AUTHENTICATION_FAILED and sec.failed
    other = security(max_reauth_ms=10_000)
    other.handshake("PLAIN", 1)
    other.authenticate(b"\0alice\0alice-secret")
    assert other.handshake("SCRAM-SHA-256", 1) == ErrorCode.ILLEGAL_SASL_STATE and other.failed


# ---------------------------------------------------------------- the connection core with SASL
SUPPORTED = supported_versions(load_handlers())


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request(api_key: int, version: int, body: bytes) -> bytes:
    return frame(struct.pack(">hhih", api_key, version, 7, 4) + b"test" + body)


def test_core_refuses_a_request_before_authentication():
    core = ConnectionCore(SUPPORTED, 1 << 20, security())
    core.receive_data(request(3, 1, struct.pack(">i", -1)))  # Metadata v1, all topics
    with pytest.raises(ProtocolError, match="before SASL authentication"):
        core.next_request()


def test_handshake_v0_takes_bare_tokens():
    sec = security()
    core = ConnectionCore(SUPPORTED, 1 << 20, sec)
    core.receive_data(request(17, 0, struct.pack(">h", 5) + b"PLAIN"))
    handshake = core.next_request()
    assert handshake is not None and handshake.header.api_key == 17
    assert sec.handshake(handshake.body.mechanism, 0) == ErrorCode.NONE and sec.raw_tokens
    core.receive_data(frame(b"\0alice\0alice-secret"))
    token = core.next_request()
    assert token is not None and token.raw and token.header.api_key == 36
    assert sec.authenticate(token.body.auth_bytes).error == ErrorCode.NONE and not sec.raw_tokens
    assert b"".join(core.response_bytes(token, {"auth_bytes": b"ok"})) == frame(b"ok")


# ---------------------------------------------------------------- listeners and settings
def test_listeners_parse_as_kafka_writes_them():
    ls = parse_listeners("PLAINTEXT://127.0.0.1:9092, SASL_SSL://localhost:9093")
    assert ls == [Listener("PLAINTEXT", "127.0.0.1", 9092), Listener("SASL_SSL", "localhost", 9093)]
    assert ls[1].tls and ls[1].sasl and not ls[0].tls
    for bad in ("FOO://127.0.0.1:1", "PLAINTEXT://127.0.0.1", "PLAINTEXT://h:1,PLAINTEXT://h:2",
                "PLAINTEXT://h:70000", ""):
        with pytest.raises(SecurityConfigError):
            parse_listeners(bad)


def test_settings_that_would_be_ignored_are_refused():
    with pytest.raises(SecurityConfigError):
        SecurityConfig(users=USERS).check()  # users without a SASL listener
    with pytest.raises(SecurityConfigError):
        SecurityConfig(tls_dev=True).check()  # TLS without a TLS listener
    with pytest.raises(SecurityConfigError):
        SecurityConfig(listeners=parse_listeners("SSL://127.0.0.1:0")).check()  # no certificate
    with pytest.raises(SecurityConfigError):
        SecurityConfig(listeners=[SASL], sasl_mechanisms=("GSSAPI",)).check()
    with pytest.raises(SecurityConfigError) as e:
        parse_users(["alice-secret-without-colon"], "users.txt")
    assert "alice-secret" not in str(e.value)
    assert "alice-secret" not in repr(SecurityConfig(users=USERS)) and "alice-secret" not in repr(creds())


def test_client_certificate_subject_is_the_principal(tmp_path):
    config = SecurityConfig(listeners=parse_listeners("SSL://127.0.0.1:0"), tls_dev=True, tls_client_auth="required")
    server_ctx, ca = server_context(config, tmp_path)
    assert ca == dev_files(tmp_path)[0]  # made once, then kept
    cert, key = issue_client_files(tmp_path, "alice", tmp_path / "client")
    client_ctx = ssl.create_default_context(cafile=str(ca))
    client_ctx.load_cert_chain(cert, key)
    a, b = socket.socketpair()
    with a, b:
        result: list = []

        def client() -> None:
            with client_ctx.wrap_socket(b, server_hostname="localhost") as tls:
                tls.recv(1)

        t = threading.Thread(target=client)
        t.start()
        with server_ctx.wrap_socket(a, server_side=True) as tls:
            result.append(certificate_principal(tls))
            tls.send(b"x")
        t.join(10)
    assert result == ["User:CN=alice,O=kshim dev"]


def test_frames_before_authentication_are_bounded_as_kafka_bounds_them():
    sec = security()
    core = ConnectionCore(SUPPORTED, 100 << 20, sec)
    core.receive_data(struct.pack(">i", 600 * 1024))  # a 600 KiB frame announced before authenticating
    with pytest.raises(ProtocolError, match="outside"):
        core.next_request()
    sec.handshake("PLAIN", 1)
    sec.authenticate(b"\0alice\0alice-secret")
    after = ConnectionCore(SUPPORTED, 100 << 20, sec)
    after.receive_data(struct.pack(">i", 600 * 1024) + b"\0" * 100)
    assert after.next_request() is None and after.frame_size == 600 * 1024  # now allowed, still arriving


def test_scram_credentials_are_stored_salted_and_survive_a_controller_restart(tmp_path):
    from kshim.cluster.image import ScramEntry
    from kshim.controller.controller import Controller, ControllerConfig
    from kshim.controller.messages import ScramDeletion
    from kshim.controller.store import MetadataStore

    entry = ScramEntry("carol", "SCRAM-SHA-512", "c2FsdA==", "c3RvcmVk", "c2VydmVy", 4096)
    controller = Controller(MetadataStore(tmp_path / "m.sqlite"), ControllerConfig(node_id=0))
    results = controller.alter_scram_credentials((ScramDeletion("nobody", "SCRAM-SHA-256"),), (entry,))
    assert [(r.user, r.error_code) for r in results] == [("nobody", ErrorCode.RESOURCE_NOT_FOUND), ("carol", 0)]
    twice = controller.alter_scram_credentials((ScramDeletion("carol", "SCRAM-SHA-512"),), (entry,))
    assert [(r.user, r.error_code) for r in twice] == [("carol", ErrorCode.DUPLICATE_RESOURCE)]
    assert controller.image.scram == (entry,)
    controller.close()
    again = Controller(MetadataStore(tmp_path / "m.sqlite"), ControllerConfig(node_id=0))
    assert again.image.scram == (entry,)
    again.alter_scram_credentials((ScramDeletion("carol", "SCRAM-SHA-512"),), ())
    assert again.image.scram == ()
    again.close()


# ---------------------------------------------------------------- fuzzing: nothing gets through unauthenticated
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.test_fuzz_connection_core import EXAMPLES, mutated  # noqa: E402

SASL_EXCHANGE = [request(17, 1, struct.pack(">h", 5) + b"PLAIN"), request(36, 0, struct.pack(">i", 3) + b"\0a\0"),
                 request(17, 0, struct.pack(">h", 13) + b"SCRAM-SHA-512")]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(mutated(), st.sampled_from(SASL_EXCHANGE)), min_size=1, max_size=6))
def test_no_request_passes_before_authentication(frames):
    """Whatever frames arrive (real SASL frames among mutated requests, answered as the handlers
    would), the core hands out only the SASL exchange and ApiVersions until authentication
    succeeds, or refuses the connection."""
    sec = security()
    core = ConnectionCore(SUPPORTED, 1 << 20, sec)
    try:
        for data in frames:
            core.receive_data(data)
            while (req := core.next_request()) is not None:
                assert not sec.authenticated  # the wrong password below never authenticates
                assert req.header.api_key in (17, 18, 36), req.header.api_key
                if req.header.api_key == 17:
                    sec.handshake(req.body.mechanism, req.header.api_version)
                elif req.header.api_key == 36:
                    sec.authenticate(bytes(req.body.auth_bytes))
                if sec.failed:
                    return  # the server answers this one and closes
    except ProtocolError:
        pass
