"""The subcommands of one run: its recipe, plan, data cache, training, validation and export."""

from __future__ import annotations

import argparse
from pathlib import Path

from ebd2n import commands
from ebd2n.layout import DASHBOARD, FINAL, RESULTS_JSON
from ebd2n.subcommands.parts import command, epoch_list, recipe_args


def add_run_commands(subcommands: argparse._SubParsersAction) -> None:
    """recipe, plan, prepare, train, validate, export and hf-init."""
    wait = "wait for a live trainer holding the run directory to end (workflow jobs)"

    p = command(
        subcommands,
        "recipe",
        commands.cmd_recipe,
        "print a resolved recipe, its identity and parameter count",
        "Print the recipe as it trains (preset or file, with every --set applied) and what follows from it: "
        "mode, parameters, token budget, epochs, optimizer steps, and the identity of recipe and cache.",
        "ebd2n recipe demo --set optimizer.lr=1e-3",
    )
    recipe_args(p)

    p = command(
        subcommands,
        "plan",
        commands.cmd_plan,
        "the slices a run of the recipe trains in (a campaign's frozen trainer plans its runs)",
        "Cut the recipe's epochs into slices of --epochs-per-slice epochs, as a campaign's jobs train them; "
        "print the epochs each slice ends at, or the plan as JSON.",
        "ebd2n plan demo --epochs-per-slice 1",
    )
    recipe_args(p)
    p.add_argument("--epochs-per-slice", type=int, required=True, help="epochs one job trains")
    p.add_argument("--output", type=Path, help="also write the plan as JSON (the workflow reads it)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument(
        "--parent",
        type=Path,
        metavar="RECIPE",
        help="the recipe of a shorter wsd horizon whose trunk the run continues: start at its pre-decay epoch",
    )
    p.add_argument(
        "--expect",
        type=epoch_list,
        metavar="E1,E2,...",
        help="refuse (exit 2, nothing written) unless the slices end at exactly these epochs",
    )

    p = command(
        subcommands,
        "prepare",
        commands.cmd_prepare,
        "build (or reuse) the recipe's tokenized data cache",
        "Tokenize the recipe's data into its cache directory, or reuse the cache already there when its "
        "identity matches; print the cache's identity and record counts.",
        "ebd2n prepare demo --quiet",
    )
    recipe_args(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = command(
        subcommands,
        "train",
        commands.cmd_train,
        "train one run, or one slice of it",
        "Train the run the recipe describes into its runtime.output_dir, resuming from its newest valid "
        f"checkpoint; the job that completes the run writes its {FINAL} and {DASHBOARD}.",
        "ebd2n train --config demo --set runtime.output_dir=runs/demo --until-epoch 1",
    )
    recipe_args(p, positional=False)
    p.add_argument(
        "--resume", type=Path, help="a checkpoint to resume from (default: the run directory's newest valid one)"
    )
    p.add_argument("--until-epoch", type=int, help="stop at this epoch boundary (default: the whole budget)")
    p.add_argument(
        "--plan",
        type=Path,
        help="the run's slice plan (frozen/plans/<base>.json): a run that diverges records every slice end",
    )
    p.add_argument(
        "--branch-from",
        type=Path,
        metavar="RUN_DIR",
        help="a wsd run of the same recipe with a shorter budget: start from its pre-decay checkpoint",
    )
    p.add_argument("--wait", action="store_true", help=wait)
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = command(
        subcommands,
        "train-pack",
        commands.cmd_train_pack,
        "train several runs of one shape as one packed model",
        "Train resolved runs that differ only in optimizer settings and seed (a sweep's points) as one "
        "packed model in one process, each into its own directory as `ebd2n train` writes it, resuming "
        "each from its newest valid checkpoint. A member that diverges stops at once; the others go on.",
        "ebd2n train-pack results/sweep/runs/RUN_A results/sweep/runs/RUN_B --until-epoch 1",
    )
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument("--until-epoch", type=int, help="stop at this epoch boundary (default: the whole budget)")
    p.add_argument("--plan", type=Path, help="the runs' slice plan (frozen/plans/<base>.json)")
    p.add_argument("--record", type=Path, help="write the pack's record here once every run is written")
    p.add_argument("--wait", action="store_true", help=wait)

    p = command(
        subcommands,
        "validate",
        commands.cmd_validate,
        f"full validation of a run's {FINAL} -> {RESULTS_JSON}",
        f"Evaluate a finished run's {FINAL} over every validation target once and write {RESULTS_JSON} "
        "(with the hash of every file the trainer left, for the audit).",
        "ebd2n validate runs/demo",
    )
    p.add_argument("run_dir", type=Path)
    p.add_argument("--device", default=None, help="override the recipe's device")
    p.add_argument("--wait", action="store_true", help=wait)

    p = command(
        subcommands,
        "export",
        commands.cmd_export,
        "write a Hugging Face run's final model, adapters merged, in the HF layout",
        "Write the final model of a run fine-tuned from a Hugging Face model, its LoRA adapters merged, "
        "as a Hugging Face model directory.",
        "ebd2n export results/finetune-sql-demo/runs/RUN exported/sql-demo",
    )
    p.add_argument("run_dir", type=Path)
    p.add_argument("out_dir", type=Path)

    p = command(
        subcommands,
        "hf-init",
        commands.cmd_hf_init,
        "write a tiny random-weights Hugging Face model (llama, qwen2, qwen2_moe)",
        "Write a tiny Hugging Face model with random weights, for trying fine-tuning offline.",
        "ebd2n hf-init llama models/tiny-llama --vocab-size 512",
    )
    p.add_argument("family", choices=["llama", "qwen2", "qwen2_moe"])
    p.add_argument("out_dir", type=Path)
    p.add_argument(
        "--tokenizer",
        type=Path,
        help="tokenizer.json: its vocabulary size, copied into the model (default: a BPE trained on the "
        "embedded text-to-SQL set)",
    )
    p.add_argument("--vocab-size", type=int, default=512, help="vocabulary of the trained BPE (default 512)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
