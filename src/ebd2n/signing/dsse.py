"""DSSE envelopes (https://github.com/secure-systems-lab/dsse, protocol v1) signed with Ed25519.

What is signed is PAE(payloadType, payload), the spec's pre-authentication encoding
`"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body` (LEN: the byte length in ASCII decimal), so a
payload can never be read as another type. The signing itself is `cryptography`'s Ed25519.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ebd2n.signing.keys import key_id

IN_TOTO = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign_envelope(payload: bytes, private: Ed25519PrivateKey, payload_type: str = IN_TOTO) -> dict[str, Any]:
    """An envelope holding `payload` and one signature by `private`."""
    signature = private.sign(pae(payload_type, payload))
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key_id(private.public_key()), "sig": base64.b64encode(signature).decode("ascii")}],
    }


def open_envelope(envelope: Any, public: Ed25519PublicKey, payload_type: str = IN_TOTO) -> bytes:
    """The payload, once a signature of the envelope verifies with `public`; ValueError saying why not."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("signatures"), list):
        raise ValueError("not a DSSE envelope")
    if envelope.get("payloadType") != payload_type:
        raise ValueError(f"payload type {envelope.get('payloadType')!r}, not {payload_type}")
    try:
        payload = base64.b64decode(envelope.get("payload", ""), validate=True)
        signatures = [
            base64.b64decode(s.get("sig", ""), validate=True) for s in envelope["signatures"] if isinstance(s, dict)
        ]
    except (binascii.Error, TypeError, AttributeError):
        raise ValueError("payload or signature is not base64") from None
    message = pae(payload_type, payload)
    for signature in signatures:
        try:
            public.verify(signature, message)
            return payload
        except InvalidSignature:
            continue
    ids = ", ".join(str(s.get("keyid"))[:16] for s in envelope["signatures"] if isinstance(s, dict)) or "none"
    raise ValueError(
        f"no signature by key id {key_id(public)[:16]}… verifies "
        f"(signed by key id {ids}…; altered, or signed with another key)"
    )
