"""Sign a passing audit: the campaign's statement (ebd2n.signing), with the cache manifest the audit verified."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ebd2n.campaign.results import read_results
from ebd2n.signing.statement import sign_campaign


def sign_audit(campaign_dir: Path, key: Ed25519PrivateKey, record: dict) -> Path:
    """Write the campaign's next signed statement of the full audit `record` (which passed)."""
    return sign_campaign(campaign_dir, key, record, read_results(campaign_dir).manifest_path)
