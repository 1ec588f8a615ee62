"""The subcommands that read and vouch for results: reports, dashboards, status, audit, signatures."""

from __future__ import annotations

import argparse
from pathlib import Path

from ebd2n import commands
from ebd2n.fileidentity import REHASH_AFTER_DAYS
from ebd2n.layout import (
    AUDIT_HASHES,
    AUDIT_JSON,
    AUDIT_RUNS,
    DASHBOARD,
    METRICS,
    PRIVATE_KEY,
    PUBLIC_KEY,
    RECIPE,
    RUN_RECORD,
    SIGNATURES,
    STATUS_PAGE,
    STATUS_PLAN,
)
from ebd2n.subcommands.parts import campaign_arg, command, days


def add_result_commands(subcommands: argparse._SubParsersAction) -> None:
    """report, export-tracker, dashboard, status, audit, verify and key."""
    p = command(
        subcommands,
        "report",
        commands.cmd_report,
        "regenerate a campaign's report from disk, without training",
        "Rebuild the campaign's report (tables, figures, selected recipes, one HTML page) from its files.",
        "ebd2n report results/demo",
    )
    campaign_arg(p)

    p = command(
        subcommands,
        "export-tracker",
        commands.cmd_export_tracker,
        "write a campaign's runs into a new MLflow file store (pip install ebd2n[track])",
        "Write one MLflow run per run of the campaign (its parameters, per-step and per-epoch metrics, final "
        "results, a link to its recipe) into a new local MLflow store, read by `mlflow ui` or MlflowClient.",
        "ebd2n export-tracker results/demo --out mlruns/demo",
    )
    campaign_arg(p)
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="the new store (must not exist): mlflow ui --backend-store-uri DIR",
    )

    p = command(
        subcommands,
        "dashboard",
        commands.cmd_dashboard,
        f"rewrite a finished run's {DASHBOARD}, or export it as one file; a campaign's live {STATUS_PAGE}",
        f"Rewrite a finished run's {DASHBOARD} from its records, or write it as a single self-contained page. "
        f"Given a campaign directory, write its {STATUS_PAGE} now: every run's state and the report's explorer "
        "over the curves of every run so far, reloading itself while the campaign trains.",
        "ebd2n dashboard runs/demo --self-contained demo.html",
        "ebd2n dashboard results/demo",
    )
    p.add_argument(
        "run_dir",
        type=Path,
        help=f"a finished run directory ({RUN_RECORD}, {RECIPE}, {METRICS}), or a campaign directory ({STATUS_PLAN})",
    )
    p.add_argument(
        "--self-contained",
        type=Path,
        metavar="OUT.html",
        help="write a single-file page (plotly.js inlined) to OUT.html, for sharing one run",
    )

    p = command(
        subcommands,
        "status",
        commands.cmd_status,
        "where a campaign stands: every run's state, loss, hours and an ETA",
        "Print every run's state, losses and hours, and an ETA, from the campaign's files alone; rewrite "
        "its status.html.",
        "ebd2n status results/demo",
    )
    campaign_arg(p)

    p = command(
        subcommands,
        "audit",
        commands.cmd_audit,
        f"check a campaign's completeness and integrity -> {AUDIT_JSON}",
        "Check that every run finished and every record agrees with the files it describes; exit 1 with "
        "one line per violation. A passing full audit can sign what it saw.",
        "ebd2n audit results/demo --stage runs",
    )
    campaign_arg(p)
    p.add_argument(
        "--stage",
        choices=["runs", "full"],
        default="full",
        help=f"runs: every check but the report's (before it is built; writes {AUDIT_RUNS}); "
        "full (default): all of them",
    )
    p.add_argument(
        "--accept",
        action="store_true",
        help="re-baseline the ledger on the current files (recorded in its history); "
        "only when every other check passes",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help=f"hash every file by content (by default a hash is reused while its file's identity is unchanged, "
        f"see {AUDIT_HASHES})",
    )
    p.add_argument(
        "--rehash-after",
        type=days,
        default=REHASH_AFTER_DAYS,
        metavar="DAYS",
        help="hash again a file whose hash was verified longer ago than this (default: %(default)s days)",
    )
    p.add_argument(
        "--sign",
        type=Path,
        metavar="KEY",
        help=f"once the audit passed, sign what it saw with this private key (default: $EBD2N_SIGNING_KEY, else the "
        f"campaign file's signing_key) -> {SIGNATURES}/<n>.dsse.json",
    )

    p = command(
        subcommands,
        "verify",
        commands.cmd_verify,
        "check a campaign, or a copy of one, against its signed statements (no torch needed)",
        "Check every file of a campaign, or of a copy of it, against its chain of signed statements.",
        f"ebd2n verify results/demo --key keys/{PUBLIC_KEY}",
    )
    campaign_arg(p)
    p.add_argument("--key", type=Path, required=True, help=f"the signer's public key ({PUBLIC_KEY})")

    p = command(
        subcommands,
        "key",
        commands.cmd_key,
        "make an Ed25519 key pair to sign audited campaigns with",
        f"Write a new Ed25519 key pair: {PRIVATE_KEY} (mode 600, keep it private) and {PUBLIC_KEY}.",
        "ebd2n key new ~/keys",
    )
    p.add_argument("action", choices=["new"])
    p.add_argument("directory", type=Path, help=f"where {PRIVATE_KEY} (mode 600) and {PUBLIC_KEY} go; outside results/")
