"""Pipeline stages: one stage's units as a module, its loss, and its torch.distributed.pipelining schedule."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from ebd2n.errors import UserError
from ebd2n.model.gpt import GPT
from ebd2n.model.units import model_units
from ebd2n.parallel.distributed import Context
from ebd2n.targets import IGNORE_INDEX

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class StageModule(nn.Module):
    """The units of one pipeline stage, taken from a whole GPT, under GPT's parameter names.

    A stage may begin or end inside a block (attention and MLP are separate units), so each block
    is a container holding its attention half, its MLP half or both, under `blocks.<i>`: the
    stage's state_dict keys are the GPT's. A stage holding the head but not the embedding gets its
    own copy of the tied matrix as `head.weight`; the engine sums the two copies' gradients.
    """

    param_groups = GPT.param_groups  # the same AdamW groups as GPT: decay on matrices only

    def __init__(self, gpt: GPT, units: list[str], autocast: Callable[[], contextlib.AbstractContextManager]) -> None:
        super().__init__()
        self.autocast = autocast
        by_name = {unit.name: unit for unit in model_units(gpt.cfg)}
        self.plan = [(by_name[name].kind, by_name[name].block) for name in units]
        self.blocks = nn.ModuleDict()
        for kind, block in self.plan:
            if kind == "embedding":
                self.embed = gpt.embed
            elif kind == "head":
                self.norm = gpt.norm
                self.head = gpt.head if "embedding" in units else copy.deepcopy(gpt.head)  # own tied copy
            else:
                holder = self.blocks[str(block)] if str(block) in self.blocks else nn.Module()
                self.blocks[str(block)] = holder
                source = gpt.blocks[block]
                if kind == "attention":
                    holder.attn_norm, holder.attn = source.attn_norm, source.attn
                else:
                    holder.mlp_norm, holder.mlp = source.mlp_norm, source.mlp
        self.register_buffer("rope_cos", gpt.rope_cos.clone(), persistent=False)
        self.register_buffer("rope_sin", gpt.rope_sin.clone(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) on the first stage, else the residual stream (B, T, width); the last
        stage returns logits (B, T, vocab). The same operations as GPT.forward and Block.forward."""
        T = x.shape[1]
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # (T, head_dim)
        with self.autocast():
            for kind, block in self.plan:
                if kind == "embedding":
                    x = self.embed(x)  # (B, T, width)
                elif kind == "attention":
                    half = self.blocks[str(block)]
                    x = x + half.attn(half.attn_norm(x), cos, sin)
                elif kind == "mlp":
                    half = self.blocks[str(block)]
                    x = x + half.mlp(half.mlp_norm(x))
                else:
                    x = self.head(self.norm(x))  # (B, T, vocab)
        return x


class TokenLoss:
    """Summed cross-entropy over a micro-batch divided by the replica's tokens in the whole step.

    With sums over every micro-batch and round, the replica's gradient is that of its mean token
    loss whatever the micro-batching (DDP then averages replicas). Also counts the summed loss
    and the correct argmax predictions for the step's metrics.
    """

    def __init__(self, device: torch.device) -> None:
        self.tokens = 1
        self.loss_sum = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device, dtype=torch.long)

    def reset(self, tokens: int) -> None:
        self.tokens = tokens
        self.loss_sum.zero_()
        self.correct.zero_()

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        B, T = targets.shape
        loss = F.cross_entropy(
            logits.float().view(B * T, -1), targets.reshape(B * T), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        self.loss_sum += loss.detach()
        self.correct += (logits.detach().argmax(-1) == targets).sum()
        return loss / self.tokens


def pipeline_rounds(sequences: int, depth: int, micro_batch_size: int) -> tuple[int, int]:
    """(rounds, rows per round) of a replica's step: each schedule run takes `depth` equal
    micro-batches of at most micro_batch_size sequences.

    The fewest rounds that split the sequences evenly; when no count does (depth does not divide
    them), the fewest rounds that hold them, the last one padded with rows whose targets are
    ignored (uneven rounds).
    """
    rounds = -(-sequences // (depth * micro_batch_size))
    for even in range(rounds, sequences // depth + 1):
        if sequences % (depth * even) == 0:
            return even, sequences // even
    micro = -(-sequences // (depth * rounds))
    return rounds, depth * micro


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """Theoretical idle share of a GPipe or 1F1B schedule: (S - 1) / (M + S - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def pipeline_schedule(
    module: nn.Module,
    context: Context,
    micro_batch: tuple[int, int],
    width: int,
    vocab: int,
    amp: bool,
    loss: TokenLoss,
    schedule: str,
    depth: int,
) -> ScheduleGPipe | Schedule1F1B:
    """The schedule of this rank's stage (module: the StageModule, or its DDP wrapper).

    Shapes are given up front (static metadata: every micro-batch has the same (B, T)), so the
    stage runs no trial forward and backward at its first step.
    """
    if schedule == "1f1b" and depth < context.stages:
        raise UserError(
            f"parallel.pipeline_depth ({depth}) must be at least parallel.pipeline_stages ({context.stages}) under the "
            "1f1b schedule; raise it or set parallel.schedule=gpipe"
        )
    B, T = micro_batch
    first, last = context.stage == 0, context.stage == context.stages - 1
    stream = torch.empty(B, T, width, device="meta", requires_grad=True)  # the residual stream between stages
    inputs = torch.empty(B, T, dtype=torch.long, device="meta") if first else stream
    logits_dtype = torch.bfloat16 if amp else torch.float32
    outputs = torch.empty(B, T, vocab, dtype=logits_dtype, device="meta", requires_grad=True) if last else stream
    stage = PipelineStage(
        module,
        context.stage,
        context.stages,
        context.device,
        input_args=inputs,
        output_args=outputs,
        group=context.groups.pipeline,
    )
    return SCHEDULES[schedule](stage, n_microbatches=depth, loss_fn=loss, scale_grads=False)
