"""Mutual challenge-response of the runtime control port: the run's token never travels.

Any local user can listen on a loopback port the switch does not hold (during a reboot, or
before the switch starts), so a client must not hand the token to whoever answers, nor
believe what it says. With a token, one connection carries, one JSON line each:

    client -> {"hello": Nc}                      Nc: 32 fresh random bytes (hex)
    server -> {"ok": true, "nonce": Ns, "proof": HMAC(token, SERVER || Nc || Ns)}
    client -> {"body": REQUEST_JSON, "mac": HMAC(token, REQUEST || Nc || Ns || body)}
    server -> {"body": REPLY_JSON, "mac": HMAC(token, REPLY || Nc || Ns || body)}

The client checks the proof before it sends anything else: a listener without the token
gets a hello of random bytes and nothing more. The server executes a request only if its MAC
binds it to this connection's two nonces, so bytes captured from one session and replayed on
another are refused (a new Ns each time). The labels (SERVER, REQUEST, REPLY) separate the
three uses of the key, so no message can be passed off as another. HMAC-SHA256; the key is
the token's text as the run's files hold it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from softswitch.errors import SoftSwitchError

NONCE_BYTES = 32
_DOMAIN = b"mrc-softswitch-control/1 "
SERVER = _DOMAIN + b"server-proof\0"
REQUEST = _DOMAIN + b"request\0"
REPLY = _DOMAIN + b"reply\0"


class AuthError(SoftSwitchError, ValueError):
    """A nonce, proof or MAC is malformed or does not match."""


def new_nonce() -> bytes:
    """A fresh challenge (from the OS's cryptographic source)."""
    return secrets.token_bytes(NONCE_BYTES)


def parse_nonce(text: object) -> bytes:
    """A nonce from its hex form, refused unless exactly NONCE_BYTES long."""
    if not isinstance(text, str) or len(text) != 2 * NONCE_BYTES:
        raise AuthError(f"a nonce must be {2 * NONCE_BYTES} hex digits")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise AuthError("a nonce must be hex digits") from None


def tag(token: str, label: bytes, client_nonce: bytes, server_nonce: bytes,
        body: bytes = b"") -> str:
    """HMAC-SHA256(token, label || Nc || Ns || body), hex. Both nonces have a fixed length,
    so the concatenation cannot be read two ways."""
    if len(client_nonce) != NONCE_BYTES or len(server_nonce) != NONCE_BYTES:
        raise AuthError("nonces must be NONCE_BYTES long")
    return hmac.new(token.encode(), label + client_nonce + server_nonce + body,
                    hashlib.sha256).hexdigest()


def check(token: str, label: bytes, client_nonce: bytes, server_nonce: bytes, body: bytes,
          claimed: object) -> None:
    """Raise AuthError unless `claimed` is the tag of this message (constant-time compare)."""
    if not isinstance(claimed, str) or not hmac.compare_digest(
            claimed.encode(), tag(token, label, client_nonce, server_nonce, body).encode()):
        raise AuthError("the tag does not match")
