"""The audit of a run's outcome: a run recorded as diverged must have diverged, and one recorded as
finished must not have.

A divergence is claimed in three places the trainer writes together: metrics.jsonl's last record,
the `progress` of final.pt, and results.json (`status: diverged`). The evidence is the run's own
step records: the rules of its recipe (ebd2n.train.divergence), replayed over them, must fire at
the recorded step for the recorded rule, and no step may follow it. So a converged run relabelled
as diverged (to hide it from selection) and a diverged run relabelled as finished are both named.
That the frozen trainer wrote these records is `check_trainer`'s (results.json's source hash).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ebd2n.audit.checks import Check
from ebd2n.audit.run_memo import remembered
from ebd2n.audit.runs import RunView
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import FINAL, METRICS, RESULTS_JSON
from ebd2n.outcomes import Outcome
from ebd2n.train.budget import budget_of
from ebd2n.train.divergence import Rules, replay
from ebd2n.train.records import DIVERGENCE, Divergence, Metrics, RecordType


def check_outcomes(
    views: Iterable[RunView], metadata: dict[tuple[str, str], dict[str, Any] | None], memory: HashMemory
) -> Check:
    """Every run that claims an outcome anywhere (results.json, or a divergence in metrics.jsonl)
    shows it in its step records, as the rules of its recipe decide (`metadata`: what each
    checkpoint records, ebd2n.audit.positions)."""
    check = Check("every recorded outcome (finished or diverged) is what the run's own steps show")
    for view in views:
        if view.recipe is None or METRICS not in view.hashes:
            continue  # the files and recipe checks name these
        examined, problems = remembered(view, memory, check.name, lambda view=view: _judge(view, metadata))
        check.examined += examined
        check.violations += [f"{view.id}: {problem}" for problem in problems]
    return check


def _judge(view: RunView, metadata: dict[tuple[str, str], dict[str, Any] | None]) -> tuple[bool, list[str]]:
    metrics = Metrics(view.paths.metrics)
    claims = _claims(view, metrics, metadata.get((view.id, FINAL)))
    if metrics.problem or not (view.finished or claims):
        return False, []  # unreadable metrics: the history check names it; not finished and no claim: nothing claimed
    return True, list(_problems(view, metrics, claims))


def _claims(view: RunView, metrics: Metrics, final: dict[str, Any] | None) -> dict[str, Divergence | None]:
    """Where the run says it diverged, and what each place says (None: a claim of no readable decision)."""
    claims: dict[str, Divergence | None] = {}
    if metrics.divergence_is_last:
        claims[METRICS] = Divergence.of(metrics.records[-1])
    elif metrics.of_type(RecordType.DIVERGED):
        claims[METRICS] = None  # a decision that is not the last record: steps followed it
    results = view.results or {}
    if results.get("status") == Outcome.DIVERGED:
        claims[RESULTS_JSON] = Divergence.of(results.get(DIVERGENCE))
    progress = (final or {}).get("progress")  # final.pt's metadata; unreadable: the final check names it
    diverged = progress.get(DIVERGENCE) if isinstance(progress, dict) else None
    if isinstance(diverged, dict):
        claims[FINAL] = Divergence.of(diverged)
    return claims


def _problems(view: RunView, metrics: Metrics, claims: dict[str, Divergence | None]) -> Iterable[str]:
    budget = budget_of(view.recipe)
    steps = metrics.steps
    fired = replay(Rules.of(view.recipe, budget), steps, budget.tokens_after)
    places = ", ".join(sorted(claims))
    if fired is None:
        if claims:
            yield (
                f"recorded as diverged ({places}), but no divergence rule fires over its {METRICS} steps: "
                "a converged run relabelled as diverged"
            )
        return
    step, rule = fired
    if not claims or (view.finished and RESULTS_JSON not in claims):
        status = (view.results or {}).get("status", "not validated")
        yield (
            f"its {METRICS} steps diverge at step {step} (rule {rule}), but {RESULTS_JSON} says {status}"
            f"{'' if not claims else ' (diverged only in ' + places + ')'}: a diverged run relabelled as finished"
        )
        return
    for place in (METRICS, FINAL, RESULTS_JSON) if view.finished else (METRICS, FINAL):
        claim = claims.get(place)
        if claim is None:
            yield f"diverged at step {step} (rule {rule}), but {place} records no such decision as its last"
        elif (claim.step, claim.rule) != (step, rule):
            yield (
                f"{place} records divergence at step {claim.step} (rule {claim.rule}), "
                f"the rules fire at step {step} (rule {rule})"
            )
    if steps and steps[-1]["step"] != step:
        yield f"diverged at step {step} (rule {rule}), but it trained on to step {steps[-1]['step']}"
    decisions = [claim for claim in claims.values() if claim is not None]
    if any(claim != decisions[0] for claim in decisions):
        yield f"{', '.join(sorted(claims))} record different divergence decisions"
