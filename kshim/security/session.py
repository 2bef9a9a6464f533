"""A connection's security state, with no I/O: its listener, its principal and the SASL exchange.

On a SASL listener a connection starts unauthenticated and may only send ApiVersions and
SaslHandshake; after the handshake only SaslAuthenticate, until the mechanism completes; then
anything. What Kafka answers out of order (SaslServerAuthenticator):
- any other request before authentication closes the connection (`admit` says why);
- SaslAuthenticate before SaslHandshake, or a second SaslHandshake mid-exchange: ILLEGAL_SASL_STATE,
  then the connection closes;
- a mechanism not enabled on this listener (listener.name.<l>.sasl.enabled.mechanisms, else the
  broker's sasl.enabled.mechanisms): UNSUPPORTED_SASL_MECHANISM with the enabled ones, then close;
- bad credentials: SASL_AUTHENTICATION_FAILED with a message, then close.
The server delays those last answers by connection.failed.authentication.delay.ms (`failed`), so
a password guesser gets one try per delay per connection.

SaslHandshake v0 means the tokens follow as bare size-prefixed frames, not SaslAuthenticate
requests (`raw_tokens`); v1 wraps them in SaslAuthenticate.

Re-authentication (KIP-368): with connections.max.reauth.ms set, a successful SaslAuthenticate v1+
answers the session's lifetime (bounded by an OAUTHBEARER token's exp). The client authenticates
again on the same connection (SaslHandshake v1+, same mechanism, same principal) before it ends;
a request other than SaslHandshake after the end closes the connection.

On PLAINTEXT and SSL listeners SaslHandshake and SaslAuthenticate get ILLEGAL_SASL_STATE, as
Kafka's KafkaApis answers them, and the connection stays open.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from kshim.security.config import ANONYMOUS, Listener, SecurityConfig
from kshim.security.sasl import AuthenticationFailed, Credentials, Mechanism, ScramCredential, mechanism, scram_credential
from wire.errors import ErrorCode
from wire.headers import API_VERSIONS_KEY

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


class SaslState(Enum):
    HANDSHAKE = "waiting for SaslHandshake"
    AUTHENTICATE = "waiting for SaslAuthenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"  # the failure answer goes out, then the connection closes


class StaticCredentials:
    """The users given on the command line or in a file; SCRAM credentials derived once at start
    (salted, the way AlterUserScramCredentials would store them), so the password is only used by
    PLAIN. `extra_scram` looks up credentials stored by the controller."""

    def __init__(self, users: dict[str, str], iterations: int = 4096,
                 extra_scram: Callable[[str, str], ScramCredential | None] | None = None) -> None:
        self._users = dict(users)
        self._scram = {(mech, user): scram_credential(mech, password, iterations)
                       for user, password in users.items() for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
        self.extra_scram = extra_scram

    def password(self, user: str) -> str | None:
        return self._users.get(user)

    def scram(self, mech: str, user: str) -> ScramCredential | None:
        found = self.extra_scram(mech, user) if self.extra_scram is not None else None
        return found or self._scram.get((mech, user))

    def __repr__(self) -> str:  # never the passwords
        return f"StaticCredentials({len(self._users)} users)"


@dataclass(slots=True)
class Answer:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    token: bytes = b""
    session_lifetime_ms: int = 0


class ConnectionSecurity:
    def __init__(self, listener: Listener, config: SecurityConfig, credentials: Credentials,
                 principal: str = ANONYMOUS, now: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.listener = listener
        self.config = config
        self.credentials = credentials
        self.principal = principal  # from the TLS client certificate until SASL says otherwise
        self.now, self.wall = now, wall
        self.state = SaslState.HANDSHAKE if listener.sasl else SaslState.AUTHENTICATED
        self.raw_tokens = False
        self.mechanism_name: str | None = None
        self._mechanism: Mechanism | None = None
        self._reauthenticating = False
        self.session_end: float | None = None  # monotonic; None: no end
        self.failure: str | None = None  # why the exchange failed, for the one log line

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    @property
    def failed(self) -> bool:
        return self.state is SaslState.FAILED

    def admit(self, api_key: int) -> str | None:
        """None if a request of this api may be handled now, else why the connection must close."""
        state = self.state
        if state is SaslState.AUTHENTICATED:
            if self.session_end is not None and self.now() >= self.session_end and api_key != SASL_HANDSHAKE_KEY:
                return "its SASL session expired (connections.max.reauth.ms) without re-authentication"
            return None
        if state is SaslState.HANDSHAKE and api_key in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            return None
        if state is SaslState.AUTHENTICATE and api_key == SASL_AUTHENTICATE_KEY:
            return None
        if state is SaslState.FAILED:
            return "a request after a failed authentication"
        return f"api key {api_key} while {state.value}: a request before SASL authentication"

    def _fail(self, why: str) -> None:
        self.state, self.failure, self.raw_tokens = SaslState.FAILED, why, False

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The SASL mechanisms this connection's listener offers (its own sasl.enabled.mechanisms)."""
        return self.config.mechanisms(self.listener)

    def handshake(self, mech: str, version: int) -> ErrorCode:
        enabled = self.mechanisms
        if not self.listener.sasl:
            return ErrorCode.ILLEGAL_SASL_STATE
        if self.state is SaslState.AUTHENTICATED:  # re-authentication (KIP-368)
            if version < 1 or mech != self.mechanism_name:
                self._fail(f"re-authentication with {mech} after {self.mechanism_name} (v{version})")
                return ErrorCode.ILLEGAL_SASL_STATE
            self._reauthenticating = True
        elif self.state is not SaslState.HANDSHAKE:
            self._fail(f"SaslHandshake while {self.state.value}")
            return ErrorCode.ILLEGAL_SASL_STATE
        if mech not in enabled:
            self._fail(f"unsupported SASL mechanism {mech[:64]!r}")
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism_name = mech
        self._mechanism = mechanism(mech, self.credentials, self.config.oauth_allowed_skew_s)
        self.state = SaslState.AUTHENTICATE
        self.raw_tokens = version == 0
        return ErrorCode.NONE

    def authenticate(self, token: bytes) -> Answer:
        if not self.listener.sasl:
            return Answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate on a listener without SASL")
        if self.state is not SaslState.AUTHENTICATE or self._mechanism is None:
            self._fail(f"SaslAuthenticate while {self.state.value}")
            return Answer(ErrorCode.ILLEGAL_SASL_STATE,
                          f"Unexpected SaslAuthenticate request while {self.state.value}")
        mech = self._mechanism
        try:
            out = mech.step(token)
        except AuthenticationFailed as e:
            self._fail(f"{self.mechanism_name}: {e}")
            return Answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e))
        if not mech.complete:
            return Answer(token=out)
        principal = f"User:{mech.user}"
        if self._reauthenticating and principal != self.principal:
            self._fail(f"re-authentication as {principal} on a connection of {self.principal}")
            return Answer(ErrorCode.SASL_AUTHENTICATION_FAILED,
                          "Cannot change principals during re-authentication")
        self.principal = principal
        self.state, self.raw_tokens, self._reauthenticating = SaslState.AUTHENTICATED, False, False
        self._mechanism = None
        lifetime_ms = 0
        if self.config.max_reauth_ms > 0:
            lifetime_ms = self.config.max_reauth_ms
            if mech.lifetime_s is not None:
                lifetime_ms = max(0, min(lifetime_ms, int((mech.lifetime_s - self.wall()) * 1000)))
            self.session_end = self.now() + lifetime_ms / 1000
        else:
            self.session_end = None
        return Answer(token=out, session_lifetime_ms=lifetime_ms)
