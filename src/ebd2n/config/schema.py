"""The recipe: one run's complete configuration, as a strict typed schema.

Unknown keys and wrong types are errors that name the key, so a typo in a campaign never
silently trains the default. Each field's docstring says what it controls.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from ebd2n.config.checkpoint_policy import DEFAULT_CHECKPOINT_POLICY, CheckpointPolicyName
from ebd2n.config.parallelism import DecentralizedConfig, ParallelConfig
from ebd2n.config.section import Section


class ModelConfig(Section):
    """Llama-style decoder shape, or a Hugging Face causal LM whose config.json gives the shape."""

    source: Literal["gpt", "huggingface"] = "gpt"
    """gpt: ebd2n's own decoder of the shape below; huggingface: a Llama, Qwen2 or Qwen2-MoE model
    (model.path, or model.name + model.revision) whose config.json sets the shape fields."""
    path: str | None = None
    """huggingface: a local model directory in the Hugging Face layout (config.json, *.safetensors)."""
    name: str | None = None
    """huggingface: hub model name (Qwen/Qwen1.5-MoE-A2.7B), read from the local hub cache only."""
    revision: str | None = None
    """huggingface: the pinned hub revision (commit hash, or a ref the local cache resolves) of model.name."""
    vocab_size: int | None = Field(default=None, gt=0)
    """Vocabulary size (tokenizer trained to this size for the embedded corpus)."""
    layers: int | None = Field(default=None, gt=0)
    """Number of transformer blocks."""
    width: int | None = Field(default=None, gt=0)
    """Residual stream width (d_model)."""
    heads: int | None = Field(default=None, gt=0)
    """Attention heads; width must divide by heads, and head_dim must be even for rotary."""
    ffn_width: int | None = Field(default=None, gt=0)
    """Hidden width of the SwiGLU MLP (huggingface: intermediate_size, of the dense layers)."""
    context_length: int = Field(gt=0)
    """Tokens of context per sequence; blocks hold context_length + 1 tokens."""
    rope_theta: float = Field(default=10000.0, gt=0)
    """Rotary embedding base (Llama default)."""
    norm_eps: float = Field(default=1e-5, gt=0)
    """RMSNorm epsilon."""
    init_std: float = Field(default=0.02, gt=0)
    """Std of the normal init; residual projections are scaled by 1/sqrt(2 * layers) (GPT-2)."""

    @model_validator(mode="before")
    @classmethod
    def _shape_from_config_json(cls, data: Any) -> Any:
        """huggingface: the shape fields come from the model's config.json (a recipe may repeat them, not
        change them)."""
        if not isinstance(data, dict) or data.get("source") != "huggingface":
            return data
        from ebd2n.config.hf import locate_model_dir, read_architecture
        from ebd2n.errors import UserError

        arch = read_architecture(locate_model_dir(data.get("path"), data.get("name"), data.get("revision")))
        shape = {
            "vocab_size": arch.vocab_size,
            "layers": arch.layers,
            "width": arch.width,
            "heads": arch.heads,
            "ffn_width": arch.ffn_width,
            "rope_theta": arch.rope_theta,
            "norm_eps": arch.norm_eps,
        }
        for key, value in shape.items():
            if data.get(key) is not None and data[key] != value:
                raise UserError(
                    f"model.{key}: {data[key]} differs from the model's config.json ({value}); leave it out"
                )
        return {**data, **shape}

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.source == "huggingface":
            return self
        for key in ("vocab_size", "layers", "width", "heads", "ffn_width"):
            if getattr(self, key) is None:
                raise ValueError(f"model.{key}: required for model.source gpt")
        for key in ("path", "name", "revision"):
            if getattr(self, key) is not None:
                raise ValueError(f"model.{key}: only for model.source huggingface")
        if self.width % self.heads:
            raise ValueError(f"model.width ({self.width}) must be divisible by model.heads ({self.heads})")
        if (self.width // self.heads) % 2:
            raise ValueError("model.width / model.heads must be even (rotary embedding pairs)")
        return self


class SupervisedConfig(Section):
    """Prompt/completion records (supervised fine-tuning): the prompt's tokens carry no loss."""

    prompt_field: str = "prompt"
    """Column holding the prompt (JSONL, Parquet, Hub; for text-to-SQL: the question and the schema)."""
    completion_field: str = "completion"
    """Column holding the completion the model learns (text-to-SQL: the query)."""
    format: Literal["plain", "chat"] = "plain"
    """plain: prompt, a newline, completion, EOS; chat: the tokenizer's chat template (a user turn,
    then an assistant turn), from the tokenizer_config.json beside data.tokenizer."""
    packing: bool = False
    """true: records follow each other in the token stream (blocks cut across them); false: each
    record fills one block, padded (masked) to model.context_length + 1 tokens or truncated to it."""


class DataConfig(Section):
    """Where the token cache comes from and where it lives."""

    source: Literal["synthetic", "huggingface", "local", "sql-synthetic"] = "synthetic"
    """synthetic: the embedded corpus; huggingface: a Hub data set by revision; local: files;
    sql-synthetic: the embedded text-to-SQL records (needs data.supervised)."""
    cache_dir: str = "results/caches/synthetic"
    """Directory of the prepared cache (shared by every run of a campaign)."""
    dataset: str | None = None
    """Hub data set name (allenai/c4) or a local file / glob (text, JSONL, Parquet)."""
    dataset_config: str | None = None
    """Hub configuration name (c4: en)."""
    revision: str | None = None
    """Pinned Hub revision of the data set (commit hash)."""
    text_field: str = "text"
    """Column holding the document text (JSONL, Parquet, Hub)."""
    validation_split: str | None = None
    """Source split used for validation (c4: validation); None holds out validation_fraction."""
    validation_fraction: float = Field(default=0.05, gt=0, lt=1)
    """Share of documents held out for validation when the source has no validation split."""
    tokenizer: str | None = None
    """Hub tokenizer name, local tokenizer.json, or a model directory holding one; None trains a BPE tokenizer
    on the train split. Supervised records also read its tokenizer_config.json (chat template, EOS)."""
    tokenizer_revision: str | None = None
    """Pinned Hub revision of the tokenizer."""
    dataset_copy: str | None = None
    """Local copy of the Hub data set in the hub's file layout (a snapshots/<commit> directory of the
    Hugging Face cache, or a `huggingface-cli download --local-dir` directory): read instead of the network."""
    tokenizer_copy: str | None = None
    """Local copy of the Hub tokenizer repository in the same layouts (its tokenizer.json is used)."""
    shuffle_seed: int = Field(default=42, ge=0)
    """Seed of the document shuffle at preparation (fixed across runtime seeds)."""
    synthetic_seed: int = Field(default=0, ge=0)
    """Seed of the embedded corpus generator."""
    synthetic_train_bytes: int = Field(default=4_000_000, gt=0)
    """Size of the embedded training text in bytes."""
    synthetic_validation_bytes: int = Field(default=400_000, gt=0)
    """Size of the embedded validation text in bytes."""
    prepare_train_tokens: int | None = Field(default=None, gt=0)
    """Stop preparing the train split after this many tokens (None: the whole split); a padded
    supervised cache stops at the last whole block before it."""
    prepare_validation_tokens: int | None = Field(default=None, gt=0)
    """Stop preparing the validation split after this many tokens (None: the whole split); a padded
    supervised cache stops at the last whole block before it."""
    tokenize_batch_size: int = Field(default=256, gt=0)
    """Documents per tokenizer batch call."""
    shard_tokens: int = Field(default=16_777_216, gt=0)
    """Tokens per shard file."""
    supervised: SupervisedConfig | None = None
    """Prompt/completion records instead of documents (None: language modelling on documents)."""

    @model_validator(mode="after")
    def _records_need_supervised(self) -> DataConfig:
        if self.source == "sql-synthetic" and self.supervised is None:
            raise ValueError(
                "data.supervised: data.source sql-synthetic holds prompt/completion records; set data.supervised"
            )
        if self.source == "synthetic" and self.supervised is not None:
            raise ValueError(
                "data.supervised: data.source synthetic holds documents; use sql-synthetic or files of records"
            )
        return self


class OptimizerConfig(Section):
    """AdamW and the token-based learning-rate schedule."""

    lr: float = Field(gt=0)
    """Peak learning rate."""
    beta1: float = Field(default=0.9, ge=0, lt=1)
    """AdamW first-moment decay."""
    beta2: float = Field(default=0.999, ge=0, lt=1)
    """AdamW second-moment decay."""
    eps: float = Field(default=1e-8, gt=0)
    """AdamW epsilon."""
    weight_decay: float = Field(default=0.1, ge=0)
    """Decoupled weight decay, applied to matrices only (not norms)."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Global gradient-norm clip."""
    accum_iter: int = Field(default=1, ge=1)
    """AccumAdamW (tiny-llm's): moments committed once per this many steps from their mean gradient; 1: AdamW."""
    warmup_fraction: float = Field(default=0.05, ge=0, lt=1)
    """Share of the token budget spent in linear warm-up (unless warmup_tokens)."""
    warmup_tokens: int | None = Field(default=None, gt=0)
    """Linear warm-up over this many tokens whatever the budget, in place of warmup_fraction (tiny-llm's
    warmup_steps x batch_tokens): runs of one recipe at several horizons then share their trunk."""
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    """Cosine decay ends at this fraction of the peak (schedule cosine only; wsd decays to zero)."""
    schedule: Literal["cosine", "wsd"] = "cosine"
    """cosine: warm-up, then cosine to min_lr_ratio over the rest; wsd (warm-up, stable, decay, as
    tiny-llm's): warm-up, the peak held, then decay_shape to zero over the last decay_fraction."""
    decay_fraction: float = Field(default=0.1, ge=0, le=1)
    """wsd: share of the token budget, at its end, in which the learning rate decays (0: never)."""
    decay_shape: Literal["sqrt", "linear", "cosine"] = "sqrt"
    """wsd: the decay's shape over progress p in [0, 1]: sqrt 1 - sqrt(p) (tiny-llm's), linear 1 - p,
    cosine (1 + cos(pi p)) / 2."""

    @model_validator(mode="after")
    def _decay_needs_wsd(self) -> OptimizerConfig:
        if self.schedule != "wsd" and (self.decay_fraction != 0.1 or self.decay_shape != "sqrt"):
            raise ValueError("optimizer.decay_fraction and decay_shape shape the wsd schedule; set schedule: wsd")
        return self


class TrainingConfig(Section):
    """Token budget, batching, checkpoints."""

    tokens_per_parameter: float | None = Field(default=20.0, gt=0)
    """Total budget in tokens per model parameter (ignored when max_tokens is set)."""
    epoch_tokens_per_parameter: float | None = Field(default=0.5, gt=0)
    """Epoch length in tokens per parameter (ignored when epoch_tokens is set)."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Explicit total token budget."""
    epoch_tokens: int | None = Field(default=None, gt=0)
    """Explicit epoch length in tokens."""
    batch_tokens: int = Field(default=32768, gt=0)
    """Tokens per optimizer step (gradient accumulation reaches it)."""
    micro_batch_size: int = Field(default=32, gt=0)
    """Sequences per forward/backward pass."""
    checkpoint_policy: CheckpointPolicyName = DEFAULT_CHECKPOINT_POLICY
    """Which checkpoints a run keeps: a name in CHECKPOINT_POLICIES, which says what each keeps."""
    checkpoint_epochs: list[Annotated[int, Field(gt=0)]] = Field(default=[1], min_length=1)
    """The `interval` policy's one K, or the `explicit` policy's epoch boundaries (as in tiny-llm)."""
    keep_pre_decay: bool = False
    """wsd: also keep the checkpoint of the last epoch end before the decay, where a longer horizon
    branches (set on every run of a campaign with grid.horizons)."""
    log_every: int = Field(default=20, gt=0)
    """Optimizer steps between progress lines in train.log."""
    max_consecutive_skips: int = Field(default=10, gt=0)
    """This many steps in a row with non-finite gradients: the run diverged (rule non-finite)."""
    divergence_margin: float | None = Field(default=1.0, ge=0)
    """Nats above ln(vocab_size), uniform guessing's loss, that make a training step's loss over bound; null: off."""
    divergence_patience: int = Field(default=20, gt=0)
    """After warm-up, this many steps in a row over the loss bound: the run diverged (rule loss-bound)."""
    init_from: str | None = None
    """Start from the weights of this ebd2n checkpoint (fine-tuning)."""

    @field_validator("checkpoint_epochs", mode="before")
    @classmethod
    def _one_epoch_is_a_list(cls, value: Any) -> Any:
        """`checkpoint_epochs: 2` reads as [2], as tiny-llm reads it."""
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _checkpoint_epochs_fit_the_policy(self) -> TrainingConfig:
        if self.checkpoint_policy == "interval" and len(self.checkpoint_epochs) != 1:
            raise ValueError("checkpoint_epochs: the interval policy takes one value, the interval K")
        return self


class EvaluationConfig(Section):
    """Per-epoch subset validation and full validation."""

    subset_blocks: int = Field(default=1024, gt=0)
    """Validation blocks evaluated after each epoch (fewer if the split is smaller)."""
    batch_size: int = Field(default=128, gt=0)
    """Sequences per evaluation batch."""
    seed: int = Field(default=12345, ge=0)
    """Seed choosing the fixed epoch-subset blocks."""


class RuntimeConfig(Section):
    """How and where this run executes; seed is the only field that changes the result."""

    seed: int = Field(default=42, ge=0)
    """Runtime seed: initialisation, data order, dropout."""
    output_dir: str = "runs/default"
    """Run directory (recipe.yaml, train.log, metrics.jsonl, checkpoints)."""
    device: str = "auto"
    """auto (CUDA when available, else CPU), cpu, cuda, cuda:N."""
    deterministic: bool = False
    """Deterministic algorithms (bitwise-reproducible on CPU)."""
    amp: bool = True
    """BF16 autocast on CUDA (CPU computes in FP32, unless cuda_path_on_cpu)."""
    compile: bool = False
    """torch.compile the model."""
    cuda_path_on_cpu: bool = False
    """Test-only: a CPU run takes the CUDA path's decisions (BF16 autocast when amp, fused AdamW), so CI
    runs that code without a GPU; no effect on CUDA. CPU BF16 is slower than FP32: not for real runs."""
    purpose: str = ""
    """Free text shown on the run dashboard (why this run exists)."""
    cpu_threads: int | None = Field(default=None, gt=0)
    """torch CPU threads (None: PyTorch's default)."""
    ignored_keys: dict[str, Any] = {}
    """Keys of an imported tiny-llm recipe that ebd2n does not use (recorded, never applied)."""


class Recipe(Section):
    """One run's complete configuration."""

    model: ModelConfig
    data: DataConfig = DataConfig()
    optimizer: OptimizerConfig
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    decentralized: DecentralizedConfig | None = None
    parallel: ParallelConfig = ParallelConfig()

    @model_validator(mode="after")
    def _cross_section(self) -> Recipe:
        if self.parallel.freeze_prefix > self.model.layers:
            raise ValueError(
                f"parallel.freeze_prefix ({self.parallel.freeze_prefix}) exceeds model.layers ({self.model.layers})"
            )
        if self.model.source == "huggingface" and (self.decentralized is not None or self.parallel.data_parallel > 1):
            raise ValueError(
                "model.source: a huggingface model trains synchronously over pipeline stages "
                "(no decentralized, data_parallel 1)"
            )
        if self.model.source == "gpt" and self.parallel.lora is not None and self.parallel.lora.train_norms:
            raise ValueError("parallel.lora.train_norms: only for model.source huggingface (a GPT unit holds its norm)")
        if self.model.source == "gpt" and self.parallel.lora is not None and "experts" in self.parallel.lora.targets:
            raise ValueError("parallel.lora.targets: experts only for a huggingface mixture-of-experts model")
        if self.decentralized is not None and self.parallel.lora is not None:
            raise ValueError("parallel.lora: LoRA fine-tuning is for synchronous runs; remove decentralized or lora")
        if self.training.max_tokens is None and self.training.tokens_per_parameter is None:
            raise ValueError("training: set max_tokens or tokens_per_parameter")
        if self.training.epoch_tokens is None and self.training.epoch_tokens_per_parameter is None:
            raise ValueError("training: set epoch_tokens or epoch_tokens_per_parameter")
        return self

    @property
    def mode(self) -> str:
        """Training mode name used in run ids: synchronous or packed-K."""
        if self.decentralized is None:
            return "synchronous"
        return f"packed-{self.decentralized.num_models}"
