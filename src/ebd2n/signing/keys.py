"""Ed25519 signing keys (through `cryptography`): make a pair, read either half, name a key by id.

The private key is a PEM (PKCS #8) file of mode 0600 that lives outside `results/`: it must never
travel with a campaign, so neither `ebd2n key new` nor signing accepts one inside a results
directory. Its public half (PEM) is what a reader of a published campaign verifies with.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ebd2n.atomic import atomic_write_bytes, write_new_private
from ebd2n.errors import UserError
from ebd2n.layout import PRIVATE_KEY, PUBLIC_KEY, RESULTS

KEY_VARIABLE = "EBD2N_SIGNING_KEY"
"""Environment variable naming the signing key; it overrides a campaign file's `signing_key`."""


def key_id(public: Ed25519PublicKey) -> str:
    """Hex SHA-256 of the raw 32-byte public key: the same key has the same id on every machine."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def signing_record(named: str | None) -> dict[str, str] | None:
    """What campaign.json records of the key a campaign is signed with ($EBD2N_SIGNING_KEY, else the
    campaign file's `named`): its path, and its id, which the report shows. The key is read, so a bad
    one stops the workflow at collect, before anything is trained on the promise of a signature."""
    path = os.environ.get(KEY_VARIABLE) or named
    if path is None:
        return None
    return {"key": path, "key_id": key_id(load_private(Path(path).expanduser()).public_key())}


def new_key_pair(directory: Path) -> tuple[Path, Path]:
    """Write DIR/ebd2n-signing.key (0600) and DIR/ebd2n-signing.pub; refuse to replace either."""
    private_path, public_path = directory / PRIVATE_KEY, directory / PUBLIC_KEY
    _refuse_in_results(directory, "a signing key")
    for path in (private_path, public_path):
        if path.exists():
            raise UserError(f"{path}: already exists; a key is never overwritten (choose another directory)")
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{directory}: cannot write a key pair there ({error.strerror})") from None
    try:
        write_new_private(private_path, pem)
    except FileExistsError:
        raise UserError(f"{private_path}: already exists; a key is never overwritten") from None
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    atomic_write_bytes(public_path, public)
    return private_path, public_path


def load_private(path: Path) -> Ed25519PrivateKey:
    """A private key file, refused (UserError naming it) when inside results/, readable by others,
    or not an unencrypted Ed25519 PEM key."""
    _refuse_in_results(path, "the signing key")
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as error:
        raise UserError(
            f"{path}: cannot read the signing key ({error.strerror}); create one with `ebd2n key new DIR`"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UserError(
            f"{path}: the signing key is readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 {path}"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise UserError(f"{path}: not an unencrypted PEM private key (make one with `ebd2n key new DIR`)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UserError(f"{path}: not an Ed25519 key (make one with `ebd2n key new DIR`)")
    return key


def load_public(path: Path) -> Ed25519PublicKey:
    """A public key file (PEM), as `ebd2n key new` writes it."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"--key {path}: cannot read the public key ({error.strerror})") from None
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise UserError(
            f"--key {path}: not a PEM public key (pass the {PUBLIC_KEY} that `ebd2n key new` wrote)"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise UserError(f"--key {path}: not an Ed25519 public key")
    return key


def _refuse_in_results(path: Path, what: str) -> None:
    """A key inside any results/ directory (the one here, or a campaign's parent) would be published with it."""
    resolved = path.resolve()
    if RESULTS.name in resolved.parts or resolved.is_relative_to(RESULTS.resolve()):
        raise UserError(f"{path}: {what} must live outside {RESULTS}/ (it would travel with every copy of a campaign)")
