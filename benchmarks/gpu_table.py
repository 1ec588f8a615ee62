"""One table of a benchmarks/gpu_check.sh run: GPU tests, throughput, speedups, each against the
previous recorded figure, the published reference and the goal of issue #19.

Reads the check's directory: parts.tsv (part, exit status or -1 when not started, seconds, limit;
written by gpu_check.sh), pytest.xml (JUnit XML of `pytest -m gpu`) and bench.jsonl (records of
benchmarks/gpu_train.py --json).

    python benchmarks/gpu_table.py DIRECTORY
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

PREVIOUS = {"sync": 1_605_990, ("eager", 4): 2.28, ("eager", 8): 4.44}
"""benchmarks/README.md, one H200, torch 2.11.0+cu130, 2026-11-29, 20M preset: synchronous compiled
at micro-batch 32 (every synchronous variant is a ratio to it); packed-K eager speedups."""
PUBLISHED = {"sync": 1.64e6, ("eager", 4): 2.2, ("eager", 8): 3.9, ("compiled", 4): 1.51, ("compiled", 8): 2.51}
"""The published figures, one GH200: synchronous compiled 20M at micro-batch 32; packed-K speedups."""
GOAL_TOKENS_PER_S, GOAL_MFU = 2.0e6, 0.35
GOAL_SPEEDUP = {("eager", 4): 2.5, ("eager", 8): 4.0, ("compiled", 4): 1.7, ("compiled", 8): 2.8}
GOAL_VALIDATION = 2.5
"""Issue #19's goals for the 20M preset: synchronous tokens/s and MFU, packed speedups, full
validation / training tokens/s. Rows of other presets (the CPU smoke test's demo) have none."""


def read_parts(directory: Path) -> list[dict]:
    path = directory / "parts.tsv"
    if not path.exists():
        return []
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{"part": p, "rc": int(rc), "seconds": int(s), "limit": int(limit)} for p, rc, s, limit in rows]


def read_records(directory: Path) -> list[dict]:
    path = directory / "bench.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def pytest_row(directory: Path) -> list[str] | None:
    path = directory / "pytest.xml"
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    total, failed, errors, skipped = (int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped"))
    passed = total - failed - errors - skipped
    bad = [
        case.get("name")
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    result = f"{passed} passed, {failed + errors} failed, {skipped} skipped" + (f" ({', '.join(bad)})" if bad else "")
    return [
        "`pytest -m gpu`",
        result,
        "never run",
        "-",
        "all pass, none skipped",
        _verdict(total > 0 and passed == total),
    ]


def sync_row(record: dict) -> list[str]:
    tokens, mfu = record["tokens_per_s"], record["mfu"]
    loss = record["loss_ok"]
    result = (
        f"{tokens:,.0f} tok/s, MFU {_pct(mfu)}, peak {_num(record['peak_gib'], '.1f')} GiB, "
        f"first step {record['first_step_s']:.0f} s, graph breaks {_num(record['graph_breaks'], 'd')}"
    )
    if loss is None:
        result += ", the loss reference" if record["loss_steps"] else ""
    else:
        result += (
            f", losses {'within' if loss else 'NOT within'} BF16 tolerance of the reference "
            f"({record['max_rel_dloss']:.1e})"
        )
    main = record["preset"] == "20m"
    met = tokens >= GOAL_TOKENS_PER_S and mfu is not None and mfu >= GOAL_MFU and loss is not False
    return [
        f"sync {record['preset']} {record['variant']}",
        result,
        _ratio(tokens, PREVIOUS["sync"] if main else None, ",.0f"),
        _ratio(tokens, PUBLISHED["sync"] if main else None, ",.0f"),
        "≥ 2.0 M tok/s, ≥ 35 % MFU, same losses" if main else "-",
        _verdict(met) if main else "-",
    ]


def packed_row(record: dict) -> list[str]:
    key = (record["mode"], record["k"])
    speedup = record["speedup"]
    previous = PREVIOUS.get(key) if record["preset"] == "20m" else None
    published = PUBLISHED.get(key) if record["preset"] == "20m" else None
    goal = GOAL_SPEEDUP.get(key) if record["preset"] == "20m" else None
    result = (
        f"{speedup:.2f}x ({record['sequential_ms']:.1f} ms sequential, {record['packed_ms']:.1f} ms packed; "
        f"graph breaks {_num(record['graph_breaks'], 'd')})"
    )
    return [
        f"packed-{record['k']} {record['preset']} {record['mode']}",
        result,
        _ratio(speedup, previous, ".2f"),
        _ratio(speedup, published, ".2f"),
        f"≥ {goal}x" if goal else "-",
        _verdict(speedup >= goal) if goal else "-",
    ]


def validation_row(record: dict) -> list[str]:
    ratio = record["ratio"]
    result = f"{record['tokens_per_s']:,.0f} tok/s = {_num(ratio, '.2f')}x training (batch {record['batch_size']})"
    main = record["preset"] == "20m"
    return [
        f"full validation {record['preset']}",
        result,
        "-",
        "-",
        f"≥ {GOAL_VALIDATION}x training" if main else "-",
        _verdict(ratio is not None and ratio >= GOAL_VALIDATION) if main else "-",
    ]


HEADER = "| check | result | vs previous | vs published | goal | met |\n|---|---|---|---|---|---|"


def record_row(record: dict) -> str:
    """The table row of one gpu_train.py record (a failed measurement is a failed row)."""
    if "error" in record:
        name = {
            "sync": f"sync {record['preset']} {record.get('variant')}",
            "packed": f"packed-{record.get('k')} {record['preset']} {record.get('mode')}",
        }
        cells = [
            name.get(record["section"], f"full validation {record['preset']}"),
            f"failed: {record['error']}",
            "-",
            "-",
            "-",
            "**no**",
        ]
    else:
        cells = {"sync": sync_row, "packed": packed_row, "validation": validation_row}[record["section"]](record)
    return _line(cells)


def table(directory: Path) -> str:
    records = read_records(directory)
    parts = read_parts(directory)
    setup = next((r for r in records if r["section"] == "setup"), {})
    rows = [_line(row)] if (row := pytest_row(directory)) else []
    rows += [record_row(record) for record in records if record["section"] != "setup"]
    for part in parts:
        if part["rc"] and not (part["part"] == "pytest" and (directory / "pytest.xml").exists()):  # that has its row
            why = {
                -1: "not started: the check's time was used up",
                124: f"timed out after {part['limit']} s",
                137: f"killed after {part['limit']} s",
            }.get(part["rc"], f"exit status {part['rc']}")
            rows.append(_line([f"part {part['part']}", f"{why} (see gpu_check.log)", "-", "-", "-", "**no**"]))
    intro = (
        f"Device {setup.get('device', '?')}, torch {setup.get('torch', '?')}, {setup.get('date', '?')}; check wall "
        f"time {sum(p['seconds'] for p in parts)} s. Previous: benchmarks/README.md (one H200, 2026-11-29); "
        "published: one GH200."
    )
    return "\n".join([intro, "", HEADER, *rows])


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _ratio(value: float, reference: float | None, spec: str) -> str:
    return "-" if reference is None else f"{format(reference, spec)} → {value / reference:.2f}x"


def _num(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _verdict(met: bool) -> str:
    return "yes" if met else "**no**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    print(table(parser.parse_args().directory))


if __name__ == "__main__":
    main()
