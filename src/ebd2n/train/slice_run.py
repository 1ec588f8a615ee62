"""What a slice leaves around its epochs: the checkpoints its retention keeps, the live record, and
at its end the slice record or the run's final records (a diverged run's at once). One slice's
bookkeeping, the same whether its run trains alone (ebd2n.train.trainer) or in a pack
(ebd2n.train.pack_trainer)."""

from __future__ import annotations

import torch

from ebd2n.job_time import record_job
from ebd2n.train.epoch_loop import EpochLoop
from ebd2n.train.job import Parts, Slice
from ebd2n.train.output import RunOutput, SilentOutput
from ebd2n.train.run_records import log_header, run_record, write_best, write_run_record, write_slice_record


class SliceRun:
    """One run's slice: its epoch loop, and what it writes before, between and after the epochs."""

    def __init__(
        self, job: Slice, parts: Parts, output: RunOutput | SilentOutput, eval_blocks: torch.Tensor, progress: bool
    ) -> None:
        self.job, self.parts, self.output = job, parts, output
        self.loop = EpochLoop(job, parts, output, eval_blocks, progress)

    @property
    def diverged(self) -> bool:
        return self.parts.progress.diverged is not None

    def begin(self) -> None:
        """The header, the initial weights (policy all) and the record the slice starts from."""
        job = self.job
        log_header(self.output, job)
        if job.resume is None and job.retention.writes(0, job.end_epoch):
            self.save(0)
        self.tell()

    def after_epoch(self, epoch: int) -> None:
        """The checkpoint after epoch `epoch` (final.pt at once for a run that diverged in it)."""
        if self.diverged:
            self.save(
                self.job.budget.epochs
            )  # final.pt: the weights at the decision (a skipped step's update was never applied)
        elif self.job.retention.writes(epoch + 1, self.job.end_epoch):
            self.save(epoch + 1)
        self.tell()

    def finish(self) -> None:
        """The slice's records: this job's line (ebd2n.job_time: what the pages count as its cost),
        then its slice record or, at the end of the budget (a diverged run's at once), the run's
        final records, which complete it and so come last; then the checkpoints its retention lets go."""
        job, output = self.job, self.output
        budget = job.budget
        if job.start_epoch == job.end_epoch and not self.diverged:
            output.write(f"epoch {job.end_epoch} reached already ({job.resume}): its records written")
        if not output.writes:
            return
        record_job(job.run_dir, "train", job.end_epoch, pack=job.pack)
        if self.diverged:
            self._end_diverged()
            return
        if job.end_epoch == budget.epochs:
            write_best(job, self.parts.progress, output)
            write_run_record(job, self.parts, output)
        else:
            write_slice_record(job.run_dir, job.end_epoch, budget.epochs)
        job.checkpoints.let_go(job.end_epoch)
        output.write(f"slice done: epochs {job.start_epoch}..{job.end_epoch} of {budget.epochs}")

    def save(self, epoch: int) -> None:
        tokens = self.job.budget.tokens_after(self.parts.data.step)
        relative, digest = self.job.checkpoints.save(epoch, self.parts.stateful(), tokens, self.output.writes)
        self.output.write(f"checkpoint {relative} written, sha256 {digest}")

    def tell(self) -> None:
        if self.job.on_record is not None and self.output.writes:
            self.job.on_record(run_record(self.job, self.parts))

    def _end_diverged(self) -> None:
        """What a diverged run leaves besides final.pt: the record of every slice end still ahead, then
        best.json and run.json, as a run at the end of its budget does; nothing is trained after it."""
        job, output = self.job, self.output
        epochs = job.budget.epochs
        for end in sorted(
            {*(end for end in job.slice_ends if job.end_epoch <= end < epochs), job.end_epoch} - {epochs}
        ):
            write_slice_record(job.run_dir, end, epochs)
        write_best(job, self.parts.progress, output)
        write_run_record(job, self.parts, output)
        job.checkpoints.let_go(epochs)
        output.write(f"slice done: epochs {job.start_epoch}..{job.end_epoch} of {epochs}, stopped: the run diverged")
