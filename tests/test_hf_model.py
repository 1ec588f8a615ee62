"""Hugging Face causal LMs as models: recipes, loading, units, freeze and LoRA, resume, export.

Tiny random Llama, Qwen2 and Qwen2-MoE models are written in the Hugging Face layout by
ebd2n itself (no network), at the demo cache's vocabulary so they train on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from engine_steps import fixed_steps
from workflow_support import assert_states_equal, comparable_metrics

from ebd2n.config import count_parameters, dump_recipe, load_recipe, recipe_from_dict, recipe_identity
from ebd2n.config.hf import architecture
from ebd2n.config.parallelism import FROZEN_BASE, FROZEN_PREFIX, FULL_RANK, LORA
from ebd2n.errors import UserError
from ebd2n.model.hf import init_model, load_model
from ebd2n.model.hf_units import hf_units
from ebd2n.model.units import model_units
from ebd2n.train import train
from ebd2n.train.checkpoint import load_checkpoint

FAMILIES = ("llama", "qwen2", "qwen2_moe")
DEMO_VOCAB = 512
REFERENCE = Path(__file__).resolve().parents[1] / "resources/models/qwen1.5-moe-a2.7b/config.json"
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny random model per family, in the Hugging Face layout."""
    root = tmp_path_factory.mktemp("hf-models")
    return {family: init_model(family, root / family, DEMO_VOCAB, seed=1) for family in FAMILIES}


def _recipe(model_dir: Path, cache_dir: Path, run_dir: Path, *overrides: str, **parallel):
    raw = yaml.safe_load((SRC / "ebd2n/config/recipes/demo.yaml").read_text())
    raw["model"] = {"source": "huggingface", "path": str(model_dir), "context_length": 32}
    raw["data"]["cache_dir"] = str(cache_dir)
    raw["runtime"]["output_dir"] = str(run_dir)
    raw["training"].update(max_tokens=4096, epoch_tokens=1024, batch_tokens=256, micro_batch_size=4)
    raw["evaluation"]["subset_blocks"] = 16
    raw["parallel"] = parallel
    pairs = [tuple(pair.split("=", 1)) for pair in overrides]
    return recipe_from_dict(raw, [(k, yaml.safe_load(v)) for k, v in pairs])


@pytest.mark.parametrize("family", FAMILIES)
def test_units_sum_to_the_live_model_unit_by_unit(hf_models: dict[str, Path], family: str) -> None:
    model = load_model(hf_models[family])
    units = hf_units(architecture(json.loads((hf_models[family] / "config.json").read_text())), 32)
    live: dict[str, int] = {}
    for name, parameter in model.named_parameters():  # a tied head is listed once, as the embedding
        unit = _unit_of_parameter(units, name)
        live[unit] = live.get(unit, 0) + parameter.numel()
    assert live == {u.name: u.parameters for u in units if u.parameters}
    assert sum(p.numel() for p in model.parameters()) == sum(u.parameters for u in units)


def _unit_of_parameter(units: list, name: str) -> str:
    """The unit whose longest parameter prefix the name has ('model.layers.3.mlp.experts.down_proj'
    -> 'block3.experts'); a tied lm_head.weight belongs to the embedding."""
    if name == "lm_head.weight" and not any(u.param_prefixes == ("lm_head.",) for u in units):
        return "embedding"
    owners = [(len(p), u.name) for u in units for p in u.param_prefixes if name.startswith(p)]
    assert owners, f"parameter {name!r} belongs to no unit of the model"
    return max(owners)[1]


def test_real_qwen_moe_config_has_the_seed_216_decoder_units() -> None:
    arch = architecture(json.loads(REFERENCE.read_text()))
    units = hf_units(arch, 2048)
    decoder = [u for u in units if u.block is not None]
    assert len(decoder) == 216 == 24 * 9
    assert [u.name for u in units if u.block is None] == ["embedding", "norm", "head"]
    assert {u.kind for u in decoder} == {"norm", "attention", "router", "experts", "shared_expert"}
    assert sum(u.parameters for u in units) == arch.parameters() == 14_315_784_192  # the published 14.3 B


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_transformers_own_model(hf_models: dict[str, Path], family: str) -> None:
    from transformers import AutoModelForCausalLM

    idx = torch.randint(0, DEMO_VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    ours, _ = load_model(hf_models[family])(idx)
    theirs = AutoModelForCausalLM.from_pretrained(hf_models[family]).eval()(idx).logits
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_a_stage_materialises_only_its_parameters(hf_models: dict[str, Path]) -> None:
    model = load_model(hf_models["qwen2_moe"], keep=lambda name: name.startswith("model.layers.1."))
    held = {name for name, p in model.named_parameters() if not p.is_meta}
    assert held and all(name.startswith("model.layers.1.") for name in held)
    assert model.model.embed_tokens.weight.is_meta and model.lm_head.weight.is_meta


def test_recipe_shape_comes_from_config_json(hf_models: dict[str, Path], demo_cache: Path, tmp_path: Path) -> None:
    recipe = _recipe(hf_models["qwen2_moe"], demo_cache, tmp_path / "run")
    assert (recipe.model.vocab_size, recipe.model.layers, recipe.model.width) == (DEMO_VOCAB, 2, 32)
    assert count_parameters(recipe.model) == sum(p.numel() for p in load_model(hf_models["qwen2_moe"]).parameters())
    with pytest.raises(UserError, match=r"^model.width: 64 differs from the model's config.json \(32\)"):
        _recipe(hf_models["qwen2_moe"], demo_cache, tmp_path / "run", "model.width=64")
    assert "source" not in yaml.safe_load(dump_recipe(load_recipe("demo")))["model"]  # GPT recipe.yaml unchanged


def test_hub_name_resolved_offline_from_the_local_cache(
    hf_models: dict[str, Path], demo_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = "a" * 40
    snapshot = tmp_path / "hub/models--org--tiny/snapshots" / commit
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(hf_models["llama"])
    (tmp_path / "hub/models--org--tiny/refs").mkdir()
    (tmp_path / "hub/models--org--tiny/refs/main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    raw = {"source": "huggingface", "name": "org/tiny", "context_length": 32}
    by_ref = _recipe(hf_models["llama"], demo_cache, tmp_path / "run")
    by_ref.model = by_ref.model.model_validate({**raw, "revision": "main"})
    assert by_ref.model.width == 32
    with pytest.raises(
        UserError, match=r"^model.revision " + "b" * 40 + ": org/tiny at this revision is not in the local"
    ):
        by_ref.model.model_validate({**raw, "revision": "b" * 40})


def test_identity_names_the_weights_not_the_path(hf_models: dict[str, Path], demo_cache: Path, tmp_path: Path) -> None:
    import shutil

    copy = shutil.copytree(hf_models["qwen2"], tmp_path / "copy")
    original = recipe_identity(_recipe(hf_models["qwen2"], demo_cache, tmp_path / "a"), "c" * 64)
    assert recipe_identity(_recipe(copy, demo_cache, tmp_path / "b"), "c" * 64) == original
    shutil.rmtree(copy)
    init_model("qwen2", copy, DEMO_VOCAB, seed=2)  # other weights, same config
    assert recipe_identity(_recipe(copy, demo_cache, tmp_path / "b"), "c" * 64) != original


@pytest.mark.parametrize("family", FAMILIES)
def test_two_slices_equal_one_job_bitwise(
    hf_models: dict[str, Path], demo_cache: Path, tmp_path: Path, family: str
) -> None:
    whole = _recipe(hf_models[family], demo_cache, tmp_path / "whole")
    train(whole, progress=False)
    sliced = _recipe(hf_models[family], demo_cache, tmp_path / "sliced")
    train(sliced, until_epoch=2, progress=False)
    train(sliced, resume=tmp_path / "sliced/checkpoints/epoch-2.pt", progress=False)
    final = load_checkpoint(tmp_path / "whole/final.pt")["engine"]
    assert_states_equal(final, load_checkpoint(tmp_path / "sliced/final.pt")["engine"])
    assert comparable_metrics(tmp_path / "whole") == comparable_metrics(tmp_path / "sliced")
    initial = load_model(hf_models[family]).state_dict()
    assert any(not torch.equal(final["model"][k], initial[k]) for k in initial)  # it trained


def test_frozen_layers_and_lora_bases_stay_bitwise(
    hf_models: dict[str, Path], demo_cache: Path, tmp_path: Path
) -> None:
    lora = {"rank": 4, "targets": ["q", "k", "v", "o", "gate", "up", "down"], "train_norms": True}
    recipe = _recipe(hf_models["qwen2_moe"], demo_cache, tmp_path / "run", freeze_prefix=1, lora=lora)
    train(recipe, progress=False)
    initial = load_model(hf_models["qwen2_moe"]).state_dict()
    final = load_checkpoint(tmp_path / "run/final.pt")["engine"]["model"]
    for name, tensor in final.items():
        plain = name.replace(".base.", ".")
        if name.startswith("model.layers.0.") or ".base." in name or ".experts." in name or ".mlp.gate." in name:
            assert torch.equal(tensor, initial[plain]), name
        elif "lora_b" in name or "layernorm" in name or name == "model.norm.weight":
            assert not torch.equal(tensor, initial.get(plain, torch.zeros_like(tensor))), name
    units = json.loads((tmp_path / "run/run.json").read_text())["units"]
    states = {u["name"]: u["state"] for u in units}
    assert {states["block0.q"], states["block0.experts"]} == {FROZEN_PREFIX}
    assert (states["block1.q"], states["block1.shared_expert"]) == (LORA, LORA)
    assert (states["block1.experts"], states["block1.router"], states["embedding"]) == (FROZEN_BASE,) * 3
    assert (states["block1.mlp_norm"], states["norm"]) == (FULL_RANK, FULL_RANK)
    live = {name: p for name, p in _trainable(recipe).items()}
    assert sum(u["trainable"] for u in units) == sum(p.numel() for p in live.values())
    assert len(units) == len(model_units(recipe.model)) == 1 + 2 * 9 + 2
    from ebd2n.report.dashboard import write_dashboard

    page = write_dashboard(tmp_path / "run").read_text()
    record = json.loads((tmp_path / "run/run.json").read_text())["model"]
    assert record["config_sha256"] in page and record["weights_sha256"] in page
    assert all(state in page for state in (FROZEN_PREFIX, FROZEN_BASE, LORA, FULL_RANK))


def _trainable(recipe) -> dict:
    from ebd2n.train.weights import fine_tuning_model, initial_model

    model = fine_tuning_model(recipe, initial_model(recipe))
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def test_gpt_paths_never_import_transformers(demo_cache: Path, tmp_path: Path) -> None:
    code = (
        "import sys, ebd2n.cli\n"
        "from ebd2n.config import load_recipe\nfrom ebd2n.train import train\n"
        f"r = load_recipe('demo', ['data.cache_dir={demo_cache}', 'runtime.output_dir={tmp_path / 'run'}', "
        "'training.max_tokens=2048', 'training.epoch_tokens=1024', 'evaluation.subset_blocks=4'])\n"
        "train(r, progress=False)\nprint('transformers' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert result.stdout.strip() == "False"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ebd2n.cli", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )


@pytest.mark.parametrize(
    ("family", "targets"),
    [
        ("qwen2", ["q", "v", "gate", "up", "down"]),
        ("qwen2_moe", ["q", "v", "gate", "up", "down"]),
        ("qwen2_moe", ["q", "k", "experts"]),
    ],
    ids=["qwen2", "qwen2_moe", "qwen2_moe-experts"],
)
def test_exported_merged_model_loads_in_transformers_with_our_logits(
    hf_models: dict[str, Path], demo_cache: Path, tmp_path: Path, family: str, targets: list[str]
) -> None:
    from transformers import AutoModelForCausalLM

    from ebd2n.export import export_run
    from ebd2n.train.weights import evaluation_state_dict, model_with_weights

    lora = {"rank": 4, "targets": targets, "train_norms": True}
    recipe = _recipe(hf_models[family], demo_cache, tmp_path / "run", freeze_prefix=1, lora=lora)
    train(recipe, progress=False)
    out = export_run(tmp_path / "run", tmp_path / "exported")
    assert {"config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    theirs = AutoModelForCausalLM.from_pretrained(out).eval()
    state = load_checkpoint(tmp_path / "run/final.pt")["engine"]
    ours = model_with_weights(recipe, evaluation_state_dict(recipe, state)).eval()
    trained = _with_adapters(recipe, state)
    idx = torch.randint(0, DEMO_VOCAB, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(theirs(idx).logits, ours(idx)[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(theirs(idx).logits, trained(idx)[0], rtol=1e-4, atol=1e-4)
        assert not torch.allclose(theirs(idx).logits, load_model(hf_models[family])(idx)[0], atol=1e-4)  # fine-tuned
    if "experts" in targets:  # the routed experts trained through their adapters, their bases did not
        initial, final = load_model(hf_models[family]).state_dict(), state["model"]
        assert torch.equal(
            final["model.layers.1.mlp.experts.base.gate_up_proj"], initial["model.layers.1.mlp.experts.gate_up_proj"]
        )
        assert not torch.equal(
            final["model.layers.1.mlp.experts.lora_down_b"],
            torch.zeros_like(final["model.layers.1.mlp.experts.lora_down_b"]),
        )
        units = {u["name"]: u for u in json.loads((tmp_path / "run/run.json").read_text())["units"]}
        live = _trainable(recipe)
        assert units["block1.experts"]["state"] == LORA
        assert units["block1.experts"]["trainable"] == sum(p.numel() for n, p in live.items() if ".experts." in n)
        assert sum(u["trainable"] for u in units.values()) == sum(p.numel() for p in live.values())
    refused = _cli("export", str(tmp_path / "run"), str(out))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "already exists" in refused.stderr


def _with_adapters(recipe, state):
    """The trained model with its adapters (not merged), as the engine held it."""
    from ebd2n.train.weights import fine_tuning_model, initial_model

    model = fine_tuning_model(recipe, initial_model(recipe))
    model.load_state_dict(state["model"])
    return model.eval()


def test_hf_init_cli_writes_a_model_of_the_tokenizers_vocabulary(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(77)}, unk_token="w0"))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    result = _cli("hf-init", "qwen2_moe", str(tmp_path / "m"), "--tokenizer", str(tmp_path / "tokenizer.json"))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "m/config.json").read_text())["vocab_size"] == 77
    assert (tmp_path / "m/tokenizer.json").read_bytes() == (tmp_path / "tokenizer.json").read_bytes()
    again = _cli("hf-init", "llama", str(tmp_path / "m"))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already exists" in again.stderr
    assert json.loads((tmp_path / "m/config.json").read_text())["model_type"] == "qwen2_moe"  # left as it was


def test_a_published_model_directory_is_on_disk_before_it_appears(tmp_path: Path, monkeypatch) -> None:
    import os

    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    init_model("llama", tmp_path / "m", vocab_size=64)
    staged = [str(tmp_path / ".m.partial" / path.relative_to(tmp_path / "m")) for path in (tmp_path / "m").rglob("*")]
    assert staged and set(staged) <= set(synced)  # every file save_pretrained wrote, before the rename
    assert str(tmp_path / ".m.partial") in synced and synced[-1] == str(tmp_path)  # the staging dir, then the rename


def test_publishing_never_replaces_a_directory_that_appeared_meanwhile(tmp_path: Path) -> None:
    from ebd2n.model.hf import _publish

    def write_while_another_process_creates_it(staging: Path) -> None:
        staging.mkdir()
        (staging / "config.json").write_text("{}")
        (tmp_path / "m").mkdir()  # empty: a plain rename would replace it

    with pytest.raises(UserError, match=r"OUT_DIR .*/m: appeared while") as refused:
        _publish(tmp_path / "m", write_while_another_process_creates_it)
    assert "\n" not in str(refused.value)
    assert list((tmp_path / "m").iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["m"]


# --- a 2-stage gloo pipeline of the tiny MoE against one process ---

PIPELINE = ("parallel.pipeline_stages=2", "parallel.pipeline_depth=3", "parallel.schedule=1f1b")
ROWS = (8, 5)
"""Sequences of the compared steps: a full one and a shortened one (uneven pipeline rounds)."""


def _pipeline_recipe(model_dir: Path, freeze: int, *layout: str):
    lora = {"rank": 4, "train_norms": True}
    return _recipe(model_dir, Path("unused-cache"), Path("unused-run"), *layout, freeze_prefix=freeze, lora=lora)


def _pipeline_worker(rank: int, port: int, model_dir: Path, freeze: int, out_dir: Path) -> None:
    import os

    import torch.distributed as dist

    from ebd2n.parallel import distributed
    from ebd2n.train.budget import budget_of
    from ebd2n.train.engine import build_engine

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    recipe = _pipeline_recipe(model_dir, freeze, *PIPELINE)
    context = distributed.init(recipe)
    torch.manual_seed(recipe.runtime.seed)
    engine = build_engine(recipe, budget_of(recipe), context.device, context)
    held = {
        "parameters": sum(p.numel() for p in engine.model.parameters()),
        "meta": sum(p.is_meta for p in engine.model.parameters()),
        "units": context.placement.stages[rank],
    }
    results = fixed_steps(engine, recipe, ROWS)
    state = engine.state_dict()
    torch.save({"results": results, "model": state.get("model"), "held": held}, out_dir / f"rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("freeze", [1, 2], ids=["lora-on-layer-1", "first-stage-all-frozen"])
def test_two_stage_gloo_pipeline_of_the_moe_matches_one_process(
    hf_models: dict[str, Path], tmp_path: Path, freeze: int
) -> None:
    import socket

    import torch.multiprocessing as mp

    from ebd2n.train.budget import budget_of
    from ebd2n.train.engine import build_engine

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_pipeline_worker, args=(port, hf_models["qwen2_moe"], freeze, tmp_path), nprocs=2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    recipe = _pipeline_recipe(hf_models["qwen2_moe"], freeze)
    torch.manual_seed(recipe.runtime.seed)
    engine = build_engine(recipe, budget_of(recipe), torch.device("cpu"))
    expected = fixed_steps(engine, recipe, ROWS)
    keys = ("loss", "accuracy", "grad_norm")
    assert [r[k] for r in ranks[0]["results"] for k in keys] == pytest.approx(
        [r[k] for r in expected for k in keys], rel=1e-5
    )
    torch.testing.assert_close(ranks[0]["model"], engine.state_dict()["model"], rtol=0, atol=1e-5)
    whole = sum(p.numel() for p in engine.model.parameters())
    held = [rank["held"] for rank in ranks]
    assert all(h["meta"] == 0 and 0 < h["parameters"] < whole for h in held)  # a stage never holds the whole model
    assert sum(h["parameters"] for h in held) == whole
    assert held[0]["units"][0] == "embedding" and held[1]["units"][-1] == "head"


def test_model_absent_from_the_local_cache_is_one_line_naming_the_key(tmp_path: Path) -> None:
    overrides = ["model.source=huggingface", "model.name=org/absent", "model.revision=main", "model.vocab_size=null"]
    result = subprocess.run(
        [sys.executable, "-m", "ebd2n.cli", "recipe", "demo", *[f"--set={o}" for o in overrides]],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HF_HUB_CACHE": str(tmp_path)},
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("ebd2n recipe: error: model.revision main: org/absent at this revision is not in")
    assert result.stderr.count("\n") == 1


def test_moe_fine_tune_on_the_sql_set_resumes_bitwise_and_validates_completions(tmp_path: Path) -> None:
    """The two halves together: the model's own tokenizer and chat template, prompts masked, LoRA."""
    from ebd2n.data import BlockReader, open_cache, prepare_cache
    from ebd2n.evaluate import validate_run
    from ebd2n.hf_init import tiny_hf_model

    model_dir = tiny_hf_model("qwen2_moe", tmp_path / "model", vocab_size=384)
    supervised = [
        "data.source=sql-synthetic",
        f"data.tokenizer={model_dir}",
        "data.supervised={format: chat}",
        "data.synthetic_train_bytes=60000",
        "data.synthetic_validation_bytes=8000",
        "model.context_length=128",
    ]
    lora = {"rank": 4, "targets": ["q", "v", "experts"], "train_norms": True}
    runs = {
        name: _recipe(model_dir, tmp_path / "cache", tmp_path / name, *supervised, freeze_prefix=1, lora=lora)
        for name in ("whole", "sliced")
    }
    recipe = runs["whole"]
    prepare_cache(recipe.data, recipe.model.vocab_size, progress=False, context_length=recipe.model.context_length)
    train(runs["whole"], progress=False)
    train(runs["sliced"], until_epoch=2, progress=False)
    train(runs["sliced"], resume=tmp_path / "sliced/checkpoints/epoch-2.pt", progress=False)
    assert_states_equal(
        load_checkpoint(tmp_path / "whole/final.pt")["engine"], load_checkpoint(tmp_path / "sliced/final.pt")["engine"]
    )
    assert comparable_metrics(tmp_path / "whole") == comparable_metrics(tmp_path / "sliced")
    results = validate_run(tmp_path / "whole")  # checks its target count against the cache's completion targets
    blocks = BlockReader(open_cache(tmp_path / "cache"), "validation", 129).num_blocks
    assert results["status"] == "complete" and 0 < results["targets"] < blocks * 128 / 2  # prompts and padding masked
