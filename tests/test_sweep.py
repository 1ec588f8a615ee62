"""Extending a campaign past its edge winners, and a sweep that brackets itself.

The end-to-end test trains the tiny campaign of the workflow tests (demo recipe, 64 steps of
1,024 tokens, one seed, CPU). Its final loss against LR is convex in ln(LR) around 0.004
(measured: 5.12 nats at 0.001, 4.66 at 0.002, 4.18 at 0.004, 4.73 at 0.008, 4.75 at 0.016), so a
grid of 0.001 and 0.002 lies wholly below the optimum and one extension (0.004, 0.008) brackets it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from campaign_tree import RunSpec, synthetic_loss, write_campaign
from workflow_support import TINY, copy_repo, environment
from workflow_support import write_campaign as write_campaign_file

from ebd2n.campaign.extend import extend_campaign
from ebd2n.campaign.locate import find_campaign_file
from ebd2n.cli import main
from ebd2n.errors import UserError

BELOW = [0.00025, 0.0005, 0.001]  # synthetic_loss puts the synchronous optimum at 0.002
CAMPAIGN_TEXT = """# a campaign below its optimum
campaign: edgy
recipe: demo   # the tiny demo recipe
grid:
  modes: [synchronous]
  learning_rates:
    synchronous:
      - 0.00025
      - 0.0005
      - 0.001
  beta2: [0.99]   # one beta2
seeds: [1, 2]
epochs_per_slice: 1
"""


@pytest.fixture
def edgy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A finished campaign whose winner is its largest LR, and its file under config/campaigns/."""
    runs = [
        RunSpec("synchronous", lr, 0.99, seed, synthetic_loss("synchronous", lr, 0.99, seed))
        for lr in BELOW
        for seed in (1, 2)
    ]
    write_campaign(tmp_path, "edgy", runs)
    (tmp_path / "config/campaigns").mkdir(parents=True)
    (tmp_path / "config/campaigns/edgy.yaml").write_text(CAMPAIGN_TEXT)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_extend_adds_the_next_lrs_on_the_grids_step_and_keeps_the_rest(edgy: Path) -> None:
    extend_campaign(Path("results/edgy"))
    result = (edgy / "config/campaigns/edgy.yaml").read_text()
    expected = CAMPAIGN_TEXT.replace(
        ":\n      - 0.00025\n      - 0.0005\n      - 0.001", ": [0.00025, 0.0005, 0.001, 0.002, 0.004]"
    )
    assert result == expected


def test_extend_rewrites_a_list_indented_like_its_key(edgy: Path) -> None:
    path = edgy / "config/campaigns/edgy.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(CAMPAIGN_TEXT), sort_keys=False))  # "- 0.00025" under "synchronous:"
    extend_campaign(Path("results/edgy"))
    result = yaml.safe_load(path.read_text())["grid"]["learning_rates"]["synchronous"]
    assert result == [0.00025, 0.0005, 0.001, 0.002, 0.004]


def test_extend_keeps_the_previous_revision_and_records_why(edgy: Path) -> None:
    extend_campaign(Path("results/edgy"))
    history = json.loads((edgy / "results/edgy/extensions/history.json").read_text())
    result = ((edgy / "results/edgy/extensions/revision-0.yaml").read_text(), history[0]["added"], history[0]["why"])
    expected = (
        CAMPAIGN_TEXT,
        {"synchronous": [0.002, 0.004]},
        {
            "synchronous": "winner LR 0.001 (beta2 0.99) is the upper edge of the tested LRs; "
            "continued the grid's step there"
        },
    )
    assert result == expected


def test_extend_twice_before_running_adds_nothing(edgy: Path) -> None:
    extend_campaign(Path("results/edgy"))
    result = extend_campaign(Path("results/edgy"))
    assert result is None


def test_extend_cli_prints_the_diff(edgy: Path, capsys: pytest.CaptureFixture) -> None:
    status = main(["extend", "results/edgy"])
    lines = capsys.readouterr().out.splitlines()
    result = (
        status,
        "+    synchronous: [0.00025, 0.0005, 0.001, 0.002, 0.004]" in lines,
        lines[-1].startswith("extension 1: synchronous + 0.002, 0.004"),
    )
    assert result == (0, True, True)


def test_find_campaign_file_none_names_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="campaign ghost: 0 campaign files name it .* give the campaign file itself"):
        find_campaign_file("ghost", tmp_path)


def test_extend_cli_unknown_campaign_is_one_line_exit_2(edgy: Path, capsys: pytest.CaptureFixture) -> None:
    status = main(["extend", "results/ghost"])
    err = capsys.readouterr().err
    result = (status, err.count("\n"), "campaign ghost: 0 campaign files name it" in err)
    assert result == (2, 1, True)


def test_sweep_refuses_configfile_after_double_dash(edgy: Path, capsys: pytest.CaptureFixture) -> None:
    status = main(["sweep", "config/campaigns/edgy.yaml", "--", "--configfile", "other.yaml"])
    result = (status, capsys.readouterr().err.strip())
    assert result == (2, "ebd2n sweep: error: give the campaign file as CAMPAIGN_FILE, not as --configfile after --")


def _hashes(directory: Path) -> dict[str, str]:
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _ebd2n(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**environment(), "PYTHONPATH": str(repo / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "ebd2n", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=1200
    )
    if check and result.returncode:
        raise AssertionError(f"ebd2n {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@pytest.mark.slow
def test_sweep_until_bracketed_brackets_a_grid_below_its_optimum(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    raw = {
        **TINY,
        "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.001, 0.002]}, "beta2": [0.99]},
    }
    campaign = write_campaign_file(repo, raw)
    _ebd2n(repo, "sweep", campaign, "--", "--cores", "2")
    before = _hashes(repo / "results/tiny/runs")
    text = (repo / campaign).read_text()
    capped = _ebd2n(
        repo, "sweep", campaign, "--until-bracketed", "--max-extensions", "0", "--", "--cores", "2", check=False
    )
    assert (
        capped.returncode,
        "not bracketed after 0 extension(s)" in capped.stderr,
        (repo / campaign).read_text(),
    ) == (1, True, text)
    swept = _ebd2n(repo, "sweep", campaign, "--until-bracketed", "--max-extensions", "3", "--", "--cores", "2")
    _ebd2n(repo, "audit", "results/tiny")
    after = _hashes(repo / "results/tiny/runs")
    selection = json.loads((repo / "results/tiny/report/selection.json").read_text())["synchronous"]
    history = json.loads((repo / "results/tiny/extensions/history.json").read_text())
    result = {
        "earlier runs unchanged": {name: after.get(name) for name in before} == before,
        "extensions": [entry["added"] for entry in history],
        "grid": yaml.safe_load((repo / campaign).read_text())["grid"]["learning_rates"]["synchronous"],
        "winner": (selection["lr"], selection["edge"]),
        "optimum inside": 0.002 < selection["lr_optimum"]["estimate"] < 0.008,
        "said": "bracketed: no mode's winner lies at an edge of its LR range (1 extension(s))" in swept.stdout,
        "on the page": "Extension 1" in (repo / "results/tiny/report/index.html").read_text(),
    }
    expected = {
        "earlier runs unchanged": True,
        "extensions": [{"synchronous": [0.004, 0.008]}],
        "grid": [0.001, 0.002, 0.004, 0.008],
        "winner": (0.004, None),
        "optimum inside": True,
        "said": True,
        "on the page": True,
    }
    assert result == expected, swept.stdout[-3000:]


def test_sweep_passes_snakemake_arguments_as_typed(tmp_path: Path) -> None:
    """`--profile slurm -n` reaches Snakemake unchanged: the cluster profile plans the tiny campaign's jobs,
    nothing runs."""
    repo = copy_repo(tmp_path / "repo")
    campaign = write_campaign_file(repo, TINY)
    planned = _ebd2n(repo, "sweep", campaign, "--", "--profile", "slurm", "-n", "--quiet", "rules")
    result = ("train_final" in planned.stdout + planned.stderr, (repo / "results/tiny/runs").exists())
    assert result == (True, False)


@pytest.mark.slow
def test_sweep_until_bracketed_stops_at_an_extension_that_diverges(tmp_path: Path) -> None:
    """A grid a thousandfold apart whose winner is its largest LR: the one extension on the grid's step
    (4 and 4000) diverges, which bounds the optimum from above; the sweep stops there, bracketed."""
    repo = copy_repo(tmp_path / "repo")
    raw = {
        **TINY,
        "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [4e-06, 0.004]}, "beta2": [0.99]},
    }
    campaign = write_campaign_file(repo, raw)
    swept = _ebd2n(repo, "sweep", campaign, "--until-bracketed", "--max-extensions", "3", "--", "--cores", "2")
    _ebd2n(repo, "audit", "results/tiny")
    selection = json.loads((repo / "results/tiny/report/selection.json").read_text())["synchronous"]
    history = json.loads((repo / "results/tiny/extensions/history.json").read_text())
    runs = (repo / "results/tiny/runs.csv").read_text()
    result = {
        "extensions": [entry["added"] for entry in history],
        "winner": (selection["lr"], selection["edge"]),
        "diverged runs": runs.count(",diverged,"),
        "said": "bracketed: no mode's winner lies at an edge of its LR range (1 extension(s))" in swept.stdout,
    }
    expected = {
        "extensions": [{"synchronous": [4.0, 4000.0]}],
        "winner": (0.004, None),
        "diverged runs": 2,
        "said": True,
    }
    assert result == expected, swept.stdout[-3000:]
