"""The units of a Hugging Face causal LM, from its config.json alone.

Per decoder layer: the input norm, each attention projection (q, k, v, o), the post-attention
norm, then either the dense MLP or the router, the routed experts and the shared expert (with its
sigmoid gate); then the final norm and the head. For Qwen1.5-MoE-A2.7B (24 sparse layers) that
is 24 x 9 = 216 decoder units, the seed dashboard's figure, plus the embedding, final norm and head.
"""

from __future__ import annotations

from ebd2n.config.hf import Architecture, linear_parameters
from ebd2n.model.unit import Unit


def hf_units(arch: Architecture, context_length: int) -> list[Unit]:
    """Units in forward order; their parameters sum to arch.parameters() (a tied head owns none).

    FLOPs per token: 2 per multiply-add of the matrix products; the o unit also counts QK^T and AV
    over `context_length` positions, the experts unit its experts_per_token experts.
    """
    d, v, t = arch.width, arch.vocab_size, context_length
    units = [Unit("embedding", "embedding", None, v * d, 0, ("model.embed_tokens.",))]
    for i in range(arch.layers):
        layer, attention, mlp = f"model.layers.{i}.", f"block{i}.attention", f"block{i}.mlp"
        units.append(
            Unit(f"block{i}.attention_norm", "norm", i, d, 0, (f"{layer}input_layernorm.",), segment=attention)
        )
        for name, (fan_in, fan_out, bias) in arch.projection_shapes().items():
            flops = 2 * fan_in * fan_out + (2 * 2 * t * arch.heads * arch.head_dim if name == "o" else 0)
            units.append(
                Unit(
                    f"block{i}.{name}",
                    "attention",
                    i,
                    linear_parameters(fan_in, fan_out, bias),
                    flops,
                    (f"{layer}self_attn.{name}_proj.",),
                    ((name, fan_in, fan_out),),
                    attention,
                )
            )
        units.append(Unit(f"block{i}.mlp_norm", "norm", i, d, 0, (f"{layer}post_attention_layernorm.",), segment=mlp))
        if not arch.is_sparse(i):
            units.append(_mlp(f"block{i}.mlp", "mlp", i, arch, arch.ffn_width, (f"{layer}mlp.",), mlp))
            continue
        e, f = arch.experts, arch.expert_ffn_width
        units.append(Unit(f"block{i}.router", "router", i, e * d, 2 * d * e, (f"{layer}mlp.gate.",), segment=mlp))
        units.append(
            Unit(
                f"block{i}.experts",
                "experts",
                i,
                e * 3 * d * f,
                arch.experts_per_token * 2 * 3 * d * f,
                (f"{layer}mlp.experts.",),
                (("experts", d, 2 * f),) * e + (("experts", f, d),) * e,
                mlp,
            )
        )
        shared = _mlp(
            f"block{i}.shared_expert",
            "shared_expert",
            i,
            arch,
            arch.shared_ffn_width,
            (f"{layer}mlp.shared_expert.", f"{layer}mlp.shared_expert_gate."),
            mlp,
        )
        units.append(
            Unit(
                shared.name,
                shared.kind,
                i,
                shared.parameters + d,
                shared.flops_per_token + 2 * d,
                shared.param_prefixes,
                shared.projections,
                mlp,
            )
        )
    units.append(Unit("norm", "norm", None, d, 0, ("model.norm.",), segment="head"))
    units.append(
        Unit(
            "head",
            "head",
            None,
            0 if arch.tied else v * d,
            2 * v * d,
            () if arch.tied else ("lm_head.",),
            segment="head",
        )
    )
    return units


def _mlp(
    name: str, kind: str, block: int, arch: Architecture, ffn: int, prefixes: tuple[str, ...], segment: str
) -> Unit:
    shapes = arch.mlp_shapes(ffn)
    return Unit(
        name,
        kind,
        block,
        sum(linear_parameters(*s) for s in shapes.values()),
        sum(2 * fan_in * fan_out for fan_in, fan_out, _ in shapes.values()),
        prefixes,
        tuple((p, fan_in, fan_out) for p, (fan_in, fan_out, _) in shapes.items()),
        segment,
    )
