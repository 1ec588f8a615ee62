"""The two gossip rules of the packed mode (decentralized.mixing_version): 2 is the reference's
reciprocal pairs, held exactly (CPU, FP32) to the reference's own definition (tiny-llm's
`PackedLlama.mix_`, restated below as its source writes it: one flat arena of every parameter),
for K = 2, 4, 8, several steps, ring and exponential (complete: the same rule, its mean summed in
the arena's order, to FP32 rounding), with adaptive consensus's gamma,
and through the packed engine's AWC and ATC orders; 1 stays the published benchmark's directed
shift, the default, with recipes and identities as before."""

from __future__ import annotations

import copy

import pytest
import torch

from ebd2n.config import dump_recipe, load_recipe, recipe_identity
from ebd2n.errors import UserError
from ebd2n.model.gossip import mix_, peers
from ebd2n.train.budget import budget_of
from ebd2n.train.engine import build_engine

TOPOLOGIES = ("one_peer_ring", "one_peer_exponential")


def reference_peers(topology: str, step: int, num_models: int) -> torch.Tensor:
    workers = torch.arange(num_models)
    if topology == "one_peer_ring":
        direction = torch.where((workers + step % 2) % 2 == 0, 1, -1)
        return (workers + direction) % num_models
    return workers ^ (1 << (step % (num_models - 1).bit_length()))


def reference_mix_(arena: torch.Tensor, topology: str, step: int, gamma: float = 1.0) -> None:
    """The reference's mix_ on its (K, n) arena."""
    if arena.size(0) == 1 or gamma == 0:
        return
    if topology == "complete":
        scratch = arena.mean(dim=0, keepdim=True).expand_as(arena).clone()
    else:
        scratch = torch.empty_like(arena)
        torch.index_select(arena, 0, reference_peers(topology, step, arena.size(0)), out=scratch)
        scratch.add_(arena).mul_(0.5)
    if gamma != 1:
        scratch.mul_(gamma).add_(arena, alpha=1 - gamma)
    arena.copy_(scratch)


@pytest.mark.parametrize("num_models", [2, 4, 8])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_version_2_pairs_are_the_references_and_reciprocal(topology: str, num_models: int) -> None:
    for step in range(6):
        chosen = peers(topology, step, num_models, version=2)
        assert chosen == reference_peers(topology, step, num_models).tolist()
        assert all(chosen[chosen[i]] == i != chosen[i] for i in range(num_models))


def test_version_2_ring_pairs_as_the_reference_documents() -> None:
    assert [peers("one_peer_ring", step, 4, version=2) for step in (0, 1)] == [[1, 0, 3, 2], [3, 2, 1, 0]]
    assert peers("one_peer_ring", 1, 6, version=2) == [5, 2, 1, 4, 3, 0]
    assert peers("one_peer_ring", 1, 4, version=1) == [3, 0, 1, 2]  # the directed shift: 0 -> 3, but 3 -> 2


@pytest.mark.parametrize("gamma", [1.0, 0.37, 0.0])
@pytest.mark.parametrize("num_models", [2, 4, 8])
@pytest.mark.parametrize("topology", [*TOPOLOGIES, "complete"])
def test_version_2_mixed_weights_equal_the_references_exactly(topology: str, num_models: int, gamma: float) -> None:
    generator = torch.Generator().manual_seed(num_models)
    tensors = [torch.randn((num_models, *shape), generator=generator) for shape in ((3, 5), (7,), (2, 2, 2))]
    arena = torch.cat([t.flatten(1) for t in tensors], dim=1)
    for step in range(5):
        mix_(tensors, topology, step, gamma, version=2)
        reference_mix_(arena, topology, step, gamma)
        ours = torch.cat([t.flatten(1) for t in tensors], dim=1)
        if topology == "complete":  # a mean's summation order follows the memory layout: the arena's is one
            torch.testing.assert_close(ours, arena, rtol=1e-6, atol=1e-7)
        else:
            assert torch.equal(ours, arena), step


def _packed(*overrides: str):
    return load_recipe(
        "demo",
        [
            "decentralized.num_models=4",
            "decentralized.mixing_version=2",
            "training.max_tokens=16384",
            "training.epoch_tokens=4096",
            "runtime.compile=false",
            *overrides,
        ],
    )


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("scheme", ["awc", "atc"])
def test_a_packed_4_engine_mixes_as_the_reference_at_every_step(topology: str, scheme: str) -> None:
    """The same weights and batches: the engine's update equals the reference's order (awc: clip,
    mix, AdamW step; atc: clip, step, mix) with its mix, every step, bitwise."""
    recipe = _packed(f"decentralized.topology={topology}", f"decentralized.scheme={scheme}")
    torch.manual_seed(0)
    engine = build_engine(recipe, budget_of(recipe), torch.device("cpu"), None)
    generator = torch.Generator().manual_seed(1)
    for step in range(4):
        params = [p for p in engine.model.parameters() if p.requires_grad]
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator) * 1e-2
        twin = copy.deepcopy(engine)
        twin_params = [p for p in twin.model.parameters() if p.requires_grad]
        for ours, theirs in zip(params, twin_params, strict=True):  # a deep copy leaves a Parameter's grad out
            theirs.grad = ours.grad.clone()
        engine._apply(params, gamma=1.0)
        arena = torch.cat([p.data.flatten(1) for p in twin_params], dim=1)
        if scheme == "atc":
            twin.optimizer.step()
            arena = torch.cat([p.data.flatten(1) for p in twin_params], dim=1)
        reference_mix_(arena, topology, step)
        sizes = [p[0].numel() for p in twin_params]
        for p, part in zip(twin_params, arena.split(sizes, dim=1), strict=True):
            p.data.copy_(part.view_as(p))
        if scheme == "awc":
            twin.optimizer.step()
        for ours, theirs in zip(params, twin_params, strict=True):
            assert torch.equal(ours.data, theirs.data), (scheme, topology, step)
        engine.optimizer.zero_grad(set_to_none=True)


def test_version_1_is_the_default_and_leaves_recipes_and_identities_as_they_were() -> None:
    packed = load_recipe("demo", ["decentralized.num_models=4"])
    explicit = load_recipe("demo", ["decentralized.num_models=4", "decentralized.mixing_version=1"])
    assert packed.decentralized.mixing_version == 1 and "mixing_version" not in dump_recipe(packed)
    assert recipe_identity(packed, "cache") == recipe_identity(explicit, "cache")
    assert recipe_identity(_packed(), "cache") != recipe_identity(
        load_recipe("demo", ["decentralized.num_models=4"]), "cache"
    )


def test_version_2_refuses_an_odd_ring_in_one_line() -> None:
    with pytest.raises(
        UserError, match="one_peer_ring with mixing_version 2 pairs the models: num_models must be even, got 3"
    ) as error:
        load_recipe("demo", ["decentralized.num_models=3", "decentralized.mixing_version=2"])
    assert "\n" not in str(error.value)
    assert load_recipe("demo", ["decentralized.num_models=3"]).decentralized.mixing_version == 1


@pytest.mark.parametrize(("version", "words"), [(1, "a directed shift"), (2, "reciprocal pairs")])
def test_the_run_dashboard_names_the_gossip_rule(version: int, words: str) -> None:
    from ebd2n.config import load_recipe
    from ebd2n.report.dashboard_settings import settings_groups

    recipe = load_recipe("demo", ["decentralized.num_models=4", f"decentralized.mixing_version={version}"])
    numerics = {"dtype": "float32", "compile": False, "deterministic": True}
    rows = dict(dict(settings_groups(recipe, {"numerics": numerics}))["Decentralized"])
    assert words in rows["Gossip rule"]
