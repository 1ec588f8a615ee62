"""The Llama-style GPT and its units."""

from __future__ import annotations

import math

import pytest
import torch

from ebd2n.config import ModelConfig, count_parameters, load_recipe
from ebd2n.config.recipe import presets_dir
from ebd2n.model import GPT, model_units, unit_of_parameter
from ebd2n.model.gpt import apply_rotary, rotary_tables

PRESETS = sorted(path.stem for path in presets_dir().glob("*.yaml"))


def tiny_config(**overrides) -> ModelConfig:
    fields = dict(vocab_size=97, layers=2, width=32, heads=4, ffn_width=48, context_length=16)
    return ModelConfig(**(fields | overrides))


def meta_parameter_count(cfg: ModelConfig) -> int:
    with torch.device("meta"):
        model = GPT(cfg)
    return sum(p.numel() for p in model.parameters())


def test_gpt_parameter_count_20m() -> None:
    result = meta_parameter_count(load_recipe("20m").model)
    expected = 20_403_520
    assert result == expected


@pytest.mark.parametrize("preset", PRESETS)
def test_gpt_parameter_count_matches_count_parameters(preset: str) -> None:
    cfg = load_recipe(preset).model
    result = meta_parameter_count(cfg)
    expected = count_parameters(cfg)
    assert result == expected


@pytest.mark.parametrize("preset", PRESETS)
def test_model_units_parameters_sum_to_count(preset: str) -> None:
    cfg = load_recipe(preset).model
    result = sum(unit.parameters for unit in model_units(cfg))
    expected = count_parameters(cfg)
    assert result == expected


def test_model_units_names_in_forward_order() -> None:
    result = [unit.name for unit in model_units(tiny_config())]
    expected = ["embedding", "block0.attention", "block0.mlp", "block1.attention", "block1.mlp", "head"]
    assert result == expected


def test_model_units_cover_every_parameter_once() -> None:
    cfg = tiny_config()
    units = model_units(cfg)
    with torch.device("meta"):
        names = [name for name, _ in GPT(cfg).named_parameters()]
    result = {name: [u.name for u in units if name.startswith(u.param_prefixes)] for name in names}
    expected = {name: [unit_of_parameter(name)] for name in names}
    assert result == expected


def test_model_units_parameters_match_the_built_model() -> None:
    cfg = tiny_config()
    with torch.device("meta"):
        model = GPT(cfg)
    result = {u.name: u.parameters for u in model_units(cfg)}
    expected = {u.name: 0 for u in model_units(cfg)}
    for name, p in model.named_parameters():
        expected[unit_of_parameter(name)] += p.numel()
    assert result == expected


def test_model_units_flops_per_token() -> None:
    cfg = tiny_config()
    d, f, v, t = cfg.width, cfg.ffn_width, cfg.vocab_size, cfg.context_length
    result = [u.flops_per_token for u in model_units(cfg)][:3] + [model_units(cfg)[-1].flops_per_token]
    expected = [0, 8 * d * d + 4 * t * d, 6 * d * f, 2 * v * d]
    assert result == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("embed.weight", "embedding"),
        ("head.weight", "embedding"),
        ("blocks.0.attn_norm.weight", "block0.attention"),
        ("blocks.3.attn.q.weight", "block3.attention"),
        ("blocks.12.mlp.down.weight", "block12.mlp"),
        ("blocks.1.mlp_norm.weight", "block1.mlp"),
        ("norm.weight", "head"),
        ("_orig_mod.blocks.2.mlp.up.weight", "block2.mlp"),
        ("module.blocks.0.attn.q.lora_a", "block0.attention"),
    ],
)
def test_unit_of_parameter(name: str, expected: str) -> None:
    result = unit_of_parameter(name)
    assert result == expected


def test_unit_of_parameter_unknown_raises() -> None:
    with pytest.raises(ValueError, match="'blocks.x.attn.q.weight' belongs to no unit"):
        unit_of_parameter("blocks.x.attn.q.weight")


def test_gpt_head_tied_to_embedding() -> None:
    model = GPT(tiny_config())
    result = model.head.weight.data_ptr()
    expected = model.embed.weight.data_ptr()
    assert result == expected


def test_gpt_init_reproducible_from_seed() -> None:
    torch.manual_seed(3)
    first = GPT(tiny_config()).state_dict()
    torch.manual_seed(3)
    second = GPT(tiny_config()).state_dict()
    result = all(torch.equal(first[name], second[name]) for name in first)
    assert result


def test_gpt_init_scales_residual_projections() -> None:
    cfg = tiny_config(width=128, heads=4, layers=8)
    torch.manual_seed(0)
    model = GPT(cfg)
    result = model.blocks[0].attn.o.weight.std().item()
    expected = cfg.init_std / math.sqrt(2 * cfg.layers)
    assert result == pytest.approx(expected, rel=0.05)


def test_gpt_causal() -> None:
    torch.manual_seed(0)
    model = GPT(tiny_config())
    idx = torch.randint(0, 97, (2, 16))
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 97
    with torch.no_grad():
        result, _ = model(changed)
        expected, _ = model(idx)
    torch.testing.assert_close(result[:, :9], expected[:, :9], rtol=0, atol=0)


def test_gpt_changing_a_token_changes_later_logits() -> None:
    torch.manual_seed(0)
    model = GPT(tiny_config())
    idx = torch.randint(0, 97, (1, 16))
    changed = idx.clone()
    changed[0, 9] = (changed[0, 9] + 1) % 97
    with torch.no_grad():
        result = (model(changed)[0][:, 9:] - model(idx)[0][:, 9:]).abs().amin(dim=-1).gt(0).all().item()
    assert result


def test_gpt_initial_loss_near_log_vocab() -> None:
    torch.manual_seed(0)
    cfg = tiny_config(vocab_size=512)
    model = GPT(cfg)
    idx = torch.randint(0, 512, (4, 16))
    with torch.no_grad():
        _, loss = model(idx, torch.randint(0, 512, (4, 16)))
    assert loss.item() == pytest.approx(math.log(512), abs=0.1)


def test_gpt_loss_ignores_minus_100() -> None:
    torch.manual_seed(0)
    model = GPT(tiny_config())
    idx = torch.randint(0, 97, (1, 16))
    targets = torch.randint(0, 97, (1, 16))
    masked = targets.clone()
    masked[0, 8:] = -100
    with torch.no_grad():
        logits, result = model(idx, masked)
        expected = torch.nn.functional.cross_entropy(logits[0, :8], targets[0, :8])
    torch.testing.assert_close(result, expected)


def test_gpt_sequence_longer_than_context_raises() -> None:
    model = GPT(tiny_config())
    with pytest.raises(ValueError, match="17 tokens exceeds model.context_length \\(16\\)"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_rotary_scores_depend_on_relative_position_only() -> None:
    head_dim, shift = 16, 5
    cos, sin = rotary_tables(head_dim, 32, 10000.0)
    torch.manual_seed(0)
    q, k = torch.randn(head_dim), torch.randn(head_dim)
    queries = apply_rotary(q.expand(32, head_dim), cos, sin)  # the same query at every position
    keys = apply_rotary(k.expand(32, head_dim), cos, sin)
    scores = queries @ keys.T  # scores[m, n] for query at m, key at n
    result = scores[shift:, shift:]
    expected = scores[: 32 - shift, : 32 - shift]
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)


def test_rotary_position_zero_is_identity() -> None:
    cos, sin = rotary_tables(8, 4, 10000.0)
    x = torch.randn(4, 8)
    result = apply_rotary(x, cos, sin)[0]
    expected = x[0]
    torch.testing.assert_close(result, expected)


def test_gpt_overfits_one_batch() -> None:
    torch.manual_seed(0)
    model = GPT(tiny_config())
    idx = torch.randint(0, 97, (4, 16))
    targets = torch.randint(0, 97, (4, 16))
    optimizer = torch.optim.AdamW(model.param_groups(0.0), lr=1e-2)
    _, first = model(idx, targets)
    for _ in range(30):
        optimizer.zero_grad()
        _, loss = model(idx, targets)
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.5 * first.item()


def test_gpt_param_groups_decay_matrices_only() -> None:
    model = GPT(tiny_config())
    groups = model.param_groups(0.1)
    result = (len(groups[0]["params"]), len(groups[1]["params"]))
    expected = (1 + 2 * 7, 2 * 2 + 1)  # embedding + 7 projections per block; 2 norms per block + final
    assert result == expected


def test_gpt_meta_model_materialises() -> None:
    cfg = tiny_config()
    torch.manual_seed(0)
    expected, _ = GPT(cfg)(torch.arange(16).view(1, 16))
    with torch.device("meta"):
        model = GPT(cfg)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    result, _ = model(torch.arange(16).view(1, 16))
    torch.testing.assert_close(result, expected)
