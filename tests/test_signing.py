"""Signed campaign records: keys, DSSE envelopes, and `ebd2n verify` on a real signed campaign.

One tiny two-run campaign is trained, audited and signed by Snakemake once per module (its campaign
file names the signing key); each test works on its own copy and damages one thing. Verification
runs where torch cannot be imported, as on a reader's machine.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from workflow_support import TINY, copy_repo, environment, snakemake, write_campaign

from ebd2n.atomic import sha256_file
from ebd2n.audit import audit_campaign, violations
from ebd2n.errors import UserError
from ebd2n.signing.dsse import open_envelope, pae, sign_envelope
from ebd2n.signing.keys import key_id, load_private, load_public, new_key_pair
from ebd2n.signing.statement import verify_campaign

CAMPAIGN = "results/tiny"
RUNS = ("synchronous-lr0.003-beta20.99-seed42", "synchronous-lr0.003-beta20.99-seed43")
FIRST = "signatures/1.dsse.json"
NO_TORCH = "import sys; sys.modules['torch'] = None; from ebd2n.cli import main; sys.exit(main(sys.argv[1:]))"
"""Runs the command line where `import torch` fails, as on a reader's machine without it."""


def ebd2n(*args: str | Path, cwd: Path | None = None, torch: bool = False) -> subprocess.CompletedProcess:
    """The command line in a fresh process, one that cannot import torch unless `torch` (the audit needs it)."""
    variables = {**environment(), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    command = ["-m", "ebd2n"] if torch else ["-c", NO_TORCH]
    return subprocess.run(
        [sys.executable, *command, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=variables
    )


def _resolved(directory: Path) -> str:
    """What `ebd2n verify` says on stderr once done: the campaign it resolved, and nothing else."""
    return f"ebd2n verify: campaign {directory.name}: {directory}\n"


# --- keys and envelopes ------------------------------------------------------------------------


def test_signing_pae_is_the_dsse_spec_encoding() -> None:
    result = pae("http://example.com/HelloWorld", b"hello world")
    expected = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"  # the DSSE protocol's example
    assert result == expected


def test_signing_envelope_opens_with_its_key_only(tmp_path: Path) -> None:
    ours, theirs = (load_private(new_key_pair(tmp_path / name)[0]) for name in ("ours", "theirs"))
    envelope = sign_envelope(b'{"a": 1}', ours)
    assert open_envelope(envelope, ours.public_key()) == b'{"a": 1}'
    with pytest.raises(ValueError, match="no signature by key id .* verifies"):
        open_envelope(envelope, theirs.public_key())


def test_signing_envelope_with_an_edited_payload_is_refused(tmp_path: Path) -> None:
    key = load_private(new_key_pair(tmp_path)[0])
    envelope = sign_envelope(b'{"winner": "lr0.003"}', key)
    envelope["payload"] = base64.b64encode(b'{"winner": "lr0.006"}').decode()
    with pytest.raises(ValueError, match="altered, or signed with another key"):
        open_envelope(envelope, key.public_key())


def test_signing_key_new_writes_a_private_key_of_mode_600(tmp_path: Path) -> None:
    result = ebd2n("key", "new", tmp_path / "keys")
    private, public = tmp_path / "keys" / "ebd2n-signing.key", tmp_path / "keys" / "ebd2n-signing.pub"
    found = (result.returncode, stat.S_IMODE(private.stat().st_mode), key_id(load_public(public)) in result.stdout)
    assert found == (0, 0o600, True)


def test_signing_key_new_refuses_to_overwrite(tmp_path: Path) -> None:
    new_key_pair(tmp_path)
    before = (tmp_path / "ebd2n-signing.key").read_bytes()
    result = ebd2n("key", "new", tmp_path)
    found = (result.returncode, len(result.stderr.splitlines()), "already exists" in result.stderr)
    assert (found, (tmp_path / "ebd2n-signing.key").read_bytes()) == ((2, 1, True), before)


def test_signing_key_new_refuses_a_results_directory(tmp_path: Path) -> None:
    result = ebd2n("key", "new", "results/keys", cwd=tmp_path)
    found = (result.returncode, "must live outside results/" in result.stderr, (tmp_path / "results").exists())
    assert found == (2, True, False)


def test_signing_key_new_in_place_of_a_file_exits_2(tmp_path: Path) -> None:
    (tmp_path / "keys").write_text("a file")
    result = ebd2n("key", "new", tmp_path / "keys")
    assert (result.returncode, len(result.stderr.splitlines()), "cannot write a key pair" in result.stderr) == (
        2,
        1,
        True,
    )


def test_signing_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    private, _ = new_key_pair(tmp_path)
    private.chmod(0o644)
    with pytest.raises(UserError, match="readable by others .*chmod 600"):
        load_private(private)


def test_signing_verify_of_no_campaign_exits_2(tmp_path: Path) -> None:
    _, public = new_key_pair(tmp_path / "keys")
    result = ebd2n("verify", tmp_path / "nothing", "--key", public)
    assert (result.returncode, len(result.stderr.splitlines()), "not a campaign directory" in result.stderr) == (
        2,
        1,
        True,
    )


def test_signing_verify_with_a_file_that_is_no_key_exits_2(tmp_path: Path) -> None:
    (tmp_path / "key.pub").write_text("not a key")
    result = ebd2n("verify", tmp_path, "--key", tmp_path / "key.pub")
    assert (result.returncode, len(result.stderr.splitlines()), "--key" in result.stderr) == (2, 1, True)


# --- a real signed campaign --------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The campaign owner's key pair (kept outside the repository and its results)."""
    return new_key_pair(tmp_path_factory.mktemp("owner-keys"))


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory, keys: tuple[Path, Path]) -> Path:
    """A repository copy holding a finished two-run campaign the workflow audited and signed."""
    repo = copy_repo(tmp_path_factory.mktemp("signing"))
    campaign = write_campaign(repo, {**TINY, "seeds": [42, 43], "signing_key": str(keys[0])})
    snakemake(repo, "--cores", "2", "--configfile", campaign)
    return repo


@pytest.fixture
def repo(signed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    destination = tmp_path / "repo"
    shutil.copytree(signed, destination, symlinks=True)
    monkeypatch.chdir(destination)
    return destination


@pytest.fixture
def campaign(repo: Path) -> Path:
    return repo / CAMPAIGN


@pytest.fixture
def public(keys: tuple[Path, Path]):
    return load_public(keys[1])


def problems(campaign: Path, public) -> list[str]:
    return verify_campaign(campaign, public).problems


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_signing_workflow_signed_the_campaign_and_it_verifies(campaign: Path, keys: tuple[Path, Path]) -> None:
    result = ebd2n("verify", campaign, "--key", keys[1])
    assert (result.returncode, result.stderr, "verified" in result.stdout) == (0, _resolved(campaign), True)


def test_signing_statement_names_the_selection_and_the_audit(campaign: Path, public) -> None:
    predicate = verify_campaign(campaign, public).predicate
    selection = json.loads((campaign / "report" / "selection.json").read_text())
    checks = [
        {k: c[k] for k in ("name", "status", "scope")}
        for c in json.loads((campaign / "audit.json").read_text())["checks"]
    ]
    found = (predicate["selection"], predicate["sequence"], predicate["previous"], predicate["audit"]["checks"])
    assert found == (selection, 1, None, checks)


def test_signing_report_page_names_the_key_id(campaign: Path, public) -> None:
    page = (campaign / "report" / "index.html").read_text()
    assert f"signed when audited, by key id <code>{key_id(public)}</code>" in page


@pytest.mark.parametrize(
    "name",
    [
        f"runs/{RUNS[0]}/final.pt",
        f"runs/{RUNS[1]}/metrics.jsonl",
        f"runs/{RUNS[0]}/results.json",
        "report/selected-synchronous.yaml",
        "report/heatmaps.png",
        "frozen/src/ebd2n/model/gpt.py",
        "signatures/cache-manifest.json",
    ],
)
def test_signing_verify_names_a_flipped_byte(campaign: Path, public, name: str) -> None:
    flip_byte(campaign / name)
    assert problems(campaign, public) == [f"{name}: changed since it was signed"]


def test_signing_verify_names_the_original_cache_manifest_edited_against_its_signed_copy(
    campaign: Path, public
) -> None:
    manifest = campaign.parent / "caches" / "tiny" / "manifest.json"
    before = sha256_file(campaign / "signatures" / "cache-manifest.json")
    flip_byte(manifest)
    result = (sha256_file(manifest) != before, problems(campaign, public), violations(audit_campaign(campaign)) != [])
    assert result == (True, [], True)  # the signed copy still verifies; the audit, where the cache is, refuses the edit


def test_signing_verify_names_missing_and_added_files(campaign: Path, public) -> None:
    (campaign / "runs" / RUNS[1] / "best.json").unlink()
    (campaign / "runs" / RUNS[0] / "checkpoints").mkdir()
    (campaign / "runs" / RUNS[0] / "checkpoints" / "epoch-1.pt").write_bytes(b"x")
    expected = [
        f"runs/{RUNS[1]}/best.json: missing",
        f"runs/{RUNS[0]}/checkpoints/epoch-1.pt: added since the campaign was signed",
    ]
    assert problems(campaign, public) == expected


def test_signing_verify_names_a_symbolic_link_in_place_of_a_file(campaign: Path, public) -> None:
    target = campaign / "runs" / RUNS[1] / "final.pt"
    target.unlink()
    target.symlink_to(campaign / "runs" / RUNS[0] / "final.pt")
    assert problems(campaign, public) == [f"runs/{RUNS[1]}/final.pt: a symbolic link, not the signed file"]


def test_signing_catches_a_consistent_rewrite_the_audit_cannot_see(campaign: Path, public) -> None:
    run = campaign / "runs" / RUNS[0]
    # train.log, not metrics.jsonl: the report's Parquet metrics store copies metrics.jsonl, so the
    # audit's rebuild of the report catches a rewritten metrics.jsonl by itself
    log = (run / "train.log").read_text()
    (run / "train.log").write_text(log.replace("loss", "LOSS", 1) if "loss" in log else log + "rewritten\n")
    results = json.loads((run / "results.json").read_text())
    results["artifacts"]["train.log"] = sha256_file(run / "train.log")
    (run / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    ledger = json.loads((campaign / "audit-ledger.json").read_text())
    for name in ("train.log", "results.json"):
        ledger["artifacts"][f"runs/{RUNS[0]}/{name}"] = sha256_file(run / name)
    (campaign / "audit-ledger.json").write_text(json.dumps(ledger))
    audit = json.loads((campaign / "audit.json").read_text())
    (campaign / "audit.json").write_text(
        json.dumps({**audit, "ledger_sha256": sha256_file(campaign / "audit-ledger.json")})
    )
    audit_passes = violations(audit_campaign(campaign)) == []
    found = problems(campaign, public)
    named = [
        f"runs/{RUNS[0]}/train.log: changed since it was signed",
        f"runs/{RUNS[0]}/results.json: changed since it was signed",
    ]
    assert (audit_passes, all(line in found for line in named)) == (True, True)


def resign(campaign: Path, sequence: int, private) -> None:
    """Sign statement `sequence`'s very payload again with `private`."""
    path = campaign / f"signatures/{sequence}.dsse.json"
    payload = base64.b64decode(json.loads(path.read_text())["payload"])
    path.write_text(json.dumps(sign_envelope(payload, private)))


def test_signing_statement_resigned_with_another_key_is_refused(campaign: Path, public, tmp_path: Path) -> None:
    resign(campaign, 1, load_private(new_key_pair(tmp_path / "forger")[0]))
    found = problems(campaign, public)
    assert (len(found), found[0].startswith(f"{FIRST}: no signature by key id {key_id(public)[:16]}")) == (1, True)


def test_signing_verify_with_another_public_key_fails(campaign: Path, tmp_path: Path) -> None:
    _, other = new_key_pair(tmp_path / "other")
    result = ebd2n("verify", campaign, "--key", other)
    assert (result.returncode, f"ebd2n verify: {FIRST}: no signature by key id" in result.stderr) == (1, True)


@pytest.fixture
def chained(campaign: Path) -> Path:
    """The campaign re-baselined twice more (`ebd2n audit --accept`: its ledger gains a history
    entry, so what is signed changed) and signed each time: a chain of three statements."""
    for _ in range(2):
        result = ebd2n(
            "audit", campaign, "--accept", torch=True
        )  # the key: campaign.json's, from the campaign file's signing_key
        assert result.returncode == 0, result.stderr
    return campaign


def test_signing_audit_of_an_unchanged_campaign_adds_no_statement(campaign: Path) -> None:
    """The workflow audits at every invocation: a statement is added only when a signed file
    changed. The first audit after the workflow's compares with it (and is signed: it says so); the
    one after that finds the same and changes nothing."""
    ebd2n("audit", campaign, torch=True)
    before = sorted(p.name for p in (campaign / "signatures").iterdir())
    result = ebd2n("audit", campaign, torch=True)
    assert (result.returncode, sorted(p.name for p in (campaign / "signatures").iterdir())) == (0, before), (
        result.stderr
    )


def test_signing_chain_of_three_verifies_and_links_each_statement(chained: Path, public) -> None:
    result = verify_campaign(chained, public)
    link = {"name": "signatures/2.dsse.json", "sha256": sha256_file(chained / "signatures" / "2.dsse.json")}
    assert (result.problems, result.statements, result.predicate["previous"]) == ([], 3, link)


def test_signing_dropped_chain_link_is_caught(chained: Path, public) -> None:
    (chained / "signatures" / "2.dsse.json").unlink()
    assert problems(chained, public) == [
        "signatures/2.dsse.json: missing (a dropped link of the chain of 3 statements)"
    ]


def test_signing_dropped_link_closed_by_renaming_is_caught(chained: Path, public) -> None:
    signatures = chained / "signatures"
    (signatures / "3.dsse.json").replace(signatures / "2.dsse.json")
    found = problems(chained, public)
    assert found == [
        "signatures/3.dsse.json: missing (deleted: signatures/latest.json names signatures/3.dsse.json the "
        "latest statement)",
        "signatures/2.dsse.json: is statement 3 of its chain, renamed (a link was dropped or reordered)",
    ]


def test_signing_replaced_earlier_link_is_caught(chained: Path, public, keys: tuple[Path, Path]) -> None:
    signatures = chained / "signatures"
    path = signatures / "2.dsse.json"
    body = json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))
    body["predicate"]["signed"] = (
        "2000-01-01T00:00:00+0000"  # a statement the owner's key signed, but not the one linked
    )
    path.write_text(json.dumps(sign_envelope(json.dumps(body).encode(), load_private(keys[0]))))
    assert problems(chained, public) == [
        "signatures/3.dsse.json: names another previous statement than signatures/2.dsse.json (replaced)"
    ]


def test_signing_cp_r_copy_verifies_without_torch(campaign: Path, keys: tuple[Path, Path], tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "tiny"
    copy.parent.mkdir()
    subprocess.run(["cp", "-r", str(campaign), str(copy)], check=True)
    result = ebd2n("verify", copy, "--key", keys[1], cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, _resolved(copy))


def test_signing_tarball_round_trip_verifies_without_torch(
    campaign: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    archive = tmp_path / "tiny.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(campaign, arcname="tiny")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    result = ebd2n("verify", tmp_path / "unpacked" / "tiny", "--key", keys[1], cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, _resolved(tmp_path / "unpacked" / "tiny"))


def test_signing_unsigned_campaign_is_reported_unsigned_never_verified(campaign: Path, keys: tuple[Path, Path]) -> None:
    for path in (campaign / "signatures").glob("*.dsse.json"):
        path.unlink()
    result = ebd2n("verify", campaign, "--key", keys[1])
    found = (result.returncode, "unsigned: no statement in signatures/" in result.stderr, "verified" in result.stdout)
    assert found == (1, True, False)


def test_signing_audit_with_a_key_other_than_the_named_one_is_refused_and_writes_nothing(
    campaign: Path, tmp_path: Path
) -> None:
    other, _ = new_key_pair(tmp_path / "other")
    before = {p.name: p.read_bytes() for p in campaign.iterdir() if p.is_file()}
    result = ebd2n("audit", campaign, "--sign", other, torch=True)
    after = {p.name: p.read_bytes() for p in campaign.iterdir() if p.is_file()}
    found = (result.returncode, len(result.stderr.splitlines()), "names key id" in result.stderr, after == before)
    signatures = sorted(p.name for p in (campaign / "signatures").iterdir())
    assert (found, signatures) == ((2, 1, True, True), ["1.dsse.json", "cache-manifest.json", "latest.json"])


def key_material(private: Path) -> list[bytes]:
    """Every form the private key could leak in: its PEM body lines, its raw seed and that seed's encodings."""
    pem = private.read_bytes()
    raw = load_private(private).private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    body = [line for line in pem.splitlines() if line and not line.startswith(b"-----")]
    return [*body, raw, raw.hex().encode(), base64.b64encode(raw)]


def test_signing_private_key_is_in_no_result_and_no_log(signed: Path, keys: tuple[Path, Path]) -> None:
    secrets = key_material(keys[0])
    places = [*(signed / "results").rglob("*"), *(signed / ".snakemake").rglob("*")]
    leaked = [
        str(p) for p in places if p.is_file() and not p.is_symlink() and any(s in p.read_bytes() for s in secrets)
    ]
    logs = [p for p in places if p.is_file() and p.suffix == ".log"]
    assert (leaked, bool(logs)) == ([], True)


def test_signing_campaign_file_naming_a_missing_key_stops_collect_and_writes_nothing(
    repo: Path, campaign: Path
) -> None:
    path = repo / "config" / "campaigns" / "tiny.yaml"
    path.write_text(path.read_text().replace("signing_key: ", "signing_key: /nonexistent"))
    before = (campaign / "campaign.json").read_bytes()
    result = ebd2n("collect", "config/campaigns/tiny.yaml", cwd=repo, torch=True)
    found = (result.returncode, len(result.stderr.splitlines()), "/nonexistent" in result.stderr)
    assert (found, (campaign / "campaign.json").read_bytes()) == ((2, 1, True), before)


def test_signing_audit_runs_stage_refuses_sign(campaign: Path, keys: tuple[Path, Path]) -> None:
    result = ebd2n("audit", campaign, "--stage", "runs", "--sign", keys[0], torch=True)
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "ebd2n audit: error: --sign: only the full audit signs (drop --stage runs)",
    )


def test_signing_deleted_latest_statement_is_named(chained: Path, public) -> None:
    (chained / "signatures" / "3.dsse.json").unlink()
    found = problems(chained, public)
    assert found[0] == (
        "signatures/3.dsse.json: missing (deleted: signatures/latest.json names signatures/3.dsse.json "
        "the latest statement)"
    )


def _signed_snapshot(campaign: Path) -> dict[str, bytes]:
    """Every file a statement covers, or could (the statements aside), by content."""
    return {
        p.relative_to(campaign).as_posix(): p.read_bytes()
        for p in sorted(campaign.rglob("*"))
        if p.is_file()
        and p.relative_to(campaign).parts[0]
        not in ("logs", "benchmarks", "status", "status.html", "audit-hashes.jsonl")
    }


def _rerun_records(repo: Path, tmp_path: Path) -> Path:
    """Snakemake's records of the campaign lost and its inputs touched: collect_runs and audit_runs run again."""
    shutil.rmtree(repo / ".snakemake")
    for path in (repo / CAMPAIGN / "runs").glob("*/results.json"):
        os.utime(path)
    return repo


def _touch_everything(repo: Path, tmp_path: Path) -> Path:
    for path in sorted((repo / "results").rglob("*")):
        os.utime(path, follow_symlinks=False)
    return repo


def _cp_a(repo: Path, tmp_path: Path) -> Path:
    subprocess.run(["cp", "-a", str(repo), str(tmp_path / "copy")], check=True)
    return tmp_path / "copy"


def _tar_round_trip(repo: Path, tmp_path: Path) -> Path:
    archive = tmp_path / "repo.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(repo, arcname="repo")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    return tmp_path / "unpacked" / "repo"


@pytest.mark.parametrize(
    "change", [_rerun_records, _touch_everything, _cp_a, _tar_round_trip], ids=lambda f: f.__name__.strip("_")
)
def test_signing_campaign_verifies_after_a_green_rerun(
    repo: Path, tmp_path: Path, keys: tuple[Path, Path], change
) -> None:
    """What a benign rerun rewrites is byte for byte what was signed (no fresh time stamps, no
    first-audit summary in the report), so the campaign verifies after any invocation that ends
    green. Only the audit's own record may change (and is signed again): it has compared with the
    workflow's first audit now."""
    before = _signed_snapshot(repo / CAMPAIGN)
    where = change(repo, tmp_path)
    snakemake(where, "--cores", "2", "--configfile", "config/campaigns/tiny.yaml")
    result = ebd2n("verify", where / CAMPAIGN, "--key", keys[1])
    after = _signed_snapshot(where / CAMPAIGN)
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    others = [
        name for name in changed if not name.startswith("signatures/") and name not in ("audit.json", "audit.passed")
    ]
    assert (result.returncode, result.stderr, others) == (0, _resolved(where / CAMPAIGN), [])


def test_signing_audit_of_a_copy_without_its_cache_names_it_and_writes_nothing(
    campaign: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "elsewhere" / "tiny"
    copy.parent.mkdir()
    subprocess.run(["cp", "-a", str(campaign), str(copy)], check=True)  # its relative cache path now leads nowhere
    before = _signed_snapshot(copy)
    result = ebd2n("audit", copy, torch=True, cwd=tmp_path)
    expected = (
        f"ebd2n audit: error: data cache results/caches/tiny (the runs' data.cache_dir): not found at "
        f"{tmp_path}/results/caches/tiny, relative to the campaign's repository {tmp_path}; "
        "audit the campaign where its cache is reached (a copy: beside its repository's results/), "
        "nothing was written"
    )
    assert (result.returncode, result.stderr.splitlines(), _signed_snapshot(copy) == before) == (2, [expected], True)
    assert ebd2n("verify", copy, "--key", keys[1]).returncode == 0
