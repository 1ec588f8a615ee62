"""The seed-noise rule of successive halving: a point within the seeds' noise of a rung's best is
never dropped (tiny-llm's 0.000015-nat case), one its seeds show worse is; each point's rule is on
record; without the rule a decision is what it was."""

from __future__ import annotations

import pytest

from ebd2n.campaign.rung_decision import decide, decision_digest
from ebd2n.campaign.search import Bracket, Search, check_search, point_id, search_from_dict
from ebd2n.errors import UserError

SEEDS = (1, 2, 3)
POINTS = ((0.002, 0.95), (0.003, 0.95), (0.004, 0.95), (0.008, 0.95))
LOSSES = {  # per point, one loss per seed
    0.002: [3.56, 3.551, 3.559],  # worse than the best on every seed, by about 0.05
    0.003: [3.5, 3.5, 3.5],
    0.004: [3.49999, 3.49999, 3.500065],  # the reference's case: two of three seeds prefer it,
    0.008: [3.61, 3.62, 3.605],  # yet its mean is worse by 0.000015 nats
}


def _decision(seed_noise: float | None, keep: float = 0.25, seeds: tuple[int, ...] = SEEDS) -> dict:
    bracket = Bracket(None, "synchronous", POINTS, seeds)
    losses = {run.id: LOSSES[run.lr][seeds.index(run.seed)] for run in bracket.runs()}
    return decide(bracket, 1, list(POINTS), keep, losses, {}, seed_noise=seed_noise)


def test_seed_noise_reference_case_numbers() -> None:
    best, rival = LOSSES[0.003], LOSSES[0.004]
    assert sum(rival) / 3 - sum(best) / 3 == pytest.approx(0.000015, abs=1e-12)
    assert sum(r < b for r, b in zip(rival, best, strict=True)) == 2


def test_seed_noise_keeps_the_point_tiny_llm_pruned() -> None:
    by_rank = _decision(None)
    assert by_rank["promoted"] == [point_id(0.003, 0.95)]  # rank alone drops 0.004, as tiny-llm did
    decision = _decision(0.05)
    assert decision["promoted"] == decision["continuing"] == [point_id(0.003, 0.95), point_id(0.004, 0.95)]
    rules = {entry["lr"]: entry["seed_noise_rule"] for entry in decision["ranking"]}
    assert rules[0.003] == {"rule": "kept: rank", "difference": None, "p_value": None}
    assert rules[0.004]["rule"] == "kept: seed noise (paired t-test vs lr0.003-beta20.95)"
    assert rules[0.004]["difference"] == pytest.approx(0.000015, abs=1e-12) and rules[0.004]["p_value"] > 0.3
    for lr in (0.002, 0.008):
        assert rules[lr]["rule"] == "dropped: seed noise (paired t-test vs lr0.003-beta20.95)"
        assert rules[lr]["p_value"] < 0.05
    assert decision["seed_noise"] == 0.05 and decision["digest"] != by_rank["digest"]


def test_seed_noise_level_decides_how_sure_a_drop_must_be() -> None:
    """A point is dropped at a level above its p-value and kept at one below it."""
    (p_value,) = [entry["seed_noise_rule"]["p_value"] for entry in _decision(0.05)["ranking"] if entry["lr"] == 0.002]
    assert point_id(0.002, 0.95) in _decision(p_value * 0.9)["promoted"]
    assert point_id(0.002, 0.95) not in _decision(p_value * 1.1)["promoted"]


def test_seed_noise_with_one_seed_falls_back_to_rank() -> None:
    decision = _decision(0.05, seeds=(1,))
    assert decision["promoted"] == [point_id(0.004, 0.95)]  # seed 1 alone prefers 0.004
    assert {entry["seed_noise_rule"]["rule"] for entry in decision["ranking"][1:]} == {
        "dropped: rank (one seed: no noise to test against)"
    }


def test_seed_noise_absent_leaves_the_decision_as_before() -> None:
    decision = _decision(None)
    assert set(decision) == {
        "bracket",
        "epoch",
        "keep",
        "digest",
        "candidates",
        "ranking",
        "promoted",
        "carried",
        "continuing",
        "earlier",
        "drawn_from",
    }
    assert all(set(entry) == {"point", "lr", "beta2", "mean_loss", "losses"} for entry in decision["ranking"])
    runs = [run for entry in decision["ranking"] for run in entry["losses"]]
    assert decision["digest"] == decision_digest(runs, 0.25) != decision_digest(runs, 0.25, 0.05)


def test_seed_noise_search_section() -> None:
    search = search_from_dict({"method": "successive-halving", "keep": 0.5, "seed_noise": 0.05})
    assert search == Search("successive-halving", 0.5, None, 0.05)
    assert search_from_dict(search.record()) == search
    assert "seed_noise" not in search_from_dict({"method": "successive-halving", "keep": 0.5}).record()
    with pytest.raises(ValueError, match="search seed_noise 1.5: a test level alpha in"):
        search_from_dict({"method": "successive-halving", "seed_noise": 1.5})
    with pytest.raises(UserError, match="campaign.yaml: search.keep, search.rungs and search.seed_noise apply"):
        check_search(Search(seed_noise=0.05), {}, [], "campaign.yaml")


@pytest.mark.slow  # a halving campaign of its own, through Snakemake and the audit CLI
def test_seed_noise_campaign_decides_by_paired_tests_the_audit_recomputes(tmp_path) -> None:
    """test_search's tiny campaign (3 learning rates x 2 seeds, rungs 1 and 2, keep 0.34) with
    seed_noise 0.05: each rung's p-values are scipy's paired t-test (one-sided) on the runs'
    metrics.jsonl, the audit passes, and an edited rule in a decision fails it."""
    import json
    import math

    from scipy import stats
    from test_search import RAW, SEEDS, audit, run_id, subset_loss
    from workflow_support import copy_repo, snakemake, write_campaign

    from ebd2n.layout import named_campaign

    repo = copy_repo(tmp_path)
    snakemake(repo, "--configfile", write_campaign(repo, RAW | {"search": RAW["search"] | {"seed_noise": 0.05}}))
    search = repo / named_campaign("tiny").search / "synchronous"
    for epoch in (1, 2):
        (path,) = sorted(search.glob(f"rung-{epoch}-*.json"))
        decision = json.loads(path.read_text())
        best, by_rank = decision["ranking"][0]["lr"], math.ceil(0.34 * len(decision["ranking"]))
        assert {entry["seed_noise_rule"]["rule"] for entry in decision["ranking"][:by_rank]} == {"kept: rank"}
        for entry in decision["ranking"][by_rank:]:
            losses = [subset_loss(repo, run_id(entry["lr"], seed), epoch) for seed in SEEDS]
            against = [subset_loss(repo, run_id(best, seed), epoch) for seed in SEEDS]
            expected = stats.ttest_rel(losses, against, alternative="greater").pvalue
            assert entry["seed_noise_rule"]["p_value"] == pytest.approx(expected)
            assert (entry["point"] in decision["continuing"]) == (entry["seed_noise_rule"]["p_value"] > 0.05)
    assert audit(repo).returncode == 0
    decision = json.loads(path.read_text())
    decision["ranking"][-1]["seed_noise_rule"]["rule"] = "kept: rank"
    path.write_text(json.dumps(decision, indent=1) + "\n")
    failed = audit(repo)
    assert failed.returncode != 0 and "rung 2: ranking" in failed.stdout + failed.stderr, failed.stdout + failed.stderr
