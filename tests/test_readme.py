"""The README's everyday commands work as written: the shell blocks marked
`<!-- readme-test: run this block -->` run in order, in a fresh directory, with `ebd2n` being this
checkout's package; then their files are checked (a whole run and the same run in two slices give
the same weights, as the README says)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from workflow_support import assert_states_equal, copy_repo, environment

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- readme-test: run this block -->"


def runnable_blocks(text: str) -> list[str]:
    """The bodies of the ```bash blocks right after each mark, in order."""
    return re.findall(re.escape(MARK) + r"\s*```bash\n(.*?)```", text, re.S)


def test_readme_is_a_page() -> None:
    """The README stays a page (install, quick start, one campaign); the rest lives in docs/."""
    result = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert result <= 150


def test_docs_links_name_existing_files() -> None:
    """Every relative link of the README, config/README.md and docs/ names a file that exists."""
    pages = [ROOT / "README.md", ROOT / "config" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    result = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in re.findall(r"\]\(([^)#]+)[^)]*\)", page.read_text(encoding="utf-8"))
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert result == []


def test_readme_marks_the_everyday_commands() -> None:
    blocks = runnable_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    result = (len(blocks), [line.split()[:2] for line in blocks[0].splitlines() if line.startswith("ebd2n")][:3])
    assert result == (1, [["ebd2n", "--version"], ["ebd2n", "recipe"], ["ebd2n", "recipe"]])


@pytest.mark.slow
def test_readme_everyday_commands_run_in_order(tmp_path: Path) -> None:
    script = "\n".join(
        [
            "set -euo pipefail",
            f'ebd2n() {{ "{sys.executable}" -m ebd2n "$@"; }}',
            *runnable_blocks((ROOT / "README.md").read_text(encoding="utf-8")),
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    completed = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    trained = [line.split(";")[0] for line in completed.stdout.splitlines() if line.startswith(("done", "slice done"))]
    result = (
        sorted(path.name for path in tmp_path.iterdir()),
        trained,
        (tmp_path / "runs/sliced/results.json").is_file(),
        "* plotly.js v" in (tmp_path / "runs/sliced.html").read_text(encoding="utf-8"),
    )
    assert result == (
        ["results", "runs"],  # nothing beside what .gitignore leaves out
        [
            "done: runs/whole/final.pt, dashboard runs/whole/report.html",
            "slice done: epoch 1 of runs/sliced",
            "done: runs/sliced/final.pt, dashboard runs/sliced/report.html",
            "done already (nothing trained): runs/sliced/final.pt, dashboard runs/sliced/report.html",
        ],
        True,
        True,
    )
    assert_states_equal(
        *(
            torch.load(tmp_path / "runs" / name / "final.pt", weights_only=True)["engine"]
            for name in ("whole", "sliced")
        )
    )


def campaign_block(text: str) -> str:
    """The README's "One campaign, locally" block."""
    return re.findall(r"## One campaign, locally.*?```bash\n(.*?)```", text, re.S)[0]


@pytest.mark.slow
def test_readme_campaign_template_commands_run_as_written(tmp_path: Path) -> None:
    """The campaign block's lines for a campaign of one's own (the template copied, checked, dry-run)
    run as written in a copy of the checkout; training it is the demo's path, tested elsewhere."""
    lines = [
        line.split("#")[0].strip()
        for line in campaign_block((ROOT / "README.md").read_text(encoding="utf-8")).splitlines()
    ]
    own = [line for line in lines if "my.yaml" in line and not line.startswith("snakemake --cores")]
    repo = copy_repo(tmp_path)
    env = environment()
    completed = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + "\n".join(own)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = (
        [line.split()[:2] for line in own],
        "campaign my-campaign: 6 runs" in completed.stdout,
        "would train: 6 runs" in completed.stdout + completed.stderr,
    )
    assert result == (
        [["cp", "config/campaigns/template.yaml"], ["ebd2n", "campaign"], ["snakemake", "-n"]],
        True,
        True,
    )
