"""The epoch loop of one slice: its optimizer steps, their records, the divergence decision and
each epoch's subset validation."""

from __future__ import annotations

import time

import torch
from tqdm import tqdm

from ebd2n.layout import FINAL
from ebd2n.parallel import distributed
from ebd2n.train.divergence import Rules, observe
from ebd2n.train.job import Parts, Slice
from ebd2n.train.output import RunOutput, SilentOutput
from ebd2n.train.records import TYPE, Divergence, RecordType
from ebd2n.train.runlog import format_memory
from ebd2n.train.schedule import learning_rate
from ebd2n.train.step import StepResult
from ebd2n.train.validation import block_batches, evaluate_sequences


class EpochLoop:
    """The epoch loop of one slice: steps, per-step records, subset validation, epoch records."""

    def __init__(
        self, job: Slice, parts: Parts, output: RunOutput | SilentOutput, eval_blocks: torch.Tensor, progress: bool
    ) -> None:
        self.job, self.parts, self.output, self.eval_blocks, self.progress = job, parts, output, eval_blocks, progress
        self.recipe, self.budget, self.engine, self.device = job.recipe, job.budget, parts.engine, job.context.device
        self.rules = Rules.of(job.recipe, job.budget)

    def run_epoch(self, epoch: int) -> None:
        """Train epoch `epoch` and measure it, or stop at a step where the run diverged."""
        started = self.start_epoch()
        losses = []
        steps = self.budget.epoch_steps(epoch)
        bar = tqdm(steps, desc=f"epoch {epoch + 1}/{self.budget.epochs}", disable=not self.progress, leave=False)
        for step in bar:
            sequences, lr, tokens = self.next_step(step)
            result = self.record_step(step, epoch, self.engine.train_step(sequences, lr), lr, tokens)
            if self.parts.progress.diverged is not None:
                bar.close()
                return  # no step, and no measurement, after the decision
            losses.append(result.loss)
            bar.set_postfix(loss=f"{result.loss:.4f}")
        self.end_epoch(epoch, losses, time.perf_counter() - started)

    def start_epoch(self) -> float:
        """The epoch's start on the clock its tokens/s is measured by."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        return time.perf_counter()

    def next_step(self, step: int) -> tuple[torch.Tensor, float, int]:
        """The step's batch (an epoch's last step may be shortened), learning rate and tokens after it."""
        tokens = self.budget.tokens_after(step + 1)
        return (
            self.parts.data.next_batch(),
            learning_rate(tokens, self.budget.total_tokens, self.recipe.optimizer),
            tokens,
        )

    def end_epoch(self, epoch: int, losses: list[float], elapsed: float) -> None:
        """Measure the epoch just trained on the validation subset and record it."""
        budget, counters = self.budget, self.parts.progress
        steps = budget.epoch_steps(epoch)
        counters.epoch = epoch + 1
        evaluation_model = self.engine.evaluation_model()  # the whole model on the main process only
        subset = (
            None
            if evaluation_model is None
            else evaluate_sequences(
                evaluation_model,
                block_batches(self.eval_blocks, self.recipe.evaluation.batch_size),
                self.device,
                self.engine.use_amp,
            )
        )
        memory = distributed.gather_memory(self.job.context)  # every device of the job, on the main process
        if subset is None:
            return  # another process of the job: nothing to measure or record
        val_loss, val_accuracy, _ = subset
        step = self.parts.data.step
        record = {
            TYPE: RecordType.EPOCH.value,
            "epoch": epoch + 1,
            "step": step,
            "tokens": budget.tokens_after(step),
            "train_loss": sum(losses) / len(losses),
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "lr": learning_rate(budget.tokens_after(step), budget.total_tokens, self.recipe.optimizer),
            "tokens_per_s": budget.epoch_blocks(epoch) * budget.context_length / elapsed,
            "batches_per_s": len(steps) / elapsed,
            "wall_s": elapsed,
            "memory": memory,
            "skipped_steps": counters.skipped_steps,
            **self.engine.epoch_metrics(),
        }
        self.output.append(record)
        if counters.best is None or val_loss < counters.best["val_loss"]:
            counters.best = {
                "epoch": epoch + 1,
                "step": step,
                "tokens": record["tokens"],
                "val_loss": val_loss,
                "val_accuracy": val_accuracy,
            }
        extra = "".join(f" | {k.replace('_', ' ')} {v:.4g}" for k, v in self.engine.epoch_metrics().items())
        self.output.write(
            f"epoch {epoch + 1}/{budget.epochs} | step {step} | {record['tokens_per_s']:,.0f} tok/s | "
            f"mem {format_memory(memory)}{distributed.most_loaded(memory)} | train loss {record['train_loss']:.4f} | "
            f"val loss {val_loss:.4f} acc {100 * val_accuracy:.2f}% | lr {record['lr']:.3e}{extra}"
        )

    def record_step(self, step: int, epoch: int, result: StepResult, lr: float, tokens: int) -> StepResult:
        """The records of one optimizer step; the divergence decision when a rule fires at it."""
        budget, counters = self.budget, self.parts.progress
        if result.skipped:
            counters.skipped_steps += 1
            self.output.write(f"step {step + 1}: non-finite gradient norm ({result.grad_norm}); step skipped")
        fired = observe(self.rules, counters, result.loss, result.skipped, tokens)
        self.output.append(
            {
                TYPE: RecordType.STEP.value,
                "step": step + 1,
                "loss": result.loss,
                "accuracy": result.accuracy,
                "lr": lr,
                "grad_norm": result.grad_norm,
                "skipped": result.skipped,
            }
        )
        if (step + 1) % self.recipe.training.log_every == 0:
            self.output.write(f"step {step + 1}/{budget.total_steps} | loss {result.loss:.4f} | lr {lr:.3e}")
        if fired is not None:
            rule, detail = fired
            counters.diverged = Divergence(
                step=step + 1,
                tokens=tokens,
                epoch=epoch + 1,
                rule=rule,
                last_finite_loss=counters.last_finite_loss,
                detail=detail,
            ).record()
            self.output.append(counters.diverged)
            last = "none" if counters.last_finite_loss is None else f"{counters.last_finite_loss:.4f}"
            self.output.write(
                f"diverged at step {step + 1} (rule {rule}): {detail}; last finite loss {last}; "
                f"training stops here, its weights in {FINAL}, no full validation"
            )
        return result
