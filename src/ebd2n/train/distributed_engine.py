"""The distributed engine: one rank's share of an S x D synchronous job under torchrun.

Same step as SynchronousEngine: the gradient of the mean token loss over the whole step, one
global gradient-norm clip over every parameter of every stage, a skipped step on every rank when
the norm is not finite, AdamW with decay on matrices only. Data parallel runs through DDP;
pipeline stages through torch.distributed.pipelining. Checkpoints are assembled on rank 0 in
the single-process layout (a GPT state dict), so validation and reports read them unchanged.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ebd2n.config import Recipe, hf_model_dir
from ebd2n.errors import UserError
from ebd2n.model import GPT
from ebd2n.model.units import model_units, ties_head
from ebd2n.parallel.distributed import Context, to_cpu
from ebd2n.parallel.pipeline import StageModule, TokenLoss, bubble_fraction, pipeline_rounds, pipeline_schedule
from ebd2n.targets import IGNORE_INDEX, split_block, target_counts
from ebd2n.train.budget import Budget
from ebd2n.train.step import Engine, StepResult
from ebd2n.train.weights import fine_tuning_model, hf_with_state, initial_model


class DistributedEngine(Engine):
    """This rank's stage (a StageModule, or the whole GPT when S = 1), its replica's data share and AdamW."""

    def __init__(self, recipe: Recipe, budget: Budget, context: Context) -> None:
        super().__init__(recipe, budget, context.device)
        self.context = context
        stages, replicas = context.stages, context.replicas
        if budget.sequences_per_step % replicas:
            raise UserError(
                f"parallel.data_parallel ({replicas}) must divide the {budget.sequences_per_step} sequences of a step "
                "(training.batch_tokens / model.context_length)"
            )
        self.replica_sequences = budget.sequences_per_step // replicas
        local = self._local_model(recipe, context)
        self.model = local.to(self.device)
        if recipe.runtime.compile:
            self.model.compile()  # in place: parameter names stay the GPT's
        self.ddp = (
            DistributedDataParallel(
                self.model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                process_group=context.groups.data,
            )
            if replicas > 1
            else None
        )
        self.optimizer = self._make_optimizer(self.model.param_groups(recipe.optimizer.weight_decay))
        self.tied = self._tied_weight()
        if stages > 1:
            depth = recipe.parallel.pipeline_depth
            _, self.round_size = pipeline_rounds(self.replica_sequences, depth, recipe.training.micro_batch_size)
            self.loss = TokenLoss(self.device)
            stage_module = self.ddp if self.ddp is not None else self.model
            self.schedule = pipeline_schedule(
                stage_module,
                context,
                (self.round_size // depth, recipe.model.context_length),
                recipe.model.width,
                recipe.model.vocab_size,
                self.use_amp,
                self.loss,
                recipe.parallel.schedule,
                depth,
            )

    def _local_model(self, recipe: Recipe, context: Context) -> nn.Module:
        """This rank's model: the whole model (S = 1) or its stage's units.

        Every GPT rank draws the same whole model. A Hugging Face stage reads only its own units'
        weights from the safetensors files (the rest stays on the meta device).
        """
        if context.stages == 1:
            return fine_tuning_model(recipe, initial_model(recipe))
        names = context.placement.stages[context.stage]
        if recipe.model.source != "huggingface":
            return StageModule(fine_tuning_model(recipe, initial_model(recipe)), names, self.autocast)
        from ebd2n.model.hf import HFStageModule, load_model

        if ties_head(recipe.model):
            raise UserError("parallel.pipeline_stages: a Hugging Face model with tied embeddings trains in one stage")
        units = [unit for unit in model_units(recipe.model) if unit.name in set(names)]
        prefixes = tuple(prefix for unit in units for prefix in unit.param_prefixes)
        whole = fine_tuning_model(recipe, load_model(hf_model_dir(recipe.model), keep=lambda n: n.startswith(prefixes)))
        return HFStageModule(whole, units, self.autocast)

    def _tied_weight(self) -> nn.Parameter | None:
        """This stage's copy of the tied embedding matrix when the other copy is on another stage."""
        if self.context.stages == 1 or self.recipe.model.source == "huggingface":
            return None
        if self.context.stage == 0:
            return self.model.embed.weight
        if self.context.stage == self.context.stages - 1:
            return self.model.head.weight
        return None

    def train_step(self, sequences: torch.Tensor, lr: float) -> StepResult:
        """This replica's contiguous share of the (S, T+1) sequences; every rank gets the same result."""
        self._set_lr(lr)
        # Equal contiguous shares; a shortened step (an epoch's last) may leave them one row apart.
        share = torch.tensor_split(sequences, self.context.replicas)[self.context.replica]
        step_tokens = max(sum(target_counts(split_block(sequences)[1])), 1)  # the step's counted targets
        if self.context.stages > 1:
            loss_sum, correct = self._pipeline(share, -(-sequences.shape[0] // self.context.replicas), step_tokens)
        else:
            loss_sum, correct = self._data_parallel(share, sequences, step_tokens)
        if self.tied is not None and self.tied.grad is not None:
            dist.all_reduce(self.tied.grad, group=self.context.groups.tied)  # both copies get the summed gradient
        params = [p for p in self.model.parameters() if p.grad is not None]
        counted = [p for p in params if p is not self.tied or self.context.stage == 0]  # the tied matrix once
        norm_sq = sum(
            (torch.linalg.vector_norm(p.grad, dtype=torch.float32) ** 2 for p in counted),
            torch.zeros((), device=self.device),
        )
        if self.context.replica != 0:
            norm_sq = torch.zeros_like(norm_sq)  # replicas hold equal gradients: count replica 0's
        totals = torch.stack([norm_sq.double(), loss_sum.double(), correct.double()])
        dist.all_reduce(totals)  # one sum over the job: every rank decides the same
        grad_norm = float(totals[0].sqrt())
        skipped = not math.isfinite(grad_norm)
        if not skipped:
            coefficient = min(1.0, self.recipe.optimizer.grad_clip / (grad_norm + 1e-6))  # as clip_grad_norm_
            for p in params:
                p.grad.mul_(coefficient)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(
            loss=float(totals[1]) / step_tokens,
            accuracy=float(totals[2]) / step_tokens,
            grad_norm=grad_norm,
            skipped=skipped,
        )

    def _data_parallel(
        self, share: torch.Tensor, sequences: torch.Tensor, step_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """S = 1: DDP over the whole GPT, accumulating micro-batches; gradients all-reduce on the last.

        Each chunk's mean loss is weighted by its share of the step's counted targets times the
        replicas (DDP averages them), so uneven shares still give the gradient of the step's mean
        loss. A replica left without rows (a shortened step with fewer rows than replicas), or a
        chunk without counted targets, joins the all-reduce weighted zero.
        """
        empty = share.shape[0] == 0
        chunks = sequences[:1].split(1) if empty else share.split(self.budget.micro_batch_size)
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        for index, chunk in enumerate(chunks):
            inputs, targets = split_block(chunk)
            counted = 0 if empty else sum(target_counts(targets))
            sync = contextlib.nullcontext() if index == len(chunks) - 1 else self.ddp.no_sync()
            with sync:
                with self.autocast():
                    logits, loss = self.ddp(inputs, targets)
                if counted:
                    (loss * (counted * self.context.replicas / step_tokens)).backward()
                else:  # joins the all-reduce adding nothing (a mean over no targets is NaN)
                    (loss.nan_to_num() * 0.0).backward()
            if counted:
                loss_sum += loss.detach() * counted
                correct += (logits.detach().argmax(-1) == targets).sum()
        return loss_sum, correct

    def _pipeline(self, share: torch.Tensor, rows: int, step_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """S > 1: rounds of pipeline_depth micro-batches through the schedule (loss on the last stage).

        Every replica runs the rounds of `rows` (its largest share this step); rows a share lacks
        are padding whose targets are ignored, so they add nothing to the loss or the gradient.
        """
        self.loss.reset(step_tokens / self.context.replicas)  # DDP's average over replicas gives the step mean
        real = share.shape[0]
        missing = -(-rows // self.round_size) * self.round_size - real
        if missing:
            padding = torch.zeros(missing, share.shape[1], dtype=share.dtype, device=share.device)
            share = torch.cat([share, padding])
        for index, chunk in enumerate(share.split(self.round_size)):
            inputs, targets = (part.contiguous() for part in split_block(chunk))  # static metadata: dense strides
            kept = real - index * self.round_size
            if kept < self.round_size:
                targets[max(kept, 0) :] = IGNORE_INDEX
            if self.context.stage == 0:
                self.schedule.step(inputs)
            elif self.context.stage == self.context.stages - 1:
                self.schedule.step(target=targets, return_outputs=False)
            else:
                self.schedule.step()
        return self.loss.loss_sum, self.loss.correct

    def _gathered_model(self) -> dict[str, torch.Tensor] | None:
        """The whole model's state dict, GPT naming, on rank 0 (None elsewhere): replica 0's stages merged."""
        local = to_cpu(self.model.state_dict()) if self.context.replica == 0 else None
        parts = self.context.gather(local)
        if parts is None:
            return None
        return {name: tensor for part in parts[: self.context.stages] for name, tensor in part.items()}

    def state_dict(self) -> dict:
        """On rank 0 the assembled checkpoint state ({} on other ranks): `model` a GPT state dict,
        `optimizer` the AdamW state of each stage (replicas hold equal states), by stage."""
        model = self._gathered_model()
        optimizers = self.context.gather(to_cpu(self.optimizer.state_dict()) if self.context.replica == 0 else None)
        if model is None:
            return {}
        return {"model": model, "optimizer": optimizers[: self.context.stages]}

    def load_state_dict(self, state: dict) -> None:
        """Each rank takes its stage's weights and AdamW state from an assembled checkpoint."""
        if len(state["optimizer"]) != self.context.stages:
            raise UserError(
                f"checkpoint holds {len(state['optimizer'])} pipeline stage(s), this job has "
                f"parallel.pipeline_stages = {self.context.stages}; resume with the run's own recipe"
            )
        own = self.model.state_dict()
        self.model.load_state_dict({name: state["model"][name] for name in own})
        self.optimizer.load_state_dict(state["optimizer"][self.context.stage])

    def evaluation_model(self) -> GPT | None:
        """The whole model on rank 0 for subset validation (None on other ranks); all ranks must call it."""
        state = self._gathered_model()
        if state is None:
            return None
        if self.recipe.model.source == "huggingface":
            return hf_with_state(self.recipe, state).to(self.device)
        with torch.device("meta"):
            model = fine_tuning_model(self.recipe, GPT(self.recipe.model))
        model.to_empty(device=self.device)
        model.load_state_dict(state)
        model.head.weight = model.embed.weight  # to_empty untied them
        model.reset_rotary()
        return model

    def epoch_metrics(self) -> dict:
        """The schedule's theoretical bubble: (S - 1) / (M + S - 1) with M = pipeline_depth."""
        if self.context.stages == 1:
            return {}
        return {"theoretical_bubble": bubble_fraction(self.context.stages, self.recipe.parallel.pipeline_depth)}
