"""The bad-input catalog: every command refuses bad input the same way.

Each case builds its bad input under tmp_path (from session-scoped tiny caches and runs), runs the
command, and asserts the README's promise: exit status 2, exactly one line on stderr, no
traceback, the message names the key or file, and the SHA-256 listing of every directory the
case could touch is unchanged (so a refused `train` leaves no run directory behind, a failed
`prepare` no lock file). Commands run in-process through `ebd2n.cli.main`; the workflow's
campaign-file check runs the real Snakemake (a dry run) in a copy of the repository.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from conftest import TINY_DATA, TINY_VOCAB
from workflow_support import copy_repo, environment

from ebd2n.atomic import sha256_file
from ebd2n.campaign.check import load_campaign
from ebd2n.cli import main
from ebd2n.config import resolve_recipe_path
from ebd2n.data import Cache, verify_cache
from ebd2n.train.checkpoint import load_checkpoint, save_checkpoint

NOT_UTF8 = b"model:\n  width: 64 \xff\xfe\n"
"""Bytes that are not UTF-8 (a Latin-1 file, a binary file given by mistake)."""


@dataclass
class Case:
    """One bad input: the command line and what its message must name.

    What must stay untouched is the case's tmp_path (where it builds its input) and the session's
    cache and runs.
    """

    argv: list[str]
    names: str
    """A key or file the one-line message must contain."""


@dataclass(frozen=True)
class World:
    """What the cases start from: the tiny cache, a recipe for it, a sliced run and a complete run."""

    cache: Path
    recipe: Path
    sliced: Path
    """A run trained to epoch 1 of 2: checkpoints/epoch-1.pt."""
    complete: Path
    """A run trained to the end and validated: final.pt, results.json."""


CASES: dict[str, Callable[[World, Path], Case]] = {}


def case(name: str) -> Callable:
    def register(build: Callable[[World, Path], Case]) -> Callable[[World, Path], Case]:
        assert name not in CASES
        CASES[name] = build
        return build

    return register


@pytest.fixture(scope="session")
def world(tiny_cache: Cache, tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("bad-input")
    recipe = root / "tiny.yaml"
    raw = yaml.safe_load(resolve_recipe_path("demo").read_text())
    raw["model"]["vocab_size"] = TINY_VOCAB
    raw["data"] = {"source": "synthetic", "cache_dir": str(tiny_cache.directory), **TINY_DATA}
    raw["training"] |= {"max_tokens": 4096, "epoch_tokens": 2048}
    raw["evaluation"] = {"subset_blocks": 8, "batch_size": 64}
    recipe.write_text(yaml.safe_dump(raw, sort_keys=False))
    sliced, complete = root / "runs" / "sliced", root / "runs" / "complete"
    _ok("train", "--config", str(recipe), "--quiet", "--set", f"runtime.output_dir={sliced}", "--until-epoch", "1")
    _ok("train", "--config", str(recipe), "--quiet", "--set", f"runtime.output_dir={complete}")
    _ok("validate", str(complete))
    return World(tiny_cache.directory, recipe, sliced, complete)


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_exit_2_nothing_touched(
    name: str, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    bad = CASES[name](world, work)
    watched = [tmp_path, world.cache, world.sliced.parent]
    before = _listing(watched)
    monkeypatch.chdir(work)  # relative paths (results/<campaign>) land in the case's folder
    capsys.readouterr()
    status = _main(bad.argv)
    err = capsys.readouterr().err
    _assert_refused(status, err, bad.names)
    assert _listing(watched) == before


# --- workflow: Snakemake reads the campaign file, the Snakefile checks it ---------------------------

WORKFLOW_CASES: dict[str, tuple[dict | None, str, list[str]]] = {
    # name: (changes to a valid campaign, the key or file named, extra Snakemake arguments)
    "missing grid": ({"grid": None}, "grid", []),
    "mode without learning rates": ({"grid": {"modes": ["synchronous", "packed-4"]}}, "grid.learning_rates", []),
    "negative exponent learning rate": ({"grid": {"learning_rates": {"synchronous": ["-1e-3"]}}}, "-0.001", []),
    "base recipe refuses an override": ({"overrides": {"optimizer.foo": 1}}, "optimizer.foo", []),
    "--config given": ({}, "--config", ["--config", "seeds=[1]"]),
    "name with a trailing newline": ({"campaign": "badinput\n"}, "campaign", []),
    "seed beyond int64": ({"seeds": [2**64]}, "seeds.0", []),
    "search keep 0": ({"search": {"method": "successive-halving", "keep": 0}}, "search.keep", []),
    "search of one point": ({"search": {"method": "successive-halving"}}, "search", []),
    "divergence patience not an integer": (
        {"overrides": {"training.divergence_patience": 2.5}},
        "training.divergence_patience",
        [],
    ),
}
_SNAKEMAKE_PREAMBLE = ("Using workflow specific profile",)
"""Lines Snakemake itself writes before the Snakefile runs."""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("repo"))


@pytest.mark.parametrize("name", WORKFLOW_CASES)
def test_workflow_refuses_a_bad_campaign_file_in_one_line(name: str, repo: Path, tmp_path: Path) -> None:
    changes, names, extra = WORKFLOW_CASES[name]
    raw = _campaign()
    for key, value in changes.items():
        if value is None:
            raw.pop(key)
        elif isinstance(value, dict):
            raw[key] = raw.get(key, {}) | value
        else:
            raw[key] = value
    campaign_file = tmp_path / "campaign.yaml"
    campaign_file.write_text(yaml.safe_dump(raw, sort_keys=False).replace("'-1e-3'", "-1e-3"))
    before = _listing([tmp_path, repo / "results"])
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(campaign_file), *extra],
        cwd=repo,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    err = "".join(line for line in result.stderr.splitlines(True) if not line.startswith(_SNAKEMAKE_PREAMBLE))
    _assert_refused(result.returncode, err, names)
    assert "campaign.yaml" in err or names.startswith("--")
    assert _listing([tmp_path, repo / "results"]) == before


def test_workflow_reads_exponent_floats(repo: Path, tmp_path: Path) -> None:
    raw = _campaign()
    raw["grid"]["learning_rates"] = {"synchronous": ["3e-3"]}
    campaign_file = tmp_path / "campaign.yaml"
    campaign_file.write_text(yaml.safe_dump(raw, sort_keys=False).replace("'3e-3'", "3e-3"))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(campaign_file)],
        cwd=repo,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr  # a string "3e-3" fails the schema (not a number)


def test_campaign_check_reads_exponent_floats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = _recipe_file(tmp_path, resolve_recipe_path("demo").read_text().replace("lr: 0.01", "lr: 1e-2"), "base.yaml")
    grid = _campaign()["grid"] | {"learning_rates": {"synchronous": ["3e-3"]}}
    argv = _check(tmp_path, _campaign(recipe=str(base), grid=grid))
    monkeypatch.chdir(tmp_path)
    _ok(*argv)
    result = load_campaign(argv[-1])
    assert (result.grid.learning_rates, result.base_recipe("base").optimizer.lr) == ({"synchronous": (0.003,)}, 0.01)


# --- a reader that stops early ----------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["recipe", "demo"], ["campaign", "check", "config/config.yaml"]], ids=" ".join)
def test_closed_pipe_is_a_quiet_exit(argv: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader (`| head -1`) has gone before the command writes
    with os.fdopen(write, "wb") as stdout:
        result = subprocess.run(
            [sys.executable, "-m", "ebd2n", *argv],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[1],
            timeout=120,
        )
    assert (result.returncode, result.stderr) == (141, "")


# --- results that are no results: said, never dropped ---------------------------------------------


@pytest.mark.parametrize("max_tokens", [10**24, 10**18])
def test_absurd_budget_is_refused_at_once(max_tokens: int, capsys: pytest.CaptureFixture) -> None:
    started = time.perf_counter()
    status = _main(["recipe", "demo", "--set", f"training.max_tokens={max_tokens}"])
    result = (status, time.perf_counter() - started < 1.0)
    _assert_refused(status, capsys.readouterr().err, "training.max_tokens")
    assert result == (2, True)


def test_validate_non_finite_loss_is_a_failed_run(world: World, tmp_path: Path) -> None:
    run = Path(shutil.copytree(world.complete, tmp_path / "run"))
    state = load_checkpoint(run / "final.pt")
    state.pop("format")
    state["engine"]["model"] = {
        name: torch.full_like(weight, math.nan) for name, weight in state["engine"]["model"].items()
    }
    save_checkpoint(run, "final.pt", state)
    _ok("validate", str(run))
    results = json.loads((run / "results.json").read_text())
    expected = {"status": "failed", "reason": "non-finite full-validation loss (nan)", "loss": None}
    assert {key: results[key] for key in expected} == expected


def test_select_names_runs_that_do_not_count(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    table = RUNS_CSV + "b,synchronous,0.003,0.99,43,complete,NaN\nc,synchronous,0.003,0.99,44,failed,\n"
    (tmp_path / "runs.csv").write_text(table)
    _ok("select", str(tmp_path / "runs.csv"), "--out", str(tmp_path / "out"))
    result = [line for line in capsys.readouterr().out.splitlines() if line.startswith("not counted")]
    assert result == ["not counted: b (complete with loss nan)", "not counted: c (failed)"]


# --- the cases ----------------------------------------------------------------------------------------


def _recipe_file(tmp: Path, text: str | bytes, name: str = "recipe.yaml") -> Path:
    path = tmp / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _tiny(world: World, tmp: Path, *sets: str, run: str = "run") -> list[str]:
    """`train --config <tiny recipe>` into tmp/run, with --set overrides."""
    argv = ["train", "--config", str(world.recipe), "--quiet", "--set", f"runtime.output_dir={tmp / run}"]
    for pair in sets:
        argv += ["--set", pair]
    return argv


def _cache_copy(world: World, tmp: Path) -> Path:
    """A private, verified copy of the tiny cache (so damaging it leaves the session's alone)."""
    copy = Path(shutil.copytree(world.cache, tmp / "cache"))
    verify_cache(copy)
    return copy


def _shard(cache: Path, index: int = 0) -> Path:
    return sorted(cache.glob("train-*.bin"))[index]


# recipe ------------------------------------------------------------------------------------------

for _name, _sets, _names in [
    ("unknown key", ["optimizer.foo=1"], "--set optimizer.foo=1"),
    ("value not YAML", ["optimizer.lr=[1"], "--set optimizer.lr"),
    ("no equals sign", ["optimizer.lr"], "--set 'optimizer.lr'"),
    ("wrong type", ["optimizer.lr=fast"], "--set optimizer.lr=fast"),
    ("infinite lr", ["optimizer.lr=.inf"], "optimizer.lr"),
    ("nan beta2", ["optimizer.beta2=.nan"], "optimizer.beta2"),
    ("minus infinity rope theta", ["model.rope_theta=-.inf"], "model.rope_theta"),
    ("width not divisible by heads", ["model.width=65"], "--set model.width=65"),
    ("freeze prefix beyond layers", ["parallel.freeze_prefix=9"], "--set parallel.freeze_prefix=9"),
    ("key below a value", ["model.width.x=1"], "--set model.width.x=1"),
    ("batch not a multiple of the context", ["training.batch_tokens=1000"], "training.batch_tokens"),
    ("micro batch does not divide", ["training.micro_batch_size=5"], "training.micro_batch_size"),
    ("sequences not divisible by K", ["decentralized.num_models=3"], "decentralized.num_models"),
    ("negative exponent lr", ["optimizer.lr=-1e-3"], "--set optimizer.lr=-1e-3"),
    ("seed beyond int64", [f"runtime.seed={2**64}"], "runtime.seed"),
    ("negative seed", ["runtime.seed=-1"], "runtime.seed"),
    ("max_tokens beyond int64", [f"training.max_tokens={10**24}"], "training.max_tokens"),
    ("max_tokens of absurdly many epochs", [f"training.max_tokens={10**18}"], "training.max_tokens"),
    ("negative divergence margin", ["training.divergence_margin=-1"], "training.divergence_margin"),
    ("divergence margin not a number", ["training.divergence_margin=high"], "training.divergence_margin"),
    ("zero divergence patience", ["training.divergence_patience=0"], "training.divergence_patience"),
]:
    case(f"recipe --set {_name}")(
        lambda world, tmp, sets=_sets, names=_names: Case(
            ["recipe", "demo", *[arg for pair in sets for arg in ("--set", pair)]], names
        )
    )


@case("recipe no such file or preset")
def _(world, tmp):
    return Case(["recipe", str(tmp / "absent.yaml")], "absent.yaml")


@case("recipe file not UTF-8")
def _(world, tmp):
    return Case(["recipe", str(_recipe_file(tmp, NOT_UTF8))], "recipe.yaml")


@case("recipe file not YAML")
def _(world, tmp):
    return Case(["recipe", str(_recipe_file(tmp, "model: [\n"))], "recipe.yaml")


@case("recipe file a list")
def _(world, tmp):
    return Case(["recipe", str(_recipe_file(tmp, "- model\n- optimizer\n"))], "recipe.yaml")


@case("recipe file empty")
def _(world, tmp):
    return Case(["recipe", str(_recipe_file(tmp, ""))], "recipe.yaml")


@case("recipe file unknown key")
def _(world, tmp):
    text = world.recipe.read_text().replace("optimizer:\n", "optimizer:\n  momentum: 0.9\n")
    return Case(["recipe", str(_recipe_file(tmp, text))], "recipe.yaml: optimizer.momentum")


@case("recipe file infinite lr")
def _(world, tmp):
    text = world.recipe.read_text().replace("lr: 0.01", "lr: .inf")
    return Case(["recipe", str(_recipe_file(tmp, text))], "recipe.yaml: optimizer.lr")


@case("recipe file bad, --set fine")
def _(world, tmp):
    text = world.recipe.read_text().replace("width: 64", "width: 63")
    return Case(["recipe", str(_recipe_file(tmp, text)), "--set", "optimizer.lr=1e-3"], "recipe.yaml: model")


@case("recipe argument missing")
def _(world, tmp):
    return Case(["recipe"], "recipe")


# prepare -----------------------------------------------------------------------------------------


def _prepare_local(tmp: Path, dataset: Path, *sets: str) -> list[str]:
    argv = [
        "prepare",
        "demo",
        "--quiet",
        "--set",
        "data.source=local",
        "--set",
        f"data.dataset={dataset}",
        "--set",
        f"data.cache_dir={tmp / 'results' / 'caches' / 'new'}",
    ]
    for pair in sets:
        argv += ["--set", pair]
    return argv


@case("prepare local file missing")
def _(world, tmp):
    return Case(_prepare_local(tmp, tmp / "absent.jsonl"), "absent.jsonl")


@case("prepare local text not UTF-8")
def _(world, tmp):
    (tmp / "latin1.txt").write_bytes(b"caf\xe9 au lait\n\nsecond paragraph\n")
    return Case(_prepare_local(tmp, tmp / "latin1.txt"), "latin1.txt: not UTF-8")


@case("prepare local JSONL not UTF-8")
def _(world, tmp):
    (tmp / "latin1.jsonl").write_bytes(b'{"text": "caf\xe9"}\n{"text": "ok"}\n')
    return Case(_prepare_local(tmp, tmp / "latin1.jsonl"), "latin1.jsonl: not UTF-8")


@case("prepare local file of unknown suffix")
def _(world, tmp):
    (tmp / "table.csv").write_text("text\nhello\n")
    return Case(_prepare_local(tmp, tmp / "table.csv"), "data.dataset")


@case("prepare local file empty")
def _(world, tmp):
    (tmp / "empty.txt").write_text("")
    return Case(_prepare_local(tmp, tmp / "empty.txt"), "empty.txt")


@case("prepare local file with a validation split")
def _(world, tmp):
    (tmp / "doc.txt").write_text("hello world\n")
    return Case(_prepare_local(tmp, tmp / "doc.txt", "data.validation_split=test"), "data.validation_split")


@case("prepare JSONL without the text field")
def _(world, tmp):
    (tmp / "docs.jsonl").write_text('{"body": "hello"}\n' * 20)
    return Case(_prepare_local(tmp, tmp / "docs.jsonl"), "data.text_field")


def _prepare_tiny(world: World, cache: Path, *sets: str) -> list[str]:
    argv = ["prepare", str(world.recipe), "--quiet", "--set", f"data.cache_dir={cache}"]
    for pair in sets:
        argv += ["--set", pair]
    return argv


@case("prepare tokenizer file not UTF-8")
def _(world, tmp):
    (tmp / "tokenizer.json").write_bytes(b'{"model": "caf\xe9"}')
    return Case(
        _prepare_tiny(world, tmp / "caches" / "new", f"data.tokenizer={tmp / 'tokenizer.json'}"), "tokenizer.json"
    )


@case("prepare over a cache of other settings")
def _(world, tmp):
    return Case(_prepare_tiny(world, world.cache, "data.shuffle_seed=7"), "data.shuffle_seed")


@case("prepare vocab smaller than the cache's")
def _(world, tmp):
    return Case(_prepare_tiny(world, world.cache, "model.vocab_size=256"), "model.vocab_size")


@case("prepare vocab larger than the cache's")
def _(world, tmp):
    return Case(_prepare_tiny(world, world.cache, "model.vocab_size=512"), "model.vocab_size")


@case("prepare into a folder holding something else")
def _(world, tmp):
    (tmp / "taken").mkdir()
    (tmp / "taken" / "notes.txt").write_text("mine\n")
    return Case(_prepare_tiny(world, tmp / "taken"), "manifest.json")


# train -------------------------------------------------------------------------------------------


@case("train vocab smaller than the cache's")
def _(world, tmp):
    return Case(_tiny(world, tmp, "model.vocab_size=256"), "model.vocab_size")


@case("train vocab larger than the cache's")
def _(world, tmp):
    return Case(_tiny(world, tmp, "model.vocab_size=512"), "model.vocab_size")


@case("train infinite lr")
def _(world, tmp):
    return Case(_tiny(world, tmp, "optimizer.lr=.inf"), "optimizer.lr")


@case("train batch not a multiple of the context")
def _(world, tmp):
    return Case(_tiny(world, tmp, "training.batch_tokens=1000"), "training.batch_tokens")


@case("train no cache prepared")
def _(world, tmp):
    return Case(_tiny(world, tmp, f"data.cache_dir={tmp / 'nothing'}"), "data.cache_dir")


@case("train context longer than the validation split")
def _(world, tmp):
    sets = (
        "model.context_length=16384",
        "training.batch_tokens=16384",
        "training.micro_batch_size=1",
        "training.max_tokens=32768",
        "training.epoch_tokens=16384",
    )
    return Case(_tiny(world, tmp, *sets), "model.context_length")


@case("train shard changed in place, valid ids")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    shard = _shard(cache)
    data = bytearray(shard.read_bytes())
    data[0] ^= 1  # still a token id below the vocabulary
    shard.write_bytes(bytes(data))
    return Case(_tiny(world, tmp, f"data.cache_dir={cache}"), shard.name)


@case("train shard with ids beyond the vocabulary")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    shard = _shard(cache, 1)
    data = bytearray(shard.read_bytes())
    data[10:12] = b"\xff\xff"
    shard.write_bytes(bytes(data))
    return Case(_tiny(world, tmp, f"data.cache_dir={cache}"), shard.name)


@case("train shard truncated")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    shard = _shard(cache)
    shard.write_bytes(shard.read_bytes()[:-2])
    return Case(_tiny(world, tmp, f"data.cache_dir={cache}"), shard.name)


@case("train shard missing")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    shard = _shard(cache, 2)
    shard.unlink()
    return Case(_tiny(world, tmp, f"data.cache_dir={cache}"), shard.name)


@case("train manifest edited")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["seeds"]["shuffle"] = 7
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return Case(_tiny(world, tmp, f"data.cache_dir={cache}"), "manifest.json")


@case("train manifest not JSON")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    (cache / "manifest.json").write_text("{")
    return Case(_tiny(world, tmp, f"data.cache_dir={cache}"), "manifest.json")


@case("train init_from missing")
def _(world, tmp):
    return Case(_tiny(world, tmp, f"training.init_from={tmp / 'elsewhere' / 'final.pt'}"), "final.pt")


@case("train resume from another run directory")
def _(world, tmp):
    return Case(_tiny(world, tmp) + ["--resume", str(world.sliced / "checkpoints/epoch-1.pt")], "--resume")


@case("train resume checkpoint missing")
def _(world, tmp):
    return Case(_tiny(world, tmp) + ["--resume", str(tmp / "run/checkpoints/epoch-1.pt")], "epoch-1.pt")


@case("train resume checkpoint truncated")
def _(world, tmp):
    run = Path(shutil.copytree(world.sliced, tmp / "run"))
    checkpoint = run / "checkpoints/epoch-1.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:-100])
    return Case(_tiny(world, tmp) + ["--resume", str(checkpoint)], "epoch-1.pt")


@case("train resume with another recipe")
def _(world, tmp):
    run = Path(shutil.copytree(world.sliced, tmp / "run"))
    return Case(
        _tiny(world, tmp, "optimizer.lr=0.002") + ["--resume", str(run / "checkpoints/epoch-1.pt")], "epoch-1.pt"
    )


@case("train resume after the manifest was edited")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    run = Path(shutil.copytree(world.sliced, tmp / "run"))
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["source"]["kind"] = "edited"
    (cache / "manifest.json").write_text(json.dumps(manifest))
    resume = ["--resume", str(run / "checkpoints/epoch-1.pt")]
    return Case(_tiny(world, tmp, f"data.cache_dir={cache}") + resume, "manifest.json")


@case("train until epoch beyond the budget")
def _(world, tmp):
    return Case(_tiny(world, tmp) + ["--until-epoch", "9"], "--until-epoch")


@case("train until epoch not a number")
def _(world, tmp):
    return Case(_tiny(world, tmp) + ["--until-epoch", "two"], "--until-epoch")


@case("train into another run's directory")
def _(world, tmp):
    shutil.copytree(world.sliced, tmp / "run")
    return Case(_tiny(world, tmp, "optimizer.lr=0.002"), "runtime.output_dir")


@case("train seed beyond int64")
def _(world, tmp):
    return Case(_tiny(world, tmp, f"runtime.seed={2**64}"), "runtime.seed")


@case("train recipe file not UTF-8")
def _(world, tmp):
    return Case(["train", "--config", str(_recipe_file(tmp, NOT_UTF8)), "--quiet"], "recipe.yaml")


@case("train --config missing")
def _(world, tmp):
    return Case(["train", "--quiet"], "--config")


# validate ----------------------------------------------------------------------------------------


def _run_copy(world: World, tmp: Path) -> Path:
    run = Path(shutil.copytree(world.complete, tmp / "run"))
    (run / "results.json").unlink()
    return run


@case("validate not a run directory")
def _(world, tmp):
    return Case(["validate", str(tmp)], "recipe.yaml")


@case("validate no final.pt")
def _(world, tmp):
    return Case(["validate", str(world.sliced)], "final.pt")


@case("validate final.pt altered")
def _(world, tmp):
    run = _run_copy(world, tmp)
    data = bytearray((run / "final.pt").read_bytes())
    data[-50] ^= 1
    (run / "final.pt").write_bytes(bytes(data))
    return Case(["validate", str(run)], "final.pt")


@case("validate final.pt not in the ledger")
def _(world, tmp):
    run = _run_copy(world, tmp)
    (run / "checkpoints.json").write_text("{}\n")
    return Case(["validate", str(run)], "final.pt")


@case("validate recipe.yaml not UTF-8")
def _(world, tmp):
    run = _run_copy(world, tmp)
    (run / "recipe.yaml").write_bytes(NOT_UTF8)
    return Case(["validate", str(run)], "recipe.yaml")


@case("validate cache shard changed")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    run = _run_copy(world, tmp)
    (run / "recipe.yaml").write_text((run / "recipe.yaml").read_text().replace(str(world.cache), str(cache)))
    shard = sorted(cache.glob("validation-*.bin"))[0]
    data = bytearray(shard.read_bytes())
    data[4] ^= 1
    shard.write_bytes(bytes(data))
    return Case(["validate", str(run)], shard.name)


@case("validate cache manifest edited")
def _(world, tmp):
    cache = _cache_copy(world, tmp)
    run = _run_copy(world, tmp)
    (run / "recipe.yaml").write_text((run / "recipe.yaml").read_text().replace(str(world.cache), str(cache)))
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["source"]["kind"] = "edited"
    (cache / "manifest.json").write_text(json.dumps(manifest))
    return Case(["validate", str(run)], "manifest.json")


# campaign check ----------------------------------------------------------------------------------


def _campaign(**changes) -> dict:
    raw = {
        "campaign": "badinput",
        "recipe": "demo",
        "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.003]}, "beta2": [0.99]},
        "seeds": [42],
        "epochs_per_slice": 1,
        "resources": {"default": {"gpus": 0, "minutes": 5, "mem_mb": 1000, "cpus": 1}},
    }
    return raw | changes


def _check(tmp: Path, raw: dict | str | bytes) -> list[str]:
    path = tmp / "campaign.yaml"
    if isinstance(raw, dict):
        raw = yaml.safe_dump(raw, sort_keys=False).replace("'", "")  # unquote 1e-3 as a researcher writes it
    path.write_bytes(raw if isinstance(raw, bytes) else raw.encode())
    return ["campaign", "check", str(path)]


@case("campaign check file missing")
def _(world, tmp):
    return Case(["campaign", "check", str(tmp / "absent.yaml")], "absent.yaml")


@case("campaign check file not UTF-8")
def _(world, tmp):
    return Case(_check(tmp, b"campaign: caf\xe9\n"), "campaign.yaml")


@case("campaign check file not YAML")
def _(world, tmp):
    return Case(_check(tmp, "grid: [\n"), "campaign.yaml")


@case("campaign check file a list")
def _(world, tmp):
    return Case(_check(tmp, "- demo\n"), "campaign.yaml")


@case("campaign check file empty")
def _(world, tmp):
    return Case(_check(tmp, ""), "campaign.yaml")


@case("campaign check missing grid")
def _(world, tmp):
    raw = _campaign()
    raw.pop("grid")
    return Case(_check(tmp, raw), "grid")


@case("campaign check negative exponent learning rate")
def _(world, tmp):
    grid = _campaign()["grid"] | {"learning_rates": {"synchronous": ["-1e-3"]}}
    return Case(_check(tmp, _campaign(grid=grid)), "grid.learning_rates.synchronous.0")


@case("campaign check mode without learning rates")
def _(world, tmp):
    grid = _campaign()["grid"] | {"modes": ["synchronous", "packed-4"]}
    return Case(_check(tmp, _campaign(grid=grid)), "grid.learning_rates")


@case("campaign check unknown resource scope")
def _(world, tmp):
    return Case(_check(tmp, _campaign(resources={"gpu-nodes": {"gpus": 1}})), "resources.gpu-nodes")


@case("campaign check override of an unknown key")
def _(world, tmp):
    return Case(_check(tmp, _campaign(overrides={"optimizer.foo": 1})), "optimizer.foo")


@case("campaign check override breaks the budget")
def _(world, tmp):
    return Case(_check(tmp, _campaign(overrides={"training.batch_tokens": 1000})), "training.batch_tokens")


@case("campaign check base recipe not UTF-8")
def _(world, tmp):
    base = _recipe_file(tmp, NOT_UTF8, "base.yaml")
    return Case(_check(tmp, _campaign(recipe=str(base))), "base.yaml")


@case("campaign check base recipe missing")
def _(world, tmp):
    return Case(_check(tmp, _campaign(recipe=str(tmp / "absent.yaml"))), "absent.yaml")


@case("campaign check name with a trailing newline")
def _(world, tmp):
    text = yaml.safe_dump(_campaign(), sort_keys=False).replace("campaign: badinput", 'campaign: "badinput\\n"')
    return Case(_check(tmp, text), "campaign")


@case("campaign check preset with a trailing newline")
def _(world, tmp):
    raw = _campaign(grid=_campaign()["grid"] | {"presets": ["20m\n"]})
    raw.pop("recipe")
    return Case(_check(tmp, yaml.safe_dump(raw, sort_keys=False)), "grid.presets.0")


@case("campaign check seed beyond int64")
def _(world, tmp):
    return Case(_check(tmp, _campaign(seeds=[42, 2**64])), "seeds.1")


def _search(tmp: Path, search: dict, learning_rates: tuple[float, ...] = (0.003, 0.006), **changes) -> list[str]:
    """`campaign check` of a campaign searching two points (the demo's runs: 2 epochs, 1 per slice) by `search`."""
    grid = _campaign()["grid"] | {"learning_rates": {"synchronous": list(learning_rates)}}
    return _check(tmp, _campaign(grid=grid, search=search, **changes))


for _name, _search_setting, _changes, _names in [
    ("rung not a slice end", {"rungs": [5]}, {}, "search.rungs: [5]"),
    ("rung at the last epoch", {"rungs": [2]}, {}, "search.rungs: [2]"),
    ("one slice, no rung", {}, {"epochs_per_slice": 2}, "search"),
    ("keep 0", {"keep": 0}, {}, "search.keep"),
    ("keep above 1", {"keep": 1.5}, {}, "search.keep"),
    ("unknown key", {"kep": 0.5}, {}, "kep"),
]:
    case(f"campaign check search {_name}")(
        lambda world, tmp, setting=_search_setting, changes=_changes, names=_names: Case(
            _search(tmp, {"method": "successive-halving", **setting}, **changes), names
        )
    )


@case("campaign check search method misspelt")
def _(world, tmp):
    return Case(_search(tmp, {"method": "successive-halvin"}), "search.method")


@case("campaign check search of one point per bracket")
def _(world, tmp):
    return Case(_search(tmp, {"method": "successive-halving"}, learning_rates=(0.003,)), "search")


@case("campaign check frozen record damaged")
def _(world, tmp):
    record = tmp / "results" / "badinput" / "frozen" / "freeze.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"settings": ')
    return Case(_check(tmp, _campaign()), "freeze.json")


# select ------------------------------------------------------------------------------------------

RUNS_CSV = "run,mode,lr,beta2,seed,status,loss\na,synchronous,0.003,0.99,42,complete,3.5\n"


def _select(tmp: Path, content: str | bytes, name: str = "runs.csv", out: str = "out") -> list[str]:
    path = tmp / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return ["select", str(path), "--out", str(tmp / out)]


@case("select file missing")
def _(world, tmp):
    return Case(["select", str(tmp / "absent.csv"), "--out", str(tmp / "out")], "absent.csv")


@case("select header-only CSV")
def _(world, tmp):
    return Case(_select(tmp, RUNS_CSV.splitlines()[0] + "\n"), "runs.csv")


@case("select CSV missing a column")
def _(world, tmp):
    return Case(_select(tmp, "run,mode,lr,beta2,seed,status\na,synchronous,0.003,0.99,42,complete\n"), "'loss'")


@case("select CSV with a word for a seed")
def _(world, tmp):
    return Case(_select(tmp, RUNS_CSV.replace(",42,", ",forty-two,")), "seed")


@case("select CSV not UTF-8")
def _(world, tmp):
    return Case(_select(tmp, RUNS_CSV.encode().replace(b"complete", b"compl\xe9te")), "runs.csv")


@case("select JSON not JSON")
def _(world, tmp):
    return Case(_select(tmp, "[{", "runs.json"), "runs.json")


@case("select JSON not a list of runs")
def _(world, tmp):
    return Case(_select(tmp, '{"runs": 3}', "runs.json"), "runs.json")


@case("select --out an existing file")
def _(world, tmp):
    (tmp / "taken").write_text("mine\n")
    return Case(_select(tmp, RUNS_CSV, out="taken"), "--out")


@case("select --out missing")
def _(world, tmp):
    return Case(["select", str(tmp / "runs.csv")], "--out")


# report ------------------------------------------------------------------------------------------


@case("report no such campaign directory")
def _(world, tmp):
    return Case(["report", str(tmp / "results" / "absent")], "absent")


@case("report campaign without runs")
def _(world, tmp):
    (tmp / "results" / "empty" / "runs").mkdir(parents=True)
    return Case(["report", str(tmp / "results" / "empty")], "empty")


@case("report results.json not JSON")
def _(world, tmp):
    run = tmp / "results" / "broken" / "runs" / "synchronous-lr0.003-b0.99-s42"
    run.mkdir(parents=True)
    (run / "results.json").write_text("{")
    return Case(["report", str(tmp / "results" / "broken")], "results.json")


@case("report results.json lacks the grid point")
def _(world, tmp):
    run = tmp / "results" / "broken" / "runs" / "synchronous-lr0.003-b0.99-s42"
    run.mkdir(parents=True)
    (run / "results.json").write_text('{"status": "complete"}')
    return Case(["report", str(tmp / "results" / "broken")], "results.json")


# --- helpers ---------------------------------------------------------------------------------------


def _main(argv: list[str]) -> int:
    """`ebd2n ARGV` in this process: its exit status (argparse's refusals exit from inside)."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def _ok(*argv: str) -> None:
    assert _main(list(argv)) == 0


def _assert_refused(status: int, err: str, names: str) -> None:
    lines = err.splitlines()
    assert (status, len(lines), "Traceback" in err) == (2, 1, False), err
    assert names in lines[0], lines[0]


def _listing(roots: list[Path]) -> dict[str, str]:
    """SHA-256 of every file and a marker for every folder under the roots (what a refusal must not change)."""
    listing = {}
    for root in roots:
        if not root.exists():
            continue
        for path in sorted(root.rglob("*")):
            listing[str(path)] = sha256_file(path) if path.is_file() else "folder"
    return listing


@case("audit no such campaign directory")
def _(world, tmp):
    return Case(["audit", str(tmp / "results" / "absent")], "absent")


@case("audit a run directory, not a campaign")
def _(world, tmp):
    return Case(["audit", str(world.complete)], str(world.complete))


@case("audit a campaign without its frozen spec, campaign.json corrupt")
def _(world, tmp):
    campaign = tmp / "results" / "broken"
    (campaign / "runs").mkdir(parents=True)
    (campaign / "campaign.json").write_text("{not json")
    return Case(["audit", str(campaign)], "frozen/spec")


@case("audit a campaign whose frozen spec is corrupt")
def _(world, tmp):
    campaign = tmp / "results" / "broken"
    (campaign / "frozen" / "spec").mkdir(parents=True)
    (campaign / "frozen" / "spec" / "1.json").write_text('{"grid": [1]}')
    return Case(["audit", str(campaign)], "frozen/spec/1.json")


@case("audit a file")
def _(world, tmp):
    return Case(["audit", str(world.recipe)], str(world.recipe))
