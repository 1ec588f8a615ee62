"""Packed trials (ebd2n.train.trial_engine): K runs of a sweep as one packed model. Each member
against its own solo run (the real SynchronousEngine, the demo model, real cached data): the same
initial weights bitwise, the same per-step losses and weights within the rounding of batched kernels,
checkpoint state in the solo layout (either resumes from the other), and a member that skips or
leaves does not move while the others train on."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from ebd2n.config import load_recipe
from ebd2n.data import BlockReader, open_verified_cache
from ebd2n.train.budget import budget_of
from ebd2n.train.engine import SynchronousEngine
from ebd2n.train.pack_rules import pack_refusal
from ebd2n.train.schedule import learning_rate
from ebd2n.train.state import DataPosition
from ebd2n.train.trial_engine import TrialPack

MEMBERS = [  # learning rate, beta2, seed, and every other per-member optimizer setting: a sweep's points
    ("1e-3", "0.95", 1, ["optimizer.beta1=0.8", "optimizer.eps=1e-6", "optimizer.weight_decay=0.0"]),
    ("3e-3", "0.99", 2, ["optimizer.grad_clip=0.05", "optimizer.warmup_fraction=0.2"]),
    ("1e-2", "0.999", 3, ["optimizer.min_lr_ratio=0.5", "optimizer.weight_decay=0.3"]),
]
STEPS = 6
LOSS_TOLERANCE = 2e-4
"""Relative: a member's per-step loss against its solo run's (FP32; batched vs per-model kernels)."""
WEIGHT_TOLERANCE = 2e-4
"""Absolute, on every weight after STEPS steps."""


def _recipes(cache: Path, tmp_path: Path, members=MEMBERS, *extra: str):
    return [
        load_recipe(
            "demo",
            [
                f"data.cache_dir={cache}",
                f"runtime.output_dir={tmp_path / f'run{index}'}",
                "training.max_tokens=16384",
                "training.epoch_tokens=4096",
                "runtime.amp=false",
                f"optimizer.lr={lr}",
                f"optimizer.beta2={beta2}",
                f"runtime.seed={seed}",
                *own,
                *extra,
            ],
        )
        for index, (lr, beta2, seed, own) in enumerate(members)
    ]


def _solo(recipe) -> SynchronousEngine:
    torch.manual_seed(recipe.runtime.seed)
    return SynchronousEngine(recipe, budget_of(recipe), torch.device("cpu"))


def _data(recipe) -> DataPosition:
    cache = open_verified_cache(recipe.data.cache_dir, recipe.model.vocab_size)
    reader = BlockReader(cache, "train", recipe.model.context_length + 1)
    return DataPosition(reader, budget_of(recipe), recipe.runtime.seed, torch.device("cpu"))


def _lr(recipe, step: int) -> float:
    budget = budget_of(recipe)
    return learning_rate(budget.tokens_after(step + 1), budget.total_tokens, recipe.optimizer)


def _train(pack: TrialPack, recipes, steps: int, leaving: dict[int, int] | None = None) -> list[list]:
    """Per member, the losses of `steps` pack steps; member i leaves before step leaving[i]."""
    data = [_data(recipe) for recipe in recipes]
    losses = [[] for _ in recipes]
    for step in range(steps):
        here = [step < (leaving or {}).get(i, steps) for i in range(len(recipes))]
        batches = [d.next_batch() if go else None for d, go in zip(data, here, strict=True)]
        results = pack.train_step(batches, [_lr(recipe, step) for recipe in recipes])
        for i, result in enumerate(results):
            if result is not None:
                losses[i].append(result.loss)
    return losses


def _solo_losses(engine: SynchronousEngine, recipe, steps: int) -> list[float]:
    data = _data(recipe)
    return [engine.train_step(data.next_batch(), _lr(recipe, step)).loss for step in range(steps)]


def _relative(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) > 0
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def _max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[name] - b[name]).abs().max()) for name in a)


@pytest.fixture(scope="module")
def trained(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory):
    recipes = _recipes(demo_cache, tmp_path_factory.mktemp("pack"))
    pack = TrialPack(recipes, budget_of(recipes[0]), torch.device("cpu"))
    initial = [member.state_dict() for member in pack.members]
    losses = _train(pack, recipes, STEPS)
    solos = [_solo(recipe) for recipe in recipes]
    solo_initial = [copy.deepcopy(engine.state_dict()) for engine in solos]  # the live tensors train on
    solo_losses = [_solo_losses(engine, recipe, STEPS) for engine, recipe in zip(solos, recipes, strict=True)]
    return recipes, pack, initial, losses, solos, solo_initial, solo_losses


def test_each_member_starts_from_its_solo_runs_initial_weights(trained) -> None:
    _, _, initial, _, _, solo_initial, _ = trained
    for member, solo in zip(initial, solo_initial, strict=True):
        assert member["model"].keys() == solo["model"].keys()
        assert [name for name in solo["model"] if not torch.equal(member["model"][name], solo["model"][name])] == []


def test_each_members_losses_follow_its_solo_run(trained) -> None:
    _, _, _, losses, _, _, solo_losses = trained
    worst = max(
        abs(a - b) / abs(b)
        for member, solo in zip(losses, solo_losses, strict=True)
        for a, b in zip(member, solo, strict=True)
    )
    distinct = len({round(member[-1], 3) for member in losses})
    assert (len(losses[0]), worst < LOSS_TOLERANCE, distinct) == (STEPS, True, len(MEMBERS))


def test_each_members_weights_and_moments_follow_its_solo_run(trained) -> None:
    _, pack, _, _, solos, _, _ = trained
    for member, solo in zip(pack.members, solos, strict=True):
        mine, theirs = member.state_dict(), solo.state_dict()
        assert _max_difference(mine["model"], theirs["model"]) < WEIGHT_TOLERANCE
        assert mine["optimizer"]["param_groups"] == theirs["optimizer"]["param_groups"]
        assert mine["optimizer"]["state"].keys() == theirs["optimizer"]["state"].keys()
        for index, entry in theirs["optimizer"]["state"].items():
            assert torch.equal(mine["optimizer"]["state"][index]["step"], entry["step"])
            for key in ("exp_avg", "exp_avg_sq"):
                assert float((mine["optimizer"]["state"][index][key] - entry[key]).abs().max()) < WEIGHT_TOLERANCE


def test_a_member_resumes_from_its_solo_runs_state_and_back(trained, demo_cache: Path, tmp_path: Path) -> None:
    """A solo run's state loaded into a pack's member and saved again is the same state bitwise."""
    recipes, _, _, _, solos, _, _ = trained
    pack = TrialPack(_recipes(demo_cache, tmp_path), budget_of(recipes[0]), torch.device("cpu"))
    for member, solo in zip(pack.members, solos, strict=True):
        member.load_state_dict(solo.state_dict())
    for member, solo in zip(pack.members, solos, strict=True):
        saved, theirs = member.state_dict(), solo.state_dict()
        assert _max_difference(saved["model"], theirs["model"]) == 0.0
        assert saved["optimizer"]["param_groups"] == theirs["optimizer"]["param_groups"]
        for index, entry in theirs["optimizer"]["state"].items():
            assert all(torch.equal(saved["optimizer"]["state"][index][key], entry[key]) for key in entry)


def test_a_member_that_leaves_keeps_its_state_while_the_others_follow_their_solo_runs(
    demo_cache: Path, tmp_path: Path
) -> None:
    """Member 1 leaves after 2 steps: it stays where it was; members 0 and 2 (stepped through the
    path that picks the members present) go on as their solo runs do."""
    recipes = _recipes(demo_cache, tmp_path)
    pack = TrialPack(recipes, budget_of(recipes[0]), torch.device("cpu"))
    losses = _train(pack, recipes, 4, leaving={1: 2})
    solos = [_solo(recipe) for recipe in recipes]
    steps = [4, 2, 4]
    solo_losses = [_solo_losses(engine, recipe, n) for engine, recipe, n in zip(solos, recipes, steps, strict=True)]
    worst = max(_relative(member, solo) for member, solo in zip(losses, solo_losses, strict=True))
    weights = [
        _max_difference(member.state_dict()["model"], solo.state_dict()["model"])
        for member, solo in zip(pack.members, solos, strict=True)
    ]
    assert ([len(member) for member in losses], pack.optimizer.steps) == (steps, steps)
    assert worst < LOSS_TOLERANCE and max(weights) < WEIGHT_TOLERANCE


def test_a_non_finite_gradient_skips_that_member_alone(demo_cache: Path, tmp_path: Path) -> None:
    recipes = _recipes(demo_cache, tmp_path)
    pack = TrialPack(recipes, budget_of(recipes[0]), torch.device("cpu"))
    before = [member.state_dict()["model"] for member in pack.members]
    poisoned = torch.ones(len(recipes), 1, 1)
    poisoned[2] = float("nan")
    handle = pack.model.embed.register_hook(lambda grad: grad * poisoned)
    batches = [_data(recipe).next_batch() for recipe in recipes]
    results = pack.train_step(batches, [_lr(recipe, 0) for recipe in recipes])
    handle.remove()
    moved = [
        _max_difference(b, member.state_dict()["model"]) > 0 for b, member in zip(before, pack.members, strict=True)
    ]
    assert ([r.skipped for r in results], moved, pack.optimizer.steps) == (
        [False, False, True],
        [True, True, False],
        [1, 1, 0],
    )


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (("model.width=128",), "model.width"),
        (("training.batch_tokens=2048",), "training.batch_tokens"),
        (("optimizer.accum_iter=2",), "accum_iter"),
        (("decentralized.num_models=2",), "decentralized"),
        (("parallel.data_parallel=2",), "parallel.data_parallel"),
    ],
)
def test_runs_that_differ_beyond_their_optimizer_and_seed_do_not_pack(
    demo_cache: Path, tmp_path: Path, extra, named
) -> None:
    first = _recipes(demo_cache, tmp_path, MEMBERS[:1])
    other = _recipes(demo_cache, tmp_path / "other", MEMBERS[1:2], *extra)
    assert named in (pack_refusal([*first, *other]) or "") and pack_refusal(_recipes(demo_cache, tmp_path)) is None
