"""The workflow's Python stays validation plus one-line delegation: `workflow/rules/common.smk` holds
its length, and each of its `get_<thing>(wildcards)` input functions is one call of the package's
WorkflowInputs (ebd2n.campaign.workflow), which answers from a job's wildcards without Snakemake."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from ebd2n.campaign.check import campaign_from_dict
from ebd2n.campaign.status import closing_line
from ebd2n.campaign.workflow import WorkflowInputs, WorkflowPlan

ROOT = Path(__file__).resolve().parents[1]
COMMON = ROOT / "workflow" / "rules" / "common.smk"
RUN = "synchronous-lr0.001-beta20.95-seed42"
TINY = {
    "campaign": "tiny",
    "recipe": "demo",
    "data": {"cache_dir": "results/caches/tiny"},
    "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.001]}, "beta2": [0.95]},
    "seeds": [42],
    "epochs_per_slice": 1,
}


def input_functions(text: str) -> dict[str, ast.FunctionDef]:
    """The top-level `def get_...` of a Snakemake file, each parsed on its own: a block runs from its
    decorators or `def` to the next line that starts in column 0 (a Snakemake directive such as
    `onstart:` is never inside one)."""
    blocks = re.findall(r"^((?:@.*\n)*def get_\w+\(.*\n(?:(?:[ \t]+.*)?\n)*)", text, flags=re.MULTILINE)
    functions = [ast.parse(block).body[0] for block in blocks]
    return {function.name: function for function in functions}


def delegates(function: ast.FunctionDef) -> bool:
    """Its body, docstring aside, is one `return <object>.<method>(<its own parameters>)`."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    parameters = {argument.arg for argument in function.args.args}
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(call := body[0].value, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and all(isinstance(argument, ast.Name) and argument.id in parameters for argument in call.args)
        and not call.keywords
    )


def marked(path: str) -> tuple[str, str]:
    """A stand-in for Snakemake's ancient(): the path, marked."""
    return ("ancient", path)


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkflowInputs:
    """The tiny campaign's inputs (one run, two slices of one epoch), ancient() as `marked`."""
    monkeypatch.chdir(tmp_path)
    return WorkflowInputs(WorkflowPlan(campaign_from_dict(TINY)), read=None, ancient=marked, error=LookupError)


def test_common_smk_stays_within_200_lines() -> None:
    result = len(COMMON.read_text().splitlines())
    assert result <= 200, f"{COMMON.name} has {result} lines: move the logic into ebd2n.campaign.workflow"


def test_common_smk_every_input_function_is_one_delegating_call() -> None:
    functions = input_functions(COMMON.read_text())
    result = sorted(name for name, function in functions.items() if not delegates(function))
    assert result == []


def test_common_smk_defines_every_input_function_the_rules_name() -> None:
    named = {
        name
        for path in [ROOT / "workflow" / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
        for name in re.findall(r"\bget_\w+", path.read_text())
    }
    result = sorted(named - set(input_functions(COMMON.read_text())))
    assert result == []


def test_workflow_inputs_previous_slice_is_ancient_and_none_before_the_first(inputs: WorkflowInputs) -> None:
    result = (
        inputs.previous_slice(SimpleNamespace(run=RUN, epoch="1")),
        [(mark, Path(path).name) for mark, path in inputs.previous_slice(SimpleNamespace(run=RUN))],
    )
    assert result == ([], [("ancient", "epoch-1.json")])


def test_workflow_inputs_raise_a_plan_refusal_as_the_workflow_error(inputs: WorkflowInputs) -> None:
    with pytest.raises(LookupError, match=f"{RUN}: epoch 3 is not a slice boundary"):
        inputs.previous_slice(SimpleNamespace(run=RUN, epoch="3"))


@pytest.mark.parametrize(
    ("present", "partial", "expected"),
    [
        ((), False, (False, "not finished: the audit has not passed")),
        ((), True, (True, "stopped where asked")),
        (("audit_passed",), False, (False, "not finished")),
        (("audit_passed", "report_index"), False, (True, "report: results/tiny/report/index.html")),
    ],
)
def test_the_closing_line_names_the_report_only_once_it_exists(
    inputs: WorkflowInputs, present: tuple[str, ...], partial: bool, expected: tuple[bool, str]
) -> None:
    """Jobs that all succeeded without the audit passing are an unfinished campaign (exit 1), unless
    the invocation asked to stop early (--until, a target)."""
    paths = inputs.plan.paths
    for name in present:
        getattr(paths, name).parent.mkdir(parents=True, exist_ok=True)
        getattr(paths, name).write_text("")
    finished, line = closing_line(paths, partial)
    assert (finished, line.startswith(expected[1])) == (expected[0], True)


def test_the_final_output_asks_for_every_pack_jobs_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the audit reads a pack job's own record: `all` asks for it, so a job killed after its
    members' records and before its own is run again."""
    monkeypatch.chdir(tmp_path)
    raw = TINY | {"execution": {"pack": 2}, "grid": TINY["grid"] | {"learning_rates": {"synchronous": [0.001, 0.002]}}}
    plan = WorkflowPlan(campaign_from_dict(raw))
    records = [path for path in plan.final_output() if "/packs/" in path]
    assert [Path(path).name.split("-")[:2] for path in records] == [["slice", "1"], ["slice", "2"]]


def test_the_closing_line_counts_every_outcome_of_the_runs_table(inputs: WorkflowInputs) -> None:
    paths = inputs.plan.paths
    for path in (paths.audit_passed, paths.report_index):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    paths.runs_csv.write_text("run,status\na,complete\nb,diverged\nc,complete\nd,failed\n")
    assert closing_line(paths, partial=False)[1].endswith("; runs: 2 complete, 1 diverged, 1 failed")
