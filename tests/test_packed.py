"""The packed K-replica model, gossip mixing and per-replica clipping."""

from __future__ import annotations

import pytest
import torch

from ebd2n.config import ModelConfig, count_parameters, load_recipe
from ebd2n.model import GPT, PackedGPT, clip_per_replica_, mix_, mixing_matrix, peer_offset
from ebd2n.model.packed import ReplicaCrossEntropy, ReplicaLinear

TOPOLOGIES = ["one_peer_ring", "one_peer_exponential", "complete"]


def tiny_config() -> ModelConfig:
    return ModelConfig(vocab_size=97, layers=2, width=32, heads=4, ffn_width=48, context_length=16)


def tokens(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 97, shape, generator=torch.Generator().manual_seed(seed))


def perturbed_packed(num_models: int) -> PackedGPT:
    """A packed model whose replicas differ (as after some local steps)."""
    torch.manual_seed(0)
    packed = PackedGPT(tiny_config(), num_models)
    with torch.no_grad():
        for p in packed.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return packed


def test_packed_k1_logits_equal_gpt() -> None:
    torch.manual_seed(0)
    model = GPT(tiny_config())
    packed = PackedGPT.from_model(model, 1)
    idx = tokens((1, 3, 16))
    result, _ = packed(idx)
    expected, _ = model(idx[0])
    torch.testing.assert_close(result[0], expected, rtol=0, atol=1e-5)


def test_packed_k1_loss_equals_gpt() -> None:
    torch.manual_seed(0)
    model = GPT(tiny_config())
    packed = PackedGPT.from_model(model, 1)
    idx, targets = tokens((1, 3, 16)), tokens((1, 3, 16), seed=1)
    _, result = packed(idx, targets)
    _, expected = model(idx[0], targets[0])
    torch.testing.assert_close(result[0], expected, rtol=0, atol=1e-5)


def test_packed_k1_gradients_equal_gpt() -> None:
    torch.manual_seed(0)
    model = GPT(tiny_config())
    packed = PackedGPT.from_model(model, 1)
    idx, targets = tokens((1, 3, 16)), tokens((1, 3, 16), seed=1)
    packed(idx, targets)[1].sum().backward()
    model(idx[0], targets[0])[1].backward()
    grads = {name: p.grad for name, p in packed.named_parameters()}
    for name, p in packed.named_parameters():
        p.data = grads[name]  # replica_state_dict of the gradients, in GPT naming
    result = packed.replica_state_dict(0)
    expected = {name: p.grad for name, p in model.named_parameters()} | {"head.weight": model.embed.weight.grad}
    torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-6)


def test_packed_constructor_matches_gpt_init() -> None:
    torch.manual_seed(5)
    expected = GPT(tiny_config()).state_dict()
    torch.manual_seed(5)
    result = PackedGPT(tiny_config(), 3).replica_state_dict(2)
    torch.testing.assert_close(result, expected, rtol=0, atol=0)


def test_packed_replica_equals_gpt_loaded_with_its_state() -> None:
    packed = perturbed_packed(4)
    idx, targets = tokens((4, 2, 16)), tokens((4, 2, 16), seed=1)
    logits, losses = packed(idx, targets)
    for i in range(4):
        model = GPT(tiny_config())
        model.load_state_dict(packed.replica_state_dict(i))
        expected_logits, expected_loss = model(idx[i], targets[i])
        torch.testing.assert_close(logits[i], expected_logits, rtol=0, atol=1e-5)
        torch.testing.assert_close(losses[i], expected_loss, rtol=0, atol=1e-5)


def test_packed_losses_ignore_minus_100_per_replica() -> None:
    packed = perturbed_packed(2)
    idx, targets = tokens((2, 1, 16)), tokens((2, 1, 16), seed=1)
    masked = targets.clone()
    masked[1, :, 4:] = -100
    logits, result = packed(idx, masked)
    expected = torch.nn.functional.cross_entropy(logits[1, 0, :4], targets[1, 0, :4])
    torch.testing.assert_close(result[1], expected)


def test_packed_wrong_number_of_replicas_raises() -> None:
    packed = PackedGPT(tiny_config(), 2)
    with pytest.raises(ValueError, match="3 replica slices.*num_models=2"):
        packed(tokens((3, 1, 16)))


def test_packed_load_replica_state_dict_round_trips() -> None:
    packed = perturbed_packed(3)
    state = packed.replica_state_dict(2)
    packed.load_replica_state_dict(0, state)
    result = packed.replica_state_dict(0)
    torch.testing.assert_close(result, state, rtol=0, atol=0)


def test_packed_average_state_dict_is_mean_of_replicas() -> None:
    packed = perturbed_packed(3)
    replicas = [packed.replica_state_dict(i) for i in range(3)]
    result = packed.average_state_dict()
    expected = {name: torch.stack([r[name] for r in replicas]).mean(dim=0) for name in replicas[0]}
    torch.testing.assert_close(result, expected)


def test_packed_consensus_distance_of_identical_replicas_is_zero() -> None:
    torch.manual_seed(0)
    result = PackedGPT(tiny_config(), 4).consensus_distance()
    assert result == 0.0


def test_packed_consensus_distance() -> None:
    packed = perturbed_packed(3)
    replicas = [packed.replica_state_dict(i) for i in range(3)]
    average = packed.average_state_dict()
    names = [n for n in average if n != "head.weight"]  # tied: counted once
    squared = sum(((r[n] - average[n]) ** 2).sum() for r in replicas for n in names) / 3
    result = packed.consensus_distance()
    assert result == pytest.approx(squared.sqrt().item(), rel=1e-5)


def test_packed_replica_param_groups_decay_matrices_only() -> None:
    packed = PackedGPT(tiny_config(), 2)
    groups = packed.replica_param_groups(0.1)
    result = sorted(tuple(p.shape) for p in groups[1]["params"])
    expected = [(2, 32)] * 5  # two norm gains per block and the final norm
    assert result == expected


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("num_models", [1, 2, 4, 8])
@pytest.mark.parametrize("step", [0, 1, 2, 5])
def test_mixing_matrix_doubly_stochastic(topology: str, num_models: int, step: int) -> None:
    w = mixing_matrix(topology, step, num_models)
    ones = torch.ones(num_models)
    result = torch.stack([w.sum(dim=0), w.sum(dim=1)])
    expected = torch.stack([ones, ones])
    torch.testing.assert_close(result, expected, rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    ("topology", "step", "num_models", "expected"),
    [
        ("one_peer_ring", 0, 5, 1),
        ("one_peer_ring", 1, 5, -1),
        ("one_peer_ring", 6, 5, 1),
        ("one_peer_exponential", 0, 8, 1),
        ("one_peer_exponential", 1, 8, 2),
        ("one_peer_exponential", 2, 8, 4),
        ("one_peer_exponential", 3, 8, 1),
        ("one_peer_exponential", 7, 2, 1),
    ],
)
def test_peer_offset(topology: str, step: int, num_models: int, expected: int) -> None:
    result = peer_offset(topology, step, num_models)
    assert result == expected


def test_mixing_matrix_ring_rows_average_with_right_neighbour_on_even_steps() -> None:
    result = mixing_matrix("one_peer_ring", 0, 3)
    expected = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]])
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("num_models", [2, 4, 8])
def test_mix_exponential_reaches_exact_average(num_models: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(num_models, 5, 3)
    expected = x.mean(dim=0, keepdim=True).expand_as(x)
    for step in range(num_models.bit_length() - 1):  # log2 K steps
        mix_([x], "one_peer_exponential", step)
    torch.testing.assert_close(x, expected, rtol=0, atol=1e-6)


MIXING_CASES = [
    (topology, num_models)
    for topology in TOPOLOGIES
    for num_models in (1, 2, 3, 4, 8)
    if not (topology == "one_peer_exponential" and num_models == 3)  # needs a power of two
]


@pytest.mark.parametrize(("topology", "num_models"), MIXING_CASES)
@pytest.mark.parametrize("step", [0, 1, 2])
def test_mix_equals_mixing_matrix(topology: str, num_models: int, step: int) -> None:
    torch.manual_seed(0)
    tensors = [torch.randn(num_models, 4, 3), torch.randn(num_models, 7)]
    w = mixing_matrix(topology, step, num_models)
    expected = [torch.einsum("ij,j...->i...", w, t) for t in tensors]
    mix_(tensors, topology, step)
    torch.testing.assert_close(tensors, expected)


def test_mix_preserves_the_average() -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 6)
    expected = x.mean(dim=0)
    mix_([x], "one_peer_ring", 1)
    torch.testing.assert_close(x.mean(dim=0), expected)


def test_mix_parameters_in_place() -> None:
    packed = perturbed_packed(2)
    expected = packed.average_state_dict()
    mix_(list(packed.parameters()), "one_peer_ring", 0)
    result = packed.replica_state_dict(1)
    torch.testing.assert_close(result, expected)


def test_gossip_exponential_needs_power_of_two() -> None:
    message = "one_peer_exponential needs decentralized.num_models to be a power of two, got 6"
    with pytest.raises(ValueError, match=message):
        mix_([torch.zeros(6, 2)], "one_peer_exponential", 0)


def test_peer_offset_complete_raises() -> None:
    with pytest.raises(ValueError, match="complete has no single peer"):
        peer_offset("complete", 0, 4)


def test_peer_offset_unknown_topology_raises() -> None:
    with pytest.raises(ValueError, match="unknown topology 'star'"):
        peer_offset("star", 0, 4)


def test_clip_per_replica_returns_pre_clip_norms() -> None:
    grads = [torch.tensor([[3.0, 0.0], [0.3, 0.0]]), torch.tensor([[4.0], [0.4]])]
    result = clip_per_replica_(grads, max_norm=1.0)
    expected = torch.tensor([5.0, 0.5])
    torch.testing.assert_close(result, expected)


def test_clip_per_replica_scales_like_clip_grad_norm() -> None:
    torch.manual_seed(0)
    stacked = [torch.randn(3, 4, 5), torch.randn(3, 7)]
    singles = [[t[i].clone() for t in stacked] for i in range(3)]
    clip_per_replica_(stacked, max_norm=1.0)
    for single in singles:
        torch.nn.utils.clip_grad_norm_(_as_params(single), max_norm=1.0)
    expected = [torch.stack([single[j] for single in singles]) for j in range(2)]
    torch.testing.assert_close(stacked, expected)


def test_clip_per_replica_independent_across_replicas() -> None:
    torch.manual_seed(0)
    grads = [torch.randn(2, 4, 5), torch.randn(2, 7)]
    changed = [g.clone() for g in grads]
    for g in changed:
        g[0].mul_(100.0)
    clip_per_replica_(grads, max_norm=1.0)
    clip_per_replica_(changed, max_norm=1.0)
    result = [g[1] for g in changed]
    expected = [g[1] for g in grads]
    torch.testing.assert_close(result, expected, rtol=0, atol=0)


def test_clip_per_replica_leaves_non_finite_replica_unscaled() -> None:
    grads = [torch.tensor([[float("inf"), 1.0], [3.0, 4.0]])]
    norms = clip_per_replica_(grads, max_norm=1.0)
    result = (norms[0].item(), grads[0][0, 1].item())
    expected = (float("inf"), 1.0)
    assert result == expected


def test_packed_training_step_keeps_replicas_independent_before_mixing() -> None:
    packed = perturbed_packed(2)
    optimizer = torch.optim.AdamW(packed.replica_param_groups(0.1), lr=1e-2, foreach=True)
    before = packed.replica_state_dict(1)
    idx, targets = tokens((2, 2, 16)), tokens((2, 2, 16), seed=1)
    targets[1] = -100  # replica 1 has no targets: no gradient
    _, losses = packed(idx, targets)
    losses[0].backward()
    optimizer.step()
    result = packed.replica_state_dict(1)
    torch.testing.assert_close(result, {n: t * (1 - 1e-2 * 0.1) if t.dim() == 2 else t for n, t in before.items()})


def _as_params(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Parameters whose .grad are the given tensors (clip_grad_norm_ clips .grad in place)."""
    params = []
    for t in tensors:
        p = torch.nn.Parameter(torch.empty_like(t))
        p.grad = t
        params.append(p)
    return params


def test_replica_cross_entropy_equals_f_cross_entropy() -> None:
    torch.manual_seed(0)
    logits = torch.randn(12, 7, dtype=torch.float64)
    targets = torch.randint(0, 7, (12,))
    targets[3] = -100
    result = ReplicaCrossEntropy.apply(logits, targets)
    expected = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    torch.testing.assert_close(result, expected)


def test_replica_cross_entropy_gradient_equals_f_cross_entropy() -> None:
    torch.manual_seed(0)
    logits = torch.randn(12, 7, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 7, (12,))
    targets[3] = -100
    weights = torch.rand(12, dtype=torch.float64)
    (ReplicaCrossEntropy.apply(logits, targets) * weights).sum().backward()
    result = logits.grad
    logits.grad = None
    (torch.nn.functional.cross_entropy(logits, targets, reduction="none") * weights).sum().backward()
    torch.testing.assert_close(result, logits.grad)


def test_replica_linear_gradcheck() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ReplicaLinear.apply, (x, w))


def test_packed_bf16_autocast_keeps_fp32_gradients() -> None:
    packed = perturbed_packed(2)
    idx, targets = tokens((2, 2, 16)), tokens((2, 2, 16), seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, losses = packed(idx, targets)
    losses.sum().backward()
    result = {(p.grad.dtype, bool(p.grad.isfinite().all())) for p in packed.parameters()}
    expected = {(torch.float32, True)}
    assert result == expected


def test_packed_parameter_count_is_k_times_gpt() -> None:
    cfg = load_recipe("20m").model
    with torch.device("meta"):
        packed = PackedGPT(cfg, 8)
    result = sum(p.numel() for p in packed.parameters())
    expected = 8 * count_parameters(cfg)
    assert result == expected
