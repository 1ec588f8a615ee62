"""Successive halving over slices (issue 28), on real Snakemake campaigns of tiny models.

One campaign is built per module: three learning rates x two seeds, three epochs of one slice
each, rungs at epochs 1 and 2, keep 0.34 (two of three points train on after rung 1, one of two
after rung 2); beside it, in the same repository copy, a grid campaign (no search) of the same
recipe and points, seed 42, trained straight through. Tests that change anything work on a copy.
The decisions are checked against a ranking recomputed here from the runs' metrics.jsonl, and
every tampering is held to the audit CLI, run as a user runs it.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_faults import KILLED, interrupted
from workflow_support import TINY, copy_repo, environment, killed_write, snakemake, write_campaign

from ebd2n.campaign.rung_decision import decide, promoted_count
from ebd2n.campaign.search import Bracket, point_id
from ebd2n.layout import named_campaign

LRS = [0.001, 0.004, 0.016]
SEEDS = [42, 43]
KEEP = 0.34
RUNGS = [1, 2]
RAW = json.loads(json.dumps(TINY)) | {"seeds": SEEDS, "search": {"method": "successive-halving", "keep": KEEP}}
RAW["overrides"] = RAW["overrides"] | {
    "training.max_tokens": 12288,
    "training.epoch_tokens": 4096,
}  # 3 epochs x 4 steps
RAW["grid"] = RAW["grid"] | {"learning_rates": {"synchronous": LRS}}
GRID = json.loads(json.dumps(RAW)) | {"campaign": "grid", "seeds": [42]}
GRID.pop("search")
CAMPAIGN = "config/campaigns/tiny.yaml"
"""The campaign file test_faults.interrupted runs (its command line is this one's)."""
PATHS = named_campaign("tiny")
BRACKET = "synchronous"
HALVING_CHECK = "successive-halving decisions recomputed from the runs' subset losses"
CONSOLE: list[str] = []
"""The console of the halving campaign's first run (the module's fixture)."""


def run_id(lr: float, seed: int) -> str:
    return f"synchronous-lr{lr!r}-beta20.99-seed{seed}"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository copy holding the finished halving campaign and the grid campaign."""
    repo = copy_repo(tmp_path_factory.mktemp("search"))
    CONSOLE.append(snakemake(repo, "--configfile", write_campaign(repo, RAW)).stderr)
    snakemake(repo, "--configfile", write_campaign(repo, GRID, "grid.yaml"))
    return repo


@pytest.fixture
def repo(campaign: Path, tmp_path: Path) -> Path:
    """A private copy of the finished campaigns (times and Snakemake's records kept)."""
    return Path(shutil.copytree(campaign, tmp_path / "repo", symlinks=True))


def decision_files(repo: Path, epoch: int) -> list[Path]:
    return sorted((repo / PATHS.search / BRACKET).glob(f"rung-{epoch}-*.json"))


def the_decision(repo: Path, epoch: int) -> Path:
    (path,) = decision_files(repo, epoch)
    return path


def subset_loss(repo: Path, run: str, epoch: int) -> float:
    """The val_loss of the type=epoch record at `epoch`, read straight from the run's metrics.jsonl."""
    records = [json.loads(line) for line in (repo / PATHS.run(run).metrics).read_text().splitlines()]
    (loss,) = [r["val_loss"] for r in records if r["type"] == "epoch" and r["epoch"] == epoch]
    return loss


def expected_search(repo: Path) -> tuple[dict[int, list[float]], dict[float, int | None]]:
    """The halving recomputed from the runs: each rung's points best first (mean subset loss over
    the seeds; ties lower learning rate), the best ceil(keep x n) kept; and each point's fate."""
    candidates, ranked, fate = list(LRS), {}, {}
    for epoch in RUNGS:
        means = {
            lr: sum(subset_loss(repo, run_id(lr, seed), epoch) for seed in SEEDS) / len(SEEDS) for lr in candidates
        }
        ranked[epoch] = sorted(candidates, key=lambda lr: (means[lr], lr))
        kept = ranked[epoch][: math.ceil(KEEP * len(candidates))]
        fate |= {lr: epoch for lr in candidates if lr not in kept}
        candidates = kept
    return ranked, fate | {lr: None for lr in candidates}


def audit(repo: Path, campaign: str = "tiny") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", f"results/{campaign}"],
        cwd=repo,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def hashes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def model_state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True, map_location="cpu")["engine"]["model"]


# --- the decision itself ----------------------------------------------------------------------------


def test_decide_ranks_by_mean_loss_ties_lower_lr_then_lower_beta2() -> None:
    """Hand-made losses, three points of equal mean: the lower learning rate first, then the lower
    beta2; ceil(0.34 x 3) = 2 train on."""
    points = ((0.002, 0.99), (0.001, 0.999), (0.001, 0.99))
    bracket = Bracket(None, "synchronous", points, (1, 2))
    losses = {run.id: loss for run, loss in zip(bracket.runs(), [4.0, 5.0, 4.5, 4.5, 5.5, 3.5], strict=True)}
    decision = decide(bracket, 1, list(points), 0.34, losses, {})
    assert [entry["point"] for entry in decision["ranking"]] == [
        point_id(0.001, 0.99),
        point_id(0.001, 0.999),
        point_id(0.002, 0.99),
    ]
    assert [entry["mean_loss"] for entry in decision["ranking"]] == [4.5, 4.5, 4.5]
    assert decision["promoted"] == decision["continuing"] == [point_id(0.001, 0.99), point_id(0.001, 0.999)]
    assert (decision["candidates"], decision["carried"], decision["earlier"]) == (3, [], [])


def test_decide_ranks_a_point_without_a_finite_loss_for_every_seed_last() -> None:
    points = ((0.001, 0.99), (0.002, 0.99), (0.004, 0.99))
    bracket = Bracket(None, "synchronous", points, (1, 2))
    losses = dict(zip([run.id for run in bracket.runs()], [3.0, math.nan, 9.0, 9.0, 1.0, 1.0], strict=True))
    losses.pop(bracket.runs()[-1].id)  # a seed of the best point has no loss
    decision = decide(bracket, 1, list(points), 0.5, losses, {})
    assert [(entry["lr"], entry["mean_loss"]) for entry in decision["ranking"]] == [
        (0.002, 9.0),
        (0.001, None),
        (0.004, None),
    ]
    assert decision["promoted"] == [point_id(0.002, 0.99), point_id(0.001, 0.99)]


def test_decide_keeps_ceil_of_the_share_and_carries_earlier_promotions() -> None:
    """0.1 x 30 keeps 3 (not 4 from a float just above 3); a point an earlier decision of the rung
    promoted stays on as carried, behind the promoted ones in ranking order."""
    points = tuple((0.001 * (i + 1), 0.99) for i in range(30))
    bracket = Bracket(None, "synchronous", points, (42,))
    losses = {run.id: float(30 - i) for i, run in enumerate(bracket.runs())}  # the largest lr is best
    decision = decide(bracket, 2, list(points), 0.1, losses, {"rung-2-0123456789abcdef.json": [point_id(*points[0])]})
    assert promoted_count(0.1, 30) == 3
    assert decision["promoted"] == [point_id(*p) for p in points[:-4:-1]]
    assert (decision["carried"], decision["earlier"]) == ([point_id(*points[0])], ["rung-2-0123456789abcdef.json"])
    assert decision["continuing"] == [*decision["promoted"], point_id(*points[0])]


# --- the campaign ------------------------------------------------------------------------------------


def test_decisions_equal_the_ranking_recomputed_from_the_runs(campaign: Path) -> None:
    ranked, fate = expected_search(campaign)
    assert (campaign / PATHS.audit_passed).is_file()
    for epoch in RUNGS:
        decision = json.loads(the_decision(campaign, epoch).read_text())
        kept = ranked[epoch][: math.ceil(KEEP * len(ranked[epoch]))]
        assert [entry["lr"] for entry in decision["ranking"]] == ranked[epoch]
        assert decision["promoted"] == decision["continuing"] == [point_id(lr, 0.99) for lr in kept]
        assert {run: loss for entry in decision["ranking"] for run, loss in entry["losses"].items()} == {
            run_id(lr, seed): subset_loss(campaign, run_id(lr, seed), epoch) for lr in ranked[epoch] for seed in SEEDS
        }
    assert sorted(fate.values(), key=str) == [1, 2, None]
    for lr, stop in fate.items():
        for seed in SEEDS:
            files = PATHS.run(run_id(lr, seed))
            assert (campaign / files.final).is_file() == (stop is None)
            if stop is not None:  # kept where it would continue from, and nothing past it
                assert sorted(p.name for p in (campaign / files.directory / "checkpoints").iterdir()) == [
                    f"epoch-{stop}.pt"
                ]
                assert sorted(p.name for p in (campaign / files.directory / "slices").iterdir()) == [
                    f"epoch-{e}.json" for e in range(1, stop + 1)
                ]
    record = json.loads((campaign / PATHS.campaign_json).read_text())["search"]
    assert (record["runs_stopped"], record["runs_training_to_the_end"]) == (4, 2)


def test_the_console_names_the_points_each_rung_decision_stopped(campaign: Path) -> None:
    """Each decide_rung line ends with how many points go on and which the decision stopped."""
    decisions = sorted((campaign / PATHS.directory / "search" / BRACKET).glob("rung-*.json"))
    wanted = []
    for path in decisions:
        decision = json.loads(path.read_text())
        ranked = [entry["point"] for entry in decision["ranking"]]
        stopped = [point for point in ranked if point not in decision["continuing"]]
        going = f"{len(ranked) - len(stopped)} of {len(ranked)} points train on"
        wanted.append(
            f"bracket {BRACKET} epoch {decision['epoch']} digest {decision['digest']}: {going}; "
            f"stopped by the rung decision: {', '.join(stopped)}"
        )
    console = CONSOLE[0]
    lines = [line for line in console.splitlines() if "decide_rung tiny" in line]
    assert len(decisions) == len(RUNGS) == len(lines)
    assert [sum(f"decide_rung tiny {where}" in line for line in lines) for where in wanted] == [1] * len(wanted), lines


def test_audit_cli_passes_the_campaign(repo: Path) -> None:
    result = audit(repo)
    assert result.returncode == 0, result.stdout + result.stderr


def test_workflow_refuses_to_train_a_stopped_run_past_its_rung(repo: Path) -> None:
    """Asked for directly, a stopped run's final.pt is refused, naming the rung it stopped at."""
    _ranked, fate = expected_search(repo)
    stopped = run_id(next(lr for lr, stop in fate.items() if stop == 1), 42)
    before = hashes(repo / PATHS.runs)
    result = snakemake(repo, str(PATHS.run(stopped).final), "--configfile", CAMPAIGN, check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{stopped}: stopped at rung 1 of bracket synchronous" in output, output
    assert hashes(repo / PATHS.runs) == before


@pytest.mark.slow  # a campaign of its own, from the start
def test_kill_during_a_rung_decision_and_the_same_command_again_decide_the_same(campaign: Path, tmp_path: Path) -> None:
    """SIGKILL of the controller and its jobs once rung 1's decision is written (before Snakemake
    knows it is done); the same command again finishes with the unkilled campaign's decisions."""
    repo = copy_repo(tmp_path)
    write_campaign(repo, RAW)
    killed = interrupted(repo, f"after:*/search/{BRACKET}/rung-1-*.json")
    assert killed.returncode == KILLED, killed.stdout + killed.stderr
    assert [p.name for p in decision_files(repo, 1)] == [p.name for p in decision_files(campaign, 1)]
    assert decision_files(repo, 2) == []
    snakemake(repo, "--configfile", CAMPAIGN)
    assert hashes(repo / PATHS.search) == hashes(campaign / PATHS.search)
    assert (repo / PATHS.audit_passed).is_file()
    assert audit(repo).returncode == 0


def test_extension_promotes_stopped_runs_and_continues_them_bitwise(repo: Path) -> None:
    """keep 0.34 -> 0.67: rung 1 is decided again under a new name (the old decision stays), the
    runs it stopped resume from checkpoints/epoch-1.pt and end bitwise as the same runs trained
    straight through (the grid campaign); the runs that had finished are left as they were."""
    _ranked, fate = expected_search(repo)
    finished = [run_id(lr, seed) for lr, stop in fate.items() if stop is None for seed in SEEDS]
    before = {run: hashes(repo / PATHS.run(run).directory) for run in finished}
    old = {epoch: the_decision(repo, epoch) for epoch in RUNGS}
    old_bytes = {epoch: path.read_bytes() for epoch, path in old.items()}
    raw = json.loads(json.dumps(RAW))
    raw["search"]["keep"] = 0.67
    snakemake(repo, "--configfile", write_campaign(repo, raw))

    for epoch in RUNGS:
        (new,) = [path for path in decision_files(repo, epoch) if path != old[epoch]]
        assert old[epoch].read_bytes() == old_bytes[epoch]
        decision = json.loads(new.read_text())
        assert (decision["continuing"], decision["earlier"]) == (
            [entry["point"] for entry in decision["ranking"]],
            [old[epoch].name],
        )
    for lr, stop in fate.items():
        if stop is None:
            continue
        for seed in SEEDS:
            log = (repo / PATHS.run(run_id(lr, seed)).directory / "train.log").read_text()
            assert f"slice: resume from checkpoints/epoch-{stop}.pt at epoch {stop}" in log
            assert log.count("slice: start") == 1  # no fresh start
        run = run_id(lr, 42)
        ours, straight = (
            model_state(repo / PATHS.run(run).final),
            model_state(repo / named_campaign("grid").run(run).final),
        )
        assert ours.keys() == straight.keys()
        assert all(torch.equal(ours[name], straight[name]) for name in ours), run
    assert {run: hashes(repo / PATHS.run(run).directory) for run in finished} == before
    assert (repo / PATHS.audit_passed).is_file()
    assert audit(repo).returncode == 0


def test_stopped_runs_files_are_protected_by_the_ledger_and_retrained_ones_named(repo: Path) -> None:
    """A stopped run's files are in the audit ledger like a finished run's: its directory deleted is
    named by the audit; the workflow then trains it to its rung again, which the audit notes."""
    _ranked, fate = expected_search(repo)
    stopped = run_id(next(lr for lr, stop in fate.items() if stop == 1), 42)
    ledger = json.loads((repo / PATHS.ledger).read_text())
    protected = sorted(name for name in ledger["artifacts"] if name.startswith(f"runs/{stopped}/"))
    assert (ledger["stopped"][stopped], f"runs/{stopped}/checkpoints/epoch-1.pt" in protected) == (1, True)
    shutil.rmtree(repo / PATHS.run(stopped).directory)
    deleted = audit(repo)
    named = (
        "ebd2n audit: audited artifacts unchanged since the last audit (ledger): {}: disappeared since the last audit"
    )
    assert all(named.format(name) in deleted.stderr for name in protected), deleted.stderr
    snakemake(repo, "--configfile", CAMPAIGN)  # its full audit notes what it found trained again
    record = json.loads((repo / PATHS.audit).read_text())
    notes = [note for check in record["checks"] if check["name"].endswith("(ledger)") for note in check["notes"]]
    noted = any(note.startswith(f"{stopped}: trained again since the last audit") for note in notes)
    assert (record["passed"], noted, audit(repo).returncode) == (True, True, 0), notes


def test_extension_with_a_new_point_then_a_smaller_keep_throws_no_training_away(repo: Path) -> None:
    """A learning rate added: only its runs train (to rung 1, and on if promoted); rung 1 is decided
    again over four points, carrying what the first decision promoted. keep then lowered: the rungs
    are decided again, nothing trains, no run that trained on is called stopped, the audit passes."""
    _ranked, fate = expected_search(repo)
    finished = [run_id(lr, seed) for lr, stop in fate.items() if stop is None for seed in SEEDS]
    before = {run: hashes(repo / PATHS.run(run).directory) for run in finished}
    first = json.loads(the_decision(repo, 1).read_text())
    raw = json.loads(json.dumps(RAW))
    raw["grid"]["learning_rates"]["synchronous"] = [*LRS, 0.002]
    snakemake(repo, "--configfile", write_campaign(repo, raw))
    (again,) = [path for path in decision_files(repo, 1) if path.name != f"rung-1-{first['digest']}.json"]
    decision = json.loads(again.read_text())
    assert decision["candidates"] == 4 and decision["earlier"] == [f"rung-1-{first['digest']}.json"]
    assert set(first["continuing"]) <= set(decision["continuing"])
    assert set(decision["carried"]) == set(first["continuing"]) - set(decision["promoted"])
    assert {run: hashes(repo / PATHS.run(run).directory) for run in finished} == before
    assert all((repo / PATHS.run(run_id(0.002, seed)).directory / "slices/epoch-1.json").is_file() for seed in SEEDS)
    assert audit(repo).returncode == 0, audit(repo).stdout

    finals = sorted(p.relative_to(repo).as_posix() for p in (repo / PATHS.runs).glob("*/final.pt"))
    raw["search"]["keep"] = 0.2
    result = snakemake(repo, "--configfile", write_campaign(repo, raw))
    assert "train_slice" not in result.stdout + result.stderr and "validate_run" not in result.stdout + result.stderr
    assert sorted(p.relative_to(repo).as_posix() for p in (repo / PATHS.runs).glob("*/final.pt")) == finals
    checked = audit(repo)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_each_bracket_asks_for_its_own_rung_decision_at_once(tmp_path: Path) -> None:
    """Two modes, two brackets: the plan asks for both first decisions from the start, so neither
    bracket's rung waits for the other's runs."""
    repo = copy_repo(tmp_path)
    raw = json.loads(json.dumps(RAW))
    raw["grid"] |= {"modes": ["synchronous", "packed-2"], "learning_rates": {"synchronous": LRS, "packed-2": LRS}}
    result = snakemake(repo, "-n", "--configfile", write_campaign(repo, raw))
    assert "successive halving: 2 rung decisions would run" in result.stdout + result.stderr
    assert not (repo / "results").exists()  # a dry run writes nothing


def test_grid_campaign_plans_trains_and_audits_as_before(campaign: Path) -> None:
    """No search key in the frozen spec or campaign.json, no search/ folder, and the audit's checks
    are the halving campaign's but the halving check."""
    grid = named_campaign("grid")
    assert (campaign / grid.audit_passed).is_file()
    assert all("search" not in json.loads(path.read_text()) for path in (campaign / grid.frozen_spec).glob("*.json"))
    assert "search" not in json.loads((campaign / grid.campaign_json).read_text())
    assert not (campaign / grid.search).exists()
    names = {
        name: [check["name"] for check in json.loads((campaign / c.audit).read_text())["checks"]]
        for name, c in (("grid", grid), ("tiny", PATHS))
    }
    assert set(names["grid"]) == set(names["tiny"]) - {HALVING_CHECK}
    assert HALVING_CHECK in names["tiny"]


# --- tampering: each fails the audit, naming the rung and the run ------------------------------------


def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text())
    edit(value)
    path.write_text(json.dumps(value, indent=1) + "\n")


def _edit_metrics(path: Path, epoch: int, loss: float) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        if record["type"] == "epoch" and record["epoch"] == epoch:
            record["val_loss"] = loss
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def tamper_metrics(repo: Path, stopped: str, winner: str) -> list[str]:
    _edit_metrics(repo / PATHS.run(stopped).metrics, 1, 1.0)
    return ["rung 1", stopped, "1.0"]


def tamper_decision_loss(repo: Path, stopped: str, winner: str) -> list[str]:
    def edit(decision):
        (entry,) = [e for e in decision["ranking"] if stopped in e["losses"]]
        entry["losses"][stopped] = 1.0

    _edit_json(the_decision(repo, 1), edit)
    return ["rung 1", stopped, "recorded with loss 1.0"]


def tamper_promoted_loser(repo: Path, stopped: str, winner: str) -> list[str]:
    """The rung-1 loser promoted in place of the second best."""
    loser = stopped.removeprefix("synchronous-").rsplit("-seed", 1)[0]

    def edit(decision):
        decision["promoted"][-1] = decision["continuing"][-1] = loser

    _edit_json(the_decision(repo, 1), edit)
    return ["rung 1: promoted [", loser]


def tamper_trained_on(repo: Path, stopped: str, winner: str) -> list[str]:
    """The stopped run trained one slice more by hand, with the campaign's frozen trainer."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ebd2n",
            "train",
            "--config",
            str(PATHS.run(stopped).recipe),
            "--until-epoch",
            "2",
            "--quiet",
        ],
        cwd=repo,
        env=environment() | {"PYTHONPATH": str(repo / PATHS.frozen_src)},
        check=True,
        capture_output=True,
        timeout=300,
    )
    return [f"{stopped}: stopped at rung 1, but it trained on"]


def tamper_slice_record_copied(repo: Path, stopped: str, winner: str) -> list[str]:
    run = repo / PATHS.run(stopped).directory
    shutil.copy2(repo / PATHS.run(winner).slice_record(2), run / "slices" / "epoch-2.json")
    return [f"{stopped}: stopped at rung 1, but it trained on: slices/epoch-2.json"]


def tamper_decision_deleted(repo: Path, stopped: str, winner: str) -> list[str]:
    path = the_decision(repo, 2)
    path.unlink()
    return [f"bracket synchronous rung 2: no decision (search/synchronous/{path.name})"]


TAMPERING = [
    tamper_metrics,
    tamper_decision_loss,
    tamper_promoted_loser,
    tamper_trained_on,
    tamper_slice_record_copied,
    tamper_decision_deleted,
]


@pytest.mark.parametrize("tamper", TAMPERING, ids=lambda f: f.__name__.removeprefix("tamper_"))
def test_tampering_fails_the_audit_naming_the_rung_and_the_run(repo: Path, tamper) -> None:
    _ranked, fate = expected_search(repo)
    stopped = run_id(next(lr for lr, stop in fate.items() if stop == 1), 42)
    winner = run_id(next(lr for lr, stop in fate.items() if stop is None), 42)
    named = tamper(repo, stopped, winner)
    result = audit(repo)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    halving = [line for line in output.splitlines() if line.startswith(f"ebd2n audit: {HALVING_CHECK}:")]
    assert any(all(text in line for text in named) for line in halving), output


def test_a_killed_decide_jobs_temporary_is_cleaned_and_a_corrupt_decision_named_in_one_line(repo: Path) -> None:
    """What a decide job killed mid-write leaves (its temporary beside the decisions) is removed by
    the audit, which still passes; a decision whose points are not names is one violation naming
    the file, not a traceback."""
    decision = the_decision(repo, 1)
    leftover = killed_write(decision, b"{")
    passed = audit(repo)
    assert passed.returncode == 0 and not leftover.exists(), passed.stdout + passed.stderr

    content = json.loads(decision.read_text())
    decision.write_text(json.dumps(content | {"continuing": [["not", "a", "point"]]}))
    failed = audit(repo)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 1 and "Traceback" not in output, output
    assert any(
        line.startswith(f"ebd2n audit: {HALVING_CHECK}:")
        and f"{decision.name}: " in line
        and "not a rung decision" in line
        for line in output.splitlines()
    ), output
