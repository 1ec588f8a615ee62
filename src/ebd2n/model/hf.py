"""Hugging Face causal LMs (Llama, Qwen2, Qwen2-MoE) as ebd2n models, through transformers.

transformers is imported inside the functions: it costs seconds, and GPT runs never need it.
The model is built on the meta device and only the parameters a stage keeps are materialised
from the safetensors files, so a pipeline stage never holds the whole model.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from ebd2n.config.hf import FAMILIES, read_config, weight_files
from ebd2n.errors import UserError
from ebd2n.targets import IGNORE_INDEX

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
"""Files of a model directory that travel with its weights (tokenizer, chat template, generation defaults)."""

_EXPERTS = ".mlp.experts."


class HFCausalLM(nn.Module):
    """A transformers causal LM with GPT's interface: forward(idx, targets) -> (logits, loss), param_groups.

    Its children are the transformers model's own (`model`, `lm_head`), so its state_dict keys
    are the model's (experts fused: mlp.experts.gate_up_proj (E, 2F, D), down_proj (E, D, F)).
    The forward runs the decoder layers' own modules half by half (`run_segments`), as a
    pipeline stage does, with causal SDPA and no mask, as transformers' model does unpadded.
    """

    def __init__(self, causal_lm: nn.Module) -> None:
        super().__init__()
        self.config = causal_lm.config
        self.model = causal_lm.model
        self.lm_head = causal_lm.lm_head

    def segments(self) -> list[tuple[str, int | None]]:
        """The forward as (piece, layer): embedding, each layer's attention and mlp halves, head."""
        halves = [(half, i) for i in range(len(self.model.layers)) for half in ("attention", "mlp")]
        return [("embedding", None), *halves, ("head", None)]

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) -> logits (B, T, vocab) and the mean cross-entropy over targets not IGNORE_INDEX."""
        logits = run_segments(self, self.segments(), idx)  # (B, T, vocab)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.reshape(-1), ignore_index=IGNORE_INDEX)
        return logits, loss

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups: weight decay on matrices and expert tensors, not on norms and biases."""
        decay = [p for p in self.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    def reset_rotary(self) -> None:
        """Recompute the rotary tables (non-persistent buffers, on the meta device after `skeleton`) on the CPU."""
        with torch.device("cpu"):
            self.model.rotary_emb = type(self.model.rotary_emb)(config=self.config)


def run_segments(module: nn.Module, segments: list[tuple[str, int | None]], x: torch.Tensor) -> torch.Tensor:
    """Run `segments` of a model held by `module` (module.model.layers[i] indexable by str(i) or i).

    Token ids (B, T) in when the embedding is among them, else the residual stream (B, T, width);
    logits (B, T, vocab) out when the head is among them, else the residual stream.
    """
    T = x.shape[1]
    positions = torch.arange(T, device=x.device).unsqueeze(0)  # (1, T)
    rotary = None
    for piece, index in segments:
        if piece == "embedding":
            x = module.model.embed_tokens(x)  # (B, T, width)
        elif piece == "head":
            x = module.lm_head(module.model.norm(x))  # (B, T, vocab)
        else:
            layer = module.model.layers[str(index) if isinstance(module.model.layers, nn.ModuleDict) else index]
            if piece == "attention":
                if rotary is None:
                    rotary = module.model.rotary_emb(x, positions)  # (cos, sin), each (1, T, head_dim)
                attended, _ = layer.self_attn(
                    hidden_states=layer.input_layernorm(x),
                    attention_mask=None,
                    position_ids=positions,
                    position_embeddings=rotary,
                )
                x = x + attended
            else:
                x = x + layer.mlp(layer.post_attention_layernorm(x))
    return x


class HFStageModule(nn.Module):
    """The units of one pipeline stage of an HFCausalLM, under the model's parameter names.

    Placement keeps each attention and MLP half whole (unit segments), so a stage is a run of
    segments; `model.layers` is a ModuleDict keyed by layer index, whose keys spell the same
    state_dict names as the whole model's ModuleList.
    """

    param_groups = HFCausalLM.param_groups

    def __init__(self, whole: HFCausalLM, units: list, autocast: Callable) -> None:
        super().__init__()
        self.autocast = autocast
        self.plan: list[tuple[str, int | None]] = []
        for unit in units:
            piece = (
                ("embedding", None)
                if unit.kind == "embedding"
                else (("head", None) if unit.block is None else (unit.segment.rpartition(".")[2], unit.block))
            )
            if not self.plan or self.plan[-1] != piece:
                self.plan.append(piece)
        self.model = nn.Module()
        self.model.layers = nn.ModuleDict()
        self.model.rotary_emb = whole.model.rotary_emb
        for piece, index in self.plan:
            if piece == "embedding":
                self.model.embed_tokens = whole.model.embed_tokens
            elif piece == "head":
                self.model.norm, self.lm_head = whole.model.norm, whole.lm_head
            else:
                source = whole.model.layers[index]
                holder = self.model.layers[str(index)] if str(index) in self.model.layers else nn.Module()
                self.model.layers[str(index)] = holder
                if piece == "attention":
                    holder.input_layernorm, holder.self_attn = source.input_layernorm, source.self_attn
                else:
                    holder.post_attention_layernorm, holder.mlp = source.post_attention_layernorm, source.mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            x = run_segments(self, self.plan, x)
        if (
            torch.is_grad_enabled() and not x.requires_grad
        ):  # a wholly frozen stage: the schedule still runs its backward
            x.requires_grad_()
        return x


def transformers_config(directory: Path):
    """The transformers config object of a model directory (family checked)."""
    from transformers import AutoConfig

    config = read_config(directory)
    if config.get("model_type") not in FAMILIES:
        raise UserError(f"{directory / 'config.json'}: model_type {config.get('model_type')!r} is not supported")
    return AutoConfig.from_pretrained(directory, local_files_only=True)


def skeleton(directory: Path) -> HFCausalLM:
    """The model of `directory` with every tensor on the meta device (nothing allocated)."""
    from transformers import AutoModelForCausalLM

    config = transformers_config(directory)
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        return HFCausalLM(AutoModelForCausalLM.from_config(config))


def load_model(directory: Path, keep: Callable[[str], bool] = lambda name: True) -> HFCausalLM:
    """The model of `directory`, its parameters named by `keep` read from its safetensors files
    (in float32), the others left on the meta device."""
    model = skeleton(directory)
    names = [name for name, _ in model.named_parameters() if keep(name)]
    tensors = read_weights(directory, names)
    for name in names:
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner)
        module._parameters[leaf] = nn.Parameter(tensors[name].float(), requires_grad=True)
    if model.config.tie_word_embeddings and keep("lm_head.weight"):
        model.lm_head.weight = model.model.embed_tokens.weight
    model.reset_rotary()
    return model


def read_weights(directory: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """Tensors of the model's parameters `names`, from its safetensors files.

    Checkpoints in the hub layout store each expert apart (experts.{e}.gate_proj.weight ...);
    they are stacked into transformers' fused expert tensors here.
    """
    stored: dict[str, Path] = {}
    for path in weight_files(directory):
        with safe_open(path, "pt") as handle:
            stored.update(dict.fromkeys(handle.keys(), path))
    tensors = {}
    for name in names:
        if name in stored:
            tensors[name] = _get(stored, name)
        elif _EXPERTS in name and name.endswith((".gate_up_proj", ".down_proj")):
            prefix, _, fused = name.rpartition(".")
            experts = []
            for e in range(_count_experts(stored, prefix)):
                if fused == "gate_up_proj":  # gate rows first, then up rows (the forward's chunk(2) order)
                    experts.append(
                        torch.cat(
                            [
                                _get(stored, f"{prefix}.{e}.gate_proj.weight"),
                                _get(stored, f"{prefix}.{e}.up_proj.weight"),
                            ]
                        )
                    )
                else:
                    experts.append(_get(stored, f"{prefix}.{e}.down_proj.weight"))
            tensors[name] = torch.stack(experts)
        elif name == "lm_head.weight" and "model.embed_tokens.weight" in stored:
            tensors[name] = _get(stored, "model.embed_tokens.weight")  # tied
        else:
            raise UserError(f"{directory}: weights lack {name}")
    return tensors


def _get(stored: dict[str, Path], name: str) -> torch.Tensor:
    if name not in stored:
        raise UserError(f"{next(iter(stored.values())).parent}: weights lack {name}")
    with safe_open(stored[name], "pt") as handle:
        return handle.get_tensor(name)


def _count_experts(stored: dict[str, Path], prefix: str) -> int:
    return len({key[len(prefix) + 1 :].split(".")[0] for key in stored if key.startswith(prefix + ".")})


@torch.no_grad()
def save_model(state: dict[str, torch.Tensor], source: Path, out_dir: Path) -> None:
    """Write `state` (HFCausalLM keys) as a Hugging Face model directory like `source`'s.

    transformers writes the weights in the source config's dtype (experts back in the hub
    layout) and the config; the tokenizer files are copied from `source`; `out_dir` appears whole
    or not at all.
    """
    from transformers import AutoModelForCausalLM

    config = transformers_config(source)
    with torch.device("meta"):
        causal_lm = AutoModelForCausalLM.from_config(config)
    dtype = config.dtype if isinstance(config.dtype, torch.dtype) else torch.float32  # the source's own (bf16 for Qwen)
    causal_lm.load_state_dict(
        {k: v.detach().to(dtype).contiguous() for k, v in state.items()}, assign=True, strict=True
    )
    if config.tie_word_embeddings:
        causal_lm.tie_weights()

    def write(staging: Path) -> None:
        causal_lm.save_pretrained(staging)
        for name in TOKENIZER_FILES:
            if (source / name).is_file() and not (staging / name).exists():
                shutil.copyfile(source / name, staging / name)

    _publish(Path(out_dir), write)


def _publish(out_dir: Path, write: Callable[[Path], None]) -> None:
    """`write` a model directory into a staging directory beside `out_dir`, then rename it into place:
    `out_dir` appears whole or not at all, and never replaces a directory that appeared meanwhile."""
    from ebd2n.atomic import fsync_dir, fsync_tree, rename_new

    _quiet_transformers()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.parent / f".{out_dir.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        write(staging)
        fsync_tree(staging)
        rename_new(staging, out_dir)
    except FileExistsError:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserError(
            f"OUT_DIR {out_dir}: appeared while the model was written; nothing replaced, choose a new directory"
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(out_dir.parent)


TINY_CONFIGS: dict[str, dict] = {
    "llama": {
        "model_type": "llama",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
    },
    "qwen2": {
        "model_type": "qwen2",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "tie_word_embeddings": True,
    },
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 256,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 48,
        "norm_topk_prob": False,
        "tie_word_embeddings": False,
    },
}
"""Tiny configurations of each family: tests and the demo fine-tune build random models from them."""


def _quiet_transformers() -> None:
    """No progress bars from save_pretrained: ebd2n's commands print their own lines."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def init_model(
    family: str,
    out_dir: Path,
    vocab_size: int,
    seed: int = 0,
    tokenizer: Path | None = None,
    tokenizer_config: dict | None = None,
) -> Path:
    """Write a random-weights model of a tiny `family` configuration in the Hugging Face layout, offline.

    With `tokenizer` (a tokenizer.json) the vocabulary is the tokenizer's, and the file is copied
    into the directory beside a tokenizer_config.json (`tokenizer_config`); else `vocab_size` is used.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if family not in TINY_CONFIGS:
        raise UserError(f"family {family}: not one of {', '.join(TINY_CONFIGS)}")
    if Path(out_dir).exists():
        raise UserError(f"OUT_DIR {out_dir}: already exists; choose a new directory")
    settings = {**TINY_CONFIGS[family], "vocab_size": vocab_size}
    if tokenizer is not None:
        if not Path(tokenizer).is_file():
            raise UserError(f"--tokenizer {tokenizer}: no such file")
        settings["vocab_size"] = _tokenizer_vocab(Path(tokenizer))
    model_type = settings.pop("model_type")
    config = AutoConfig.for_model(model_type, **settings)
    torch.manual_seed(seed)
    causal_lm = AutoModelForCausalLM.from_config(config)

    def write(staging: Path) -> None:
        causal_lm.save_pretrained(staging)
        if tokenizer is not None:
            shutil.copyfile(tokenizer, staging / "tokenizer.json")
            settings = tokenizer_config or {"tokenizer_class": "PreTrainedTokenizerFast"}
            (staging / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n")

    _publish(Path(out_dir), write)
    return Path(out_dir)


def _tokenizer_vocab(path: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path)).get_vocab_size()
