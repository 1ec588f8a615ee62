"""The Llama-style GPT, its units, the packed K-replica model and gossip between replicas."""

from ebd2n.model.gossip import TOPOLOGIES, clip_per_replica_, mix_, mixing_matrix, peer_offset
from ebd2n.model.gpt import GPT, IGNORE_INDEX
from ebd2n.model.packed import PackedGPT
from ebd2n.model.units import Unit, model_units, unit_of_parameter

__all__ = [
    "GPT",
    "IGNORE_INDEX",
    "TOPOLOGIES",
    "PackedGPT",
    "Unit",
    "clip_per_replica_",
    "mix_",
    "mixing_matrix",
    "model_units",
    "peer_offset",
    "unit_of_parameter",
]
