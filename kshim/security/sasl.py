"""Server side of the SASL mechanisms, with no I/O: client token in, server token out.

- PLAIN (RFC 4616): `authzid NUL user NUL password`; an authzid other than the user fails, as
  in Kafka.
- SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, 7677): two rounds; no channel binding (a `p=` flag
  fails). The broker keeps salted credentials (salt, StoredKey, ServerKey, iterations), never
  a password.
- OAUTHBEARER (RFC 7628) with unsecured JWTs, as Kafka's OAuthBearerUnsecuredValidatorCallbackHandler
  accepts them: header `alg` none, a `sub` (the principal) and an `exp` in the future, `iat` (if
  any) not after `exp`. A bad token gets the RFC's error challenge; the client's %x01 answer then
  fails the exchange.

A mechanism raises AuthenticationFailed with a message safe to send back: it never holds the
password or says whether the user exists.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from typing import Callable, Protocol

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # Kafka's ScramMechanism type bytes (Alter/DescribeUserScramCredentials)
SCRAM_NAMES = {code: name for name, code in SCRAM_TYPES.items()}
MIN_ITERATIONS = 4096  # Kafka's minimum for SCRAM credentials
MAX_ITERATIONS = 16384  # Kafka's maximum (AlterUserScramCredentials)


class AuthenticationFailed(Exception):
    """The exchange failed; the message goes to the client (SASL_AUTHENTICATION_FAILED)."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword, Hi(password, salt, i): what AlterUserScramCredentials carries."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def scram_credential(mechanism: str, password: str, iterations: int, salt: bytes | None = None) -> ScramCredential:
    """Salt and hash a password into what the broker keeps (RFC 5802's SaltedPassword and keys)."""
    salt = salt if salt is not None else os.urandom(32)
    return scram_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def scram_from_salted(mechanism: str, salted_password: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The stored form from a salted password (AlterUserScramCredentials sends this, not the password)."""
    algo = HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", algo).digest()
    server_key = hmac.new(salted_password, b"Server Key", algo).digest()
    return ScramCredential(salt, hashlib.new(algo, client_key).digest(), server_key, iterations)


class Credentials(Protocol):
    """Where mechanisms look users up."""

    def password(self, user: str) -> str | None: ...

    def scram(self, mechanism: str, user: str) -> ScramCredential | None: ...


class Mechanism(Protocol):
    complete: bool
    user: str  # the authenticated identity once complete
    lifetime_s: float | None  # the credential's own end (a token's exp), if it has one

    def step(self, token: bytes) -> bytes: ...


class Plain:
    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.complete = False
        self.user = ""
        self.lifetime_s: float | None = None

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id "
                                       "that is different from username")
        expected = self.credentials.password(user)
        # compared either way, so an unknown user takes as long as a wrong password
        matches = hmac.compare_digest((expected or "").encode(), password.encode())
        if expected is None or not matches:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.user, self.complete = user, True
        return b""


def _scram_name(text: str) -> str:
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("Invalid SCRAM username encoding")
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed(f"Invalid SCRAM message attribute {part[:16]!r}")
        out.setdefault(part[0], part[2:])
    return out


class Scram:
    def __init__(self, mechanism: str, credentials: Credentials, nonce: Callable[[], str] | None = None) -> None:
        self.mechanism = mechanism
        self.algo = HASHES[mechanism]
        self.credentials = credentials
        self._nonce = nonce or (lambda: base64.b64encode(os.urandom(24)).decode())
        self.complete = False
        self.user = ""
        self.lifetime_s: float | None = None
        self._round = 0
        self._cred: ScramCredential | None = None
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce_full = ""

    def step(self, token: bytes) -> bytes:
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        self._round += 1
        if self._round == 1:
            return self._first(message)
        if self._round == 2:
            return self._final(message)
        raise AuthenticationFailed("Unexpected SCRAM message after the exchange completed")

    def _first(self, message: str) -> bytes:
        head = message.split(",", 2)
        if len(head) != 3 or head[0] not in ("n", "y"):
            if head and head[0].startswith("p="):
                raise AuthenticationFailed("SCRAM channel binding is not supported")
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        authzid = head[1]
        if authzid and not authzid.startswith("a="):
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        self._gs2 = f"{head[0]},{authzid},"
        self._client_first_bare = head[2]
        attrs = _attributes(head[2])
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise AuthenticationFailed("Invalid SCRAM client-first message: no user or nonce")
        user = _scram_name(attrs["n"])
        if authzid and _scram_name(authzid[2:]) != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id "
                                       "that is different from username")
        if attrs.get("tokenauth") == "true":
            raise AuthenticationFailed("Delegation tokens are not supported")
        cred = self.credentials.scram(self.mechanism, user)
        if cred is None:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self.user, self._cred = user, cred
        self._nonce_full = attrs["r"] + self._nonce()
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._nonce_full},s={salt},i={cred.iterations}"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        assert self._cred is not None
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("Invalid SCRAM client-final message: no proof")
        attrs = _attributes(without_proof)
        if attrs.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise AuthenticationFailed("Invalid SCRAM client-final message: channel binding does not match")
        if attrs.get("r") != self._nonce_full:
            raise AuthenticationFailed("Invalid SCRAM client-final message: nonce does not match")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailed("Invalid SCRAM client-final message: bad proof") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(self._cred.stored_key, auth_message, self.algo).digest()
        if len(proof) != len(signature):
            raise AuthenticationFailed("Authentication failed: Invalid client final message")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.algo, client_key).digest(), self._cred.stored_key):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        server_signature = hmac.new(self._cred.server_key, auth_message, self.algo).digest()
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


def _b64url_json(part: str) -> dict:
    try:
        data = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError("not base64url JSON") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


class OAuthBearerUnsecured:
    def __init__(self, now: Callable[[], float] = time.time, allowed_skew_s: int = 0) -> None:
        self.now = now
        self.skew = allowed_skew_s
        self.complete = False
        self.user = ""
        self.lifetime_s: float | None = None
        self._errored = False

    def step(self, token: bytes) -> bytes:
        if self._errored:
            # the client acknowledged the error challenge (%x01): the exchange fails
            raise AuthenticationFailed("Authentication failed: invalid unsecured OAUTHBEARER token")
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid OAUTHBEARER initial client response") from None
        gs2, sep, rest = text.partition("\x01")
        head = gs2.split(",")
        if not sep or len(head) != 3 or head[0] != "n" or head[2] != "" or \
                (head[1] and not head[1].startswith("a=")) or not rest.endswith("\x01\x01"):
            raise AuthenticationFailed("Invalid OAUTHBEARER initial client response")
        pairs = {}
        for kv in rest[:-2].split("\x01"):
            key, eq, value = kv.partition("=")
            if not eq:
                raise AuthenticationFailed("Invalid OAUTHBEARER initial client response")
            pairs[key] = value
        auth = pairs.get("auth", "")
        if not auth.startswith("Bearer "):
            raise AuthenticationFailed("Invalid OAUTHBEARER initial client response: no bearer token")
        problem = self._validate(auth[len("Bearer "):].strip(), head[1][2:] if head[1] else "")
        if problem is not None:
            self._errored = True
            return json.dumps({"status": "invalid_token", "scope": "", "openid-configuration": ""}).encode()
        self.complete = True
        return b""

    def _validate(self, jws: str, authzid: str) -> str | None:
        parts = jws.split(".")
        if len(parts) != 3 or parts[2]:
            return "not an unsecured JWS (three parts, the last empty)"
        try:
            header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        except ValueError as e:
            return str(e)
        if header.get("alg") != "none":
            return "alg must be none"
        sub, exp, iat = claims.get("sub"), claims.get("exp"), claims.get("iat")
        if not isinstance(sub, str) or not sub.strip():
            return "no sub claim"
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            return "no exp claim"
        now = self.now()
        if exp + self.skew <= now:
            return "expired"
        if iat is not None and (not isinstance(iat, (int, float)) or iat > exp or iat > now + self.skew):
            return "bad iat claim"
        if authzid and authzid != sub:
            return "authorization id differs from sub"
        self.user, self.lifetime_s = sub, float(exp)
        return None


def mechanism(name: str, credentials: Credentials, allowed_skew_s: int = 0) -> Mechanism:
    if name == "PLAIN":
        return Plain(credentials)
    if name in HASHES:
        return Scram(name, credentials)
    if name == "OAUTHBEARER":
        return OAuthBearerUnsecured(allowed_skew_s=allowed_skew_s)
    raise KeyError(name)
