"""The recipe sections that spread a run over models and devices: packed-K decentralized training,
pipeline and data parallelism, frozen blocks and LoRA, and the states they give a model unit."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ebd2n.config.section import Section


class AdaptiveConsensusConfig(Section):
    """tiny-llm's adaptive consensus: after a share of the steps, gossip weakens with the learning rate."""

    start_fraction: float = Field(ge=0, le=1)
    """From step ceil(start_fraction x steps) on, each step mixes with W' = gamma W + (1 - gamma) I."""
    p: float = Field(ge=0)
    """gamma = (lr / lr_max)^p, lr_max the largest learning rate of those steps (0: plain gossip)."""


class DecentralizedConfig(Section):
    """Packed-K mode: K local models trained together on one device."""

    num_models: int = Field(ge=1)
    """K, the number of local models."""
    topology: Literal["one_peer_ring", "one_peer_exponential", "complete"] = "one_peer_ring"
    """Gossip peer choice after each step."""
    scheme: Literal["awc", "atc"] = "awc"
    """awc: clip, mix, then local step; atc: clip, local step, then mix."""
    adaptive_consensus: AdaptiveConsensusConfig | None = None
    """Gossip that weakens as the learning rate decays (None: every step mixes with W)."""
    mixing_version: Literal[1, 2] = 1
    """The peer rule (ebd2n.model.gossip): 1, the directed shift of the published 2026-09 benchmark;
    2, the reference's current reciprocal pairs (what an imported tiny-llm recipe runs)."""

    @model_validator(mode="after")
    def _peers_exist(self) -> DecentralizedConfig:
        k = self.num_models
        if self.topology == "one_peer_exponential" and k & (k - 1):
            raise ValueError(f"decentralized.topology one_peer_exponential needs num_models a power of two, got {k}")
        if (problem := unpaired_ring(self.topology, k, self.mixing_version)) is not None:
            raise ValueError(problem)
        return self


def unpaired_ring(topology: str, num_models: int, mixing_version: int) -> str | None:
    """Why the reciprocal pairs of mixing_version 2 cannot pair these ring models (None: they can)."""
    if mixing_version == 2 and topology == "one_peer_ring" and num_models % 2 and num_models != 1:
        return (
            f"decentralized.topology one_peer_ring with mixing_version 2 pairs the models: num_models must be "
            f"even, got {num_models}"
        )
    return None


class LoraConfig(Section):
    """Low-rank adapters on the linear layers of the trainable blocks."""

    rank: int = Field(gt=0)
    """Adapter rank r."""
    alpha: float = Field(default=16.0, gt=0)
    """Scale numerator: the adapter output is multiplied by alpha / rank."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the adapter input."""
    targets: list[Literal["q", "k", "v", "o", "gate", "up", "down", "experts"]] = [
        "q",
        "k",
        "v",
        "o",
        "gate",
        "up",
        "down",
    ]
    """Which projections get adapters (huggingface: q_proj ... down_proj of the attention, the dense MLP
    and the shared expert; experts: each routed expert's fused gate_up and down projections, Qwen2-MoE only)."""
    train_norms: bool = False
    """huggingface: also train the RMSNorm gains of the trainable layers and the final norm, full rank."""


FROZEN_PREFIX = "frozen by the prefix"
FROZEN_BASE = "frozen base under LoRA"
LORA = "LoRA"
FULL_RANK = "full rank"
UNIT_STATES = (FROZEN_PREFIX, FROZEN_BASE, LORA, FULL_RANK)
"""What parallel.freeze_prefix and parallel.lora make of a model unit: run.json's unit `state`
(ebd2n.train.accounting decides it, the run dashboard colours it)."""


class ParallelConfig(Section):
    """Placement over devices, pipeline, freezing and LoRA."""

    pipeline_stages: int = Field(default=1, gt=0)
    """S: pipeline stages (S x data_parallel = the job's GPUs)."""
    data_parallel: int = Field(default=1, gt=0)
    """D: data-parallel replicas."""
    pipeline_depth: int = Field(default=1, gt=0)
    """Micro-batches in flight per step in the pipeline schedule."""
    schedule: Literal["gpipe", "1f1b"] = "1f1b"
    """Pipeline schedule."""
    freeze_prefix: int = Field(default=0, ge=0)
    """Freeze the first N blocks (fine-tuning)."""
    lora: LoraConfig | None = None
    """LoRA adapters on the trainable blocks (None: full-rank training)."""
