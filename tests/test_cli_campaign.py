"""A campaign is named one way everywhere: every command that takes one accepts its directory
(results/<name>) or its campaign file, resolves both to the same campaign, and says on stderr which
(one line, once the command is done; a refusal's one line names the file instead).

The campaign is a successive-halving grid written by the report tests' campaign writer (no training),
with its file under config/campaigns/, its status plan and its frozen slice plan, so that every
command runs for real: the commands that act on the file's settings find it by the campaign's name
when given the directory; those that read only the directory use the file's `campaign:` key.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from campaign_tree import grid_runs, write_campaign
from conftest import TINY_DATA, TINY_VOCAB

from ebd2n.campaign.check import load_campaign
from ebd2n.campaign.locate import locate_campaign
from ebd2n.campaign.plans import campaign_plans
from ebd2n.campaign.status_plan import write_plan
from ebd2n.cli import main
from ebd2n.errors import UserError
from ebd2n.signing.keys import new_key_pair
from ebd2n.train.plan import plan_slices, write_slice_plan

FILE = "config/campaigns/edgy.yaml"
DIRECTORY = "results/edgy"
TEXT = """campaign: edgy
recipe: demo
grid:
  modes: [synchronous]
  learning_rates:
    synchronous: [0.00025, 0.0005, 0.001]
  beta2: [0.99]
seeds: [1, 2]
epochs_per_slice: 1
search: {method: successive-halving, keep: 0.5}
"""
COMMANDS = {
    # command line with CAMPAIGN in its place: whether the command needs the campaign file
    "campaign check CAMPAIGN": True,
    "campaign prepare CAMPAIGN": True,
    "freeze CAMPAIGN --base base": True,
    "collect CAMPAIGN": True,
    "decide CAMPAIGN --bracket synchronous --epoch 1": True,
    "extend CAMPAIGN": True,
    "sweep CAMPAIGN -- --version": True,
    "report CAMPAIGN": False,
    "status CAMPAIGN": False,
    "audit CAMPAIGN --stage runs": False,
    "verify CAMPAIGN --key keys/ebd2n-signing.pub": False,
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, tiny_cache) -> Path:
    """A checkout's working directory holding the campaign's file and its results/edgy."""
    root = tmp_path_factory.mktemp("located")
    write_campaign(root, "edgy", grid_runs(["synchronous"], [0.00025, 0.0005, 0.001], [0.99], [1, 2]), audit=True)
    (root / "config/campaigns").mkdir(parents=True)
    cache = shutil.copytree(tiny_cache.directory, root / "cache")  # `campaign prepare` finds it built
    settings = {"source": "synthetic", "cache_dir": cache, **TINY_DATA}
    data = ", ".join(f"{key}: {value}" for key, value in settings.items())
    (root / FILE).write_text(TEXT + f"data: {{{data}}}\noverrides: {{model.vocab_size: {TINY_VOCAB}}}\n")
    new_key_pair(root / "keys")
    return root


@pytest.fixture
def here(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory at the repository, the campaign file as first written (`extend` rewrites it)."""
    monkeypatch.chdir(repo)
    revision = repo / DIRECTORY / "extensions" / "revision-0.yaml"
    if revision.is_file():
        (repo / FILE).write_text(revision.read_text())
    campaign = load_campaign(FILE)
    write_plan(campaign, campaign_plans(campaign))
    write_slice_plan(plan_slices(2, 1), campaign.paths.slice_plan("base"))
    return repo


def _run(line: str, campaign: str, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """`ebd2n LINE` with CAMPAIGN replaced: its exit status and the last line on stderr."""
    capsys.readouterr()
    try:
        status = main(line.replace("CAMPAIGN", campaign).split())
    except SystemExit as exit:
        status = exit.code
    return status, capsys.readouterr().err.splitlines()[-1]


SLOW = ("sweep", "report")
"""Commands that start Snakemake or draw the report's figures (seconds each): with the slow tests."""


@pytest.mark.parametrize(
    "line", [pytest.param(line, marks=[pytest.mark.slow] if line.split()[0] in SLOW else []) for line in COMMANDS]
)
def test_cli_campaign_file_and_directory_resolve_to_the_same_campaign(
    line: str, here: Path, capsys: pytest.CaptureFixture
) -> None:
    command = line.split()[0]
    by_file, by_directory = _run(line, FILE, capsys), _run(line, DIRECTORY, capsys)
    found = f" (file {FILE}, found by its name)" if COMMANDS[line] else ""
    assert (by_file[1], by_directory[1]) == (
        f"ebd2n {command}: campaign edgy: {DIRECTORY} (from {FILE})",
        f"ebd2n {command}: campaign edgy: {DIRECTORY}{found}",
    )
    assert by_file[0] == by_directory[0]


def test_cli_campaign_check_says_the_same_of_file_and_directory(here: Path, capsys: pytest.CaptureFixture) -> None:
    outputs = []
    for campaign in (FILE, DIRECTORY):
        assert main(["campaign", "check", campaign]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].startswith("campaign edgy: 6 runs -> results/edgy")


def test_cli_status_of_a_directory_that_is_no_campaign_lists_the_campaigns(
    here: Path, capsys: pytest.CaptureFixture
) -> None:
    status = main(["status", "config"])
    err = capsys.readouterr().err
    assert (status, err) == (
        2,
        "ebd2n status: error: config: not a campaign directory (none of frozen/, runs/, "
        "campaign.json, status/plan.json); campaigns under results/: edgy\n",
    )


def test_cli_status_of_no_campaign_without_results_says_none_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    status = main(["status", "results/demo"])
    err = capsys.readouterr().err
    assert (status, err) == (
        2,
        "ebd2n status: error: results/demo: not a campaign directory (no such directory); "
        "no campaign under results/ here\n",
    )


def test_locate_directory_without_its_file_where_the_file_is_needed(here: Path) -> None:
    (here / "results/orphan/runs").mkdir(parents=True, exist_ok=True)
    with pytest.raises(UserError, match=r"^campaign orphan: 0 campaign files name it .* give the campaign file itself"):
        locate_campaign("results/orphan", need_file=True)
    assert locate_campaign("results/orphan").describe() == "campaign orphan: results/orphan"


def test_locate_directory_elsewhere_where_the_file_is_needed(here: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "results" / "edgy"
    shutil.copytree(here / DIRECTORY / "runs", elsewhere / "runs")
    with pytest.raises(UserError, match=r"works on results/edgy under the working directory"):
        locate_campaign(elsewhere, need_file=True)


def test_locate_file_naming_a_path_out_of_results(here: Path, tmp_path: Path) -> None:
    hostile = tmp_path / "hostile.yaml"
    hostile.write_text("campaign: ../../etc\n")
    with pytest.raises(UserError, match=r"hostile\.yaml: campaign: '\.\./\.\./etc' is not a campaign name"):
        locate_campaign(hostile)


def test_locate_file_that_names_no_campaign(here: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model: {width: 64}\n")
    with pytest.raises(
        UserError,
        match=r"recipe\.yaml: not a campaign file \(no campaign: key naming one; top level: unknown key 'model'",
    ):
        locate_campaign(recipe, need_file=True)
