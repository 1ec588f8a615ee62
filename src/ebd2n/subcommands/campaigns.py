"""The subcommands that run a campaign: check, freeze, resolve, collect, decide, confirm-select, select, extend
and sweep."""

from __future__ import annotations

import argparse
from pathlib import Path

from ebd2n import commands
from ebd2n.layout import CAMPAIGN_JSON, GROUPS_CSV, RECIPE, RUNS_CSV, SELECTION_JSON
from ebd2n.subcommands.parts import campaign_arg, command


def add_campaign_commands(subcommands: argparse._SubParsersAction) -> None:
    """campaign, freeze, resolve, collect, decide, confirm-select, select, extend and sweep."""
    p = command(
        subcommands,
        "campaign",
        commands.cmd_campaign,
        "check a campaign file (say what it trains), or prepare its data cache",
        "check: read the campaign file and say what it trains (runs, slices, resources per mode); "
        "prepare: build its data cache. Given the directory, the file under config/ naming it is read.",
        "ebd2n campaign check config/config.yaml",
        "ebd2n campaign prepare results/demo",
    )
    p.add_argument("action", choices=["check", "prepare"])
    campaign_arg(p)

    p = command(
        subcommands,
        "freeze",
        commands.cmd_freeze,
        "snapshot the trainer (or, with --base, one base recipe) for a campaign",
        "Copy the trainer's source into the campaign's frozen/ (once: a frozen campaign is left as it is), "
        "or with --base write one base recipe there; every run of the campaign trains with these.",
        "ebd2n freeze config/config.yaml",
        "ebd2n freeze results/demo --base base",
    )
    campaign_arg(p)
    p.add_argument("--base", help="freeze this base recipe (a preset of the campaign, or 'base')")

    p = command(
        subcommands,
        "resolve",
        commands.cmd_resolve,
        f"write a run's {RECIPE} from the frozen base and its run id",
        f"Write {RECIPE} of a campaign's run: its frozen base recipe with the learning rate, beta2, seed "
        "and mode its run id names, and the settings of its further axes (grid.axes).",
        "ebd2n resolve results/demo/runs/synchronous-lr0.003-beta20.99-seed42",
    )
    p.add_argument("run_dir", type=Path, help="results/<campaign>/runs/<run-id>")
    p.add_argument(
        "--settings", help="JSON object of the recipe keys the run's further axes set (the workflow passes them)"
    )

    p = command(
        subcommands,
        "collect",
        commands.cmd_collect,
        f"tabulate a campaign's runs ({RUNS_CSV}, {CAMPAIGN_JSON})",
        f"Record the campaign's grid, then rewrite {CAMPAIGN_JSON} and {RUNS_CSV} from the runs on disk.",
        "ebd2n collect config/config.yaml --max-jobs 4",
    )
    campaign_arg(p)
    p.add_argument("--max-jobs", type=int, help="jobs the orchestrator ran at once (recorded in the campaign's record)")

    p = command(
        subcommands,
        "decide",
        commands.cmd_decide,
        "successive halving: decide which points of a bracket train on after a rung",
        "Rank a bracket's points by their loss at the rung and write which train on (the workflow's "
        "decide_rung job); a decision already written is left as it is.",
        "ebd2n decide config/campaigns/my-halving.yaml --bracket synchronous --epoch 2",
    )
    campaign_arg(p)
    p.add_argument("--bracket", required=True, help="a preset x mode of the grid: the mode, or <preset>-<mode>")
    p.add_argument("--epoch", type=int, required=True, help="the rung (a slice end)")
    p.add_argument(
        "--digest", help="the decision the workflow expects (refused when the campaign file decides another)"
    )

    p = command(
        subcommands,
        "confirm-select",
        commands.cmd_confirm_select,
        "confirmation: choose the points a campaign trains again on fresh seeds",
        "Rank each preset x mode's eligible points by mean loss over the grid's seeds and write the best "
        "`confirm.top` with their runs on `confirm.seeds` (the workflow's select_confirmation job); a "
        "selection already written is left as it is.",
        "ebd2n confirm-select config/campaigns/my-confirmed.yaml",
    )
    campaign_arg(p)
    p.add_argument("--digest", help="the selection the workflow expects (refused when the campaign file makes another)")

    p = command(
        subcommands,
        "select",
        commands.cmd_select,
        "group a runs table (CSV or JSON) and pick the best recipe per mode",
        f"Group a runs table by grid point, pick each mode's best point and estimate its LR optimum; "
        f"write {GROUPS_CSV} and {SELECTION_JSON}.",
        f"ebd2n select results/demo/{RUNS_CSV} --out selection/",
    )
    p.add_argument("runs", type=Path, help="per-run CSV or JSON (run, mode, lr, beta2, seed, status, loss)")
    p.add_argument("--out", type=Path, required=True, help=f"directory for {GROUPS_CSV} and {SELECTION_JSON}")

    p = command(
        subcommands,
        "extend",
        commands.cmd_extend,
        "write the campaign file's next revision: LRs beyond each winner at a grid edge",
        "Where a mode's winner lies at an end of its LR range, add the next LRs beyond it to the campaign "
        "file (the revision before is kept under extensions/) and print the diff.",
        "ebd2n extend results/demo",
        "ebd2n extend config/campaigns/recipe-sweep-20m.yaml",
    )
    campaign_arg(p)

    p = command(
        subcommands,
        "sweep",
        commands.cmd_sweep,
        "run a campaign with Snakemake; with --until-bracketed, extend and rerun until bracketed",
        "Run the campaign with Snakemake; with --until-bracketed, extend its grid past every winner at an "
        "LR edge and run again, until none is. Arguments after -- go to snakemake as typed.",
        "ebd2n sweep config/config.yaml --until-bracketed -- --profile slurm",
    )
    campaign_arg(p)
    p.add_argument(
        "--until-bracketed",
        action="store_true",
        help="after each run, extend the grid past every winner at an LR edge and run again",
    )
    p.add_argument("--max-extensions", type=int, default=3, help="stop (exit 1) after this many extensions (default 3)")
    p.set_defaults(snakemake_args=[])
