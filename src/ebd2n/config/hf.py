"""A Hugging Face model as a recipe sees it: where its directory is, its architecture read from
config.json alone, and its identity (config and weights hashes).

No transformers import here: recipes, budgets and units of a Hugging Face model are computed
from config.json, before (and without) building the model.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ebd2n.atomic import sha256_file
from ebd2n.errors import UserError

FAMILIES = ("llama", "qwen2", "qwen2_moe")
"""config.json model_type values ebd2n builds, trains and counts."""

_COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_cache_dir() -> Path:
    """The local Hugging Face hub cache, where `huggingface-cli download` puts models."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def locate_model_dir(path: str | None, name: str | None, revision: str | None) -> Path:
    """The model directory of model.path, or model.name at model.revision in the local hub cache.

    Never downloads: a model absent from the cache is an error naming the key.
    """
    if path is not None:
        directory = Path(path)
        if not (directory / "config.json").is_file():
            raise UserError(f"model.path {path}: no config.json there (expected a Hugging Face model directory)")
        return directory
    if name is None or revision is None:
        raise UserError("model.name: a Hugging Face model needs model.path, or model.name with a pinned model.revision")
    repo = hub_cache_dir() / f"models--{name.replace('/', '--')}"
    commit = revision
    if not _COMMIT.fullmatch(revision):
        ref = repo / "refs" / revision
        commit = ref.read_text().strip() if ref.is_file() else revision
    directory = repo / "snapshots" / commit
    if not (directory / "config.json").is_file():
        raise UserError(
            f"model.revision {revision}: {name} at this revision is not in the local Hugging Face cache "
            f"({hub_cache_dir()}); download it there first (nothing is downloaded at run time)"
        )
    return directory


@dataclass(frozen=True)
class Architecture:
    """The shapes of a Llama, Qwen2 or Qwen2-MoE causal LM, from its config.json."""

    family: str
    vocab_size: int
    width: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_width: int
    norm_eps: float
    rope_theta: float
    tied: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    experts: int = 0
    experts_per_token: int = 0
    expert_ffn_width: int = 0
    shared_ffn_width: int = 0
    sparse_layers: tuple[int, ...] = ()

    def is_sparse(self, layer: int) -> bool:
        """Whether decoder layer `layer` has a mixture of experts (else a dense MLP)."""
        return layer in self.sparse_layers

    def projection_shapes(self) -> dict[str, tuple[int, int, bool]]:
        """(in, out, bias) of the attention projections of every layer."""
        d, q, kv = self.width, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {
            "q": (d, q, self.qkv_bias),
            "k": (d, kv, self.qkv_bias),
            "v": (d, kv, self.qkv_bias),
            "o": (q, d, self.o_bias),
        }

    def mlp_shapes(self, ffn: int) -> dict[str, tuple[int, int, bool]]:
        """(in, out, bias) of a SwiGLU MLP's projections at hidden width `ffn`."""
        d, bias = self.width, self.mlp_bias
        return {"gate": (d, ffn, bias), "up": (d, ffn, bias), "down": (ffn, d, bias)}

    def parameters(self) -> int:
        """Every parameter of the model (a tied head counts once)."""
        d = self.width
        total = self.vocab_size * d * (1 if self.tied else 2) + d  # embedding, head, final norm
        for layer in range(self.layers):
            total += 2 * d + sum(linear_parameters(*s) for s in self.projection_shapes().values())
            if self.is_sparse(layer):
                total += self.experts * d  # router
                total += self.experts * 3 * d * self.expert_ffn_width  # fused gate_up and down
                total += sum(linear_parameters(*s) for s in self.mlp_shapes(self.shared_ffn_width).values()) + d
            else:
                total += sum(linear_parameters(*s) for s in self.mlp_shapes(self.ffn_width).values())
        return total


def linear_parameters(fan_in: int, fan_out: int, bias: bool) -> int:
    """Weights (and bias) of one linear layer."""
    return fan_in * fan_out + (fan_out if bias else 0)


def architecture(config: dict, source: str = "config.json") -> Architecture:
    """The architecture of a config.json mapping; errors name the file and the key."""
    family = config.get("model_type")
    if family not in FAMILIES:
        raise UserError(f"{source}: model_type {family!r} is not supported (supported: {', '.join(FAMILIES)})")
    try:
        width, heads, layers = (
            int(config["hidden_size"]),
            int(config["num_attention_heads"]),
            int(config["num_hidden_layers"]),
        )
        rope = config.get("rope_parameters") or {}
        common = {
            "family": family,
            "vocab_size": int(config["vocab_size"]),
            "width": width,
            "layers": layers,
            "heads": heads,
            "kv_heads": int(config.get("num_key_value_heads") or heads),
            "head_dim": int(config.get("head_dim") or width // heads),
            "ffn_width": int(config["intermediate_size"]),
            "norm_eps": float(config.get("rms_norm_eps", 1e-6)),
            "rope_theta": float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
            "tied": bool(config.get("tie_word_embeddings", False)),
            **_biases(family, config),
        }
        if family != "qwen2_moe" or not int(config.get("num_experts", 0)):
            return Architecture(**common)
        step, dense = int(config.get("decoder_sparse_step", 1)), set(config.get("mlp_only_layers") or [])
        return Architecture(
            **common,
            experts=int(config["num_experts"]),
            experts_per_token=int(config["num_experts_per_tok"]),
            expert_ffn_width=int(config["moe_intermediate_size"]),
            shared_ffn_width=int(config["shared_expert_intermediate_size"]),
            sparse_layers=tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0),
        )
    except KeyError as missing:
        raise UserError(f"{source}: missing key {missing.args[0]}") from None
    except (TypeError, ValueError) as error:
        raise UserError(f"{source}: {error}") from None


def _biases(family: str, config: dict) -> dict:
    """Which projections carry a bias in each family's modeling code."""
    if family == "llama":
        attention = bool(config.get("attention_bias", False))
        return {"qkv_bias": attention, "o_bias": attention, "mlp_bias": bool(config.get("mlp_bias", False))}
    qkv = True if family == "qwen2" else bool(config.get("qkv_bias", True))
    return {"qkv_bias": qkv, "o_bias": False, "mlp_bias": False}


def read_config(directory: Path) -> dict:
    """config.json of a model directory."""
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(config, dict):
        raise UserError(f"{path}: expected a JSON object")
    return config


def read_architecture(directory: Path) -> Architecture:
    """The architecture of the model in `directory`."""
    return architecture(read_config(directory), str(directory / "config.json"))


def weight_files(directory: Path) -> list[Path]:
    """The model's safetensors files (one file, or the shards of an index)."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise UserError(f"{directory}: no .safetensors weights (only safetensors weights are read)")
    return files


def model_identity(directory: Path, name: str | None, revision: str | None) -> dict:
    """What identifies the model's numbers: name, revision, config.json and weights hashes.

    A hub-cache file is a link to a blob named by its SHA-256, which is used without reading
    the file; other files are hashed (once per process for unchanged files).
    """
    config_sha = sha256_file(directory / "config.json")
    weights = hashlib.sha256()
    for path in weight_files(directory):
        weights.update(f"{path.name}:{_file_sha256(path)}\n".encode())
    return {"name": name, "revision": revision, "config_sha256": config_sha, "weights_sha256": weights.hexdigest()}


def _file_sha256(path: Path) -> str:
    target = path.resolve()
    if path.is_symlink() and re.fullmatch(r"[0-9a-f]{64}", target.name):
        return target.name
    stat = target.stat()
    return _hashed(str(target), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _hashed(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(path)
