"""Model geometry read from the model's own Hugging Face ``config.json``.

Only what changes the kernels is kept. Dense decoder families are served: Llama (including
llama3 RoPE scaling), Mistral, Qwen2 (q/k/v bias) and Qwen3 (per-head q/k RMSNorm); and the
mixture-of-experts families whose layers are these plus routed experts: Qwen3-MoE and Mixtral
(``_experts``). Both the
``rope_theta``/``rope_scaling`` keys of older configs and the ``rope_parameters`` block of
newer ones are read; nothing is guessed from the model's name. A quantized checkpoint's
``quantization_config`` is read by ``compiler/quant.py`` (``load_config`` returns both).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..schema import Experts, Geometry, RopeScaling, WeightQuant
from .errors import InputError
from .inputs import read_text, show
from .quant import quant_from_config

#: model_type → (q/k/v bias, per-head q/k norm). Anything else is refused.
FAMILIES: dict[str, tuple[bool, bool]] = {
    "llama": (False, False),
    "mistral": (False, False),
    "qwen2": (True, False),
    "qwen3": (False, True),
    "qwen3_moe": (False, True),
    "mixtral": (False, False),
}
#: The mixture-of-experts families and the config keys of their routed MLP:
#: (experts, experts per token, an expert's intermediate rows, renormalize the chosen weights).
#: Mixtral always renormalizes; Qwen3-MoE does where ``norm_topk_prob`` says (default false).
MOE_FAMILIES: dict[str, tuple[str, str, str, str | bool]] = {
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob"),
    "mixtral": ("num_local_experts", "num_experts_per_tok", "intermediate_size", True),
}
#: Keys of routed MLPs this compiler does not build, by what they would need.
MOE_UNSERVED = {"n_shared_experts": "shared experts", "shared_expert_intermediate_size": "shared experts",
                "n_routed_experts": "DeepSeek-style routing (grouped top-k, shared experts)"}
ROPE_KINDS = ("default", "llama3")
QWEN_WINDOWED = ("qwen2", "qwen3", "qwen3_moe")  # a window only with use_sliding_window, from max_window_layers on
#: The largest value each size field may take: past these a model is not one the programs can
#: build (their index arithmetic is 32-bit per tensor, below) or planning it would take unbounded
#: time and memory (a step's launches grow with the layers, the RoPE table with the positions).
LIMITS = {"hidden_size": 1 << 16, "num_hidden_layers": 1024, "num_attention_heads": 1024, "num_key_value_heads": 1024,
          "head_dim": 512, "intermediate_size": 1 << 20, "vocab_size": 1 << 22, "max_position_embeddings": 1 << 24,
          "num_experts": 1 << 12, "num_local_experts": 1 << 12, "num_experts_per_tok": 64,
          "moe_intermediate_size": 1 << 20, "decoder_sparse_step": 1024}
MAX_TENSOR_ELEMS = 1 << 31  # a weight tensor's elements: the programs address a tensor with 32-bit offsets


def _field(cfg: dict, source: str, name: str, kind: type, *, default=None, required=True):
    if name not in cfg or cfg[name] is None:
        if required and default is None:
            raise InputError(source, name, "missing")
        return default
    value = cfg[name]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is int and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InputError(source, name, f"expected {kind.__name__}, got {show(value)}")
    return _positive(source, name, value) if kind in (int, float) else value


def _positive(source: str, name: str, value):
    """A finite, positive number, at most the field's LIMITS entry."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(source, name, f"must be finite, got {value!r}")
    if value <= 0:
        raise InputError(source, name, f"must be positive, got {show(value)}")
    if value > LIMITS.get(name, math.inf):
        raise InputError(source, name, f"{show(value)} is past the largest served, {LIMITS[name]}")
    return value


def _number(source: str, name: str, value) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InputError(source, name, f"expected a positive number, got {show(value)}")
    return float(_positive(source, name, float(value)))


def _rope(cfg: dict, source: str) -> tuple[float, str, RopeScaling | None]:
    params = cfg.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise InputError(source, "rope_parameters", "expected a mapping")
    scaling = params if params is not None else cfg.get("rope_scaling")
    key = "rope_parameters" if params is not None else "rope_scaling"
    theta_src = params if params is not None and "rope_theta" in params else cfg
    theta_key = f"{key}.rope_theta" if theta_src is params else "rope_theta"
    theta = _number(source, theta_key, theta_src.get("rope_theta", 10000.0))
    if scaling is None:
        return float(theta), "default", None
    if not isinstance(scaling, dict):
        raise InputError(source, key, "expected a mapping or null")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_KINDS:
        raise InputError(source, f"{key}.rope_type", f"unsupported RoPE kind {show(kind)} (served: "
                                                     f"{', '.join(ROPE_KINDS)})")
    if kind == "default":
        return float(theta), "default", None
    values = {}
    for name in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
        if name not in scaling:
            raise InputError(source, f"{key}.{name}", "missing (needed by llama3 RoPE)")
        values[name] = _number(source, f"{key}.{name}", scaling[name])
    if not values["original_max_position_embeddings"].is_integer():
        raise InputError(source, f"{key}.original_max_position_embeddings", "expected an integer")
    if values["high_freq_factor"] <= values["low_freq_factor"]:
        raise InputError(source, f"{key}.high_freq_factor", "must exceed low_freq_factor")
    rs = RopeScaling(values["factor"], values["low_freq_factor"], values["high_freq_factor"],
                     int(values["original_max_position_embeddings"]))
    return float(theta), "llama3", rs


def _sliding_window(cfg: dict, source: str, family: str) -> int:
    """The attention window every layer uses, as transformers reads the config (0: none).

    Mistral windows every layer where ``sliding_window`` is set (v0.1: 4096; v0.3 sets null).
    Qwen2 and Qwen3 only with ``use_sliding_window``, and then the layers from ``max_window_layers`` on;
    ``layer_types`` says it per layer where a config lists them. A window on some layers but not
    others is refused: the layer programs are one per band and mode, shared by every layer."""
    window = cfg.get("sliding_window")
    if family == "llama" or family in QWEN_WINDOWED and not _field(cfg, source, "use_sliding_window", bool,
                                                                        default=False, required=False):
        window = None  # Llama's config has no window; Qwen's is off unless use_sliding_window
    if window is None:
        return 0
    window = _field(cfg, source, "sliding_window", int)
    layers = _field(cfg, source, "num_hidden_layers", int)
    if isinstance(cfg.get("layer_types"), list):
        kinds = cfg["layer_types"]
        windowed = [k == "sliding_attention" for k in kinds]
        if len(kinds) != layers or any(k not in ("sliding_attention", "full_attention") for k in kinds):
            raise InputError(source, "layer_types", f"expected {layers} of sliding_attention / full_attention")
    elif family in QWEN_WINDOWED:
        first = cfg.get("max_window_layers") or 0
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise InputError(source, "max_window_layers", f"expected a layer index, got {show(first)}")
        windowed = [i >= first for i in range(layers)]
    else:
        windowed = [True] * layers
    if all(windowed):
        return window
    if not any(windowed):
        return 0
    field = "layer_types" if isinstance(cfg.get("layer_types"), list) else "max_window_layers"
    raise InputError(source, field, "a sliding window on some layers and full attention on others is not served "
                                    "(one layer program serves every layer)")


def _experts(cfg: dict, source: str, family: str, layers: int, hidden: int) -> tuple[Experts | None, tuple[int, ...]]:
    """A mixture-of-experts family's routed MLP and the layers that have it, as transformers builds
    the model: Qwen3-MoE's layer i is routed unless it is in ``mlp_only_layers`` or (i + 1) is not a
    multiple of ``decoder_sparse_step`` (its MLP is then dense, ``intermediate_size`` rows);
    every Mixtral layer is routed."""
    if family not in MOE_FAMILIES:
        for key in ("num_experts", "num_local_experts", *MOE_UNSERVED):
            if cfg.get(key):
                raise InputError(source, key, f"mixture-of-experts layers are not served for model_type {family} "
                                              f"(served: {', '.join(sorted(MOE_FAMILIES))})")
        return None, ()
    for key, what in MOE_UNSERVED.items():
        if cfg.get(key):
            raise InputError(source, key, f"{what} are not served yet")
    count_key, top_key, inter_key, normalize_key = MOE_FAMILIES[family]
    count = _field(cfg, source, count_key, int)
    top_k = _field(cfg, source, top_key, int)
    if top_k > count:
        raise InputError(source, top_key, f"{top_k} experts per token, but the model has {count}")
    inter = _field(cfg, source, inter_key, int)
    if inter % 16:
        raise InputError(source, inter_key, f"must be a multiple of 16, got {inter}")
    if 2 * inter * hidden >= MAX_TENSOR_ELEMS:
        raise InputError(source, inter_key, f"an expert's 2 × {inter} × {hidden} gate/up elements are past the 2³¹ "
                                            "the programs address within an expert")
    normalize = normalize_key if isinstance(normalize_key, bool) else bool(
        _field(cfg, source, normalize_key, bool, default=False, required=False))
    if family == "mixtral":
        return Experts(count, top_k, inter, normalize), tuple(range(layers))
    step = _field(cfg, source, "decoder_sparse_step", int, default=1, required=False)
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < layers
                                          for i in dense):
        raise InputError(source, "mlp_only_layers", f"expected a list of layer indexes below {layers}")
    moe = tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)
    return (Experts(count, top_k, inter, normalize), moe) if moe else (None, ())


def geometry_from_config(cfg: dict, source: str) -> Geometry:
    """Validate a parsed config.json and return its Geometry; errors name ``source`` and the field."""
    if not isinstance(cfg, dict):
        raise InputError(source, None, "expected a JSON object")
    family = cfg.get("model_type")
    if not isinstance(family, str) or family not in FAMILIES:
        raise InputError(
            source, "model_type", f"unknown family {show(family)} (served: {', '.join(sorted(FAMILIES))})"
        )
    qkv_bias, qk_norm = FAMILIES[family]
    if family != "qwen2" and cfg.get("attention_bias"):
        raise InputError(source, "attention_bias", "q/k/v/o biases are not served for this family")
    if cfg.get("mlp_bias"):
        raise InputError(source, "mlp_bias", "MLP biases are not served")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise InputError(source, "hidden_act", f"only silu is served, got {show(act)}")

    hidden = _field(cfg, source, "hidden_size", int)
    q_heads = _field(cfg, source, "num_attention_heads", int)
    kv_heads = _field(cfg, source, "num_key_value_heads", int, default=q_heads)
    head_dim = _positive(source, "head_dim", _field(cfg, source, "head_dim", int, default=hidden // q_heads))
    if q_heads % kv_heads:
        raise InputError(source, "num_key_value_heads", f"{kv_heads} does not divide {q_heads} query heads")
    if head_dim % 16:
        raise InputError(source, "head_dim", f"must be a multiple of 16, got {head_dim}")
    intermediate = _field(cfg, source, "intermediate_size", int)
    for name, value in (("hidden_size", hidden), ("intermediate_size", intermediate)):
        if value % 64:
            raise InputError(source, name, f"must be a multiple of 64, got {value}")
    layers = _field(cfg, source, "num_hidden_layers", int)
    experts, moe_layers = _experts(cfg, source, family, layers, hidden)
    window = _sliding_window(cfg, source, family)
    theta, rope_kind, rope_scaling = _rope(cfg, source)
    max_positions = _field(cfg, source, "max_position_embeddings", int)
    vocab = _field(cfg, source, "vocab_size", int)
    for name, rows in (("vocab_size", vocab), ("intermediate_size", 2 * intermediate),
                       ("num_attention_heads", (q_heads + 2 * kv_heads) * head_dim)):
        if rows * hidden >= MAX_TENSOR_ELEMS:
            raise InputError(source, name, f"a weight tensor of {rows} × {hidden} elements is past the 2³¹ the "
                                           "programs address")
    geometry = Geometry(
        family=family,
        hidden=hidden,
        layers=layers,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        norm_eps=_field(cfg, source, "rms_norm_eps", float),
        rope_theta=theta,
        rope_kind=rope_kind,
        rope_scaling=rope_scaling,
        tied_head=_field(cfg, source, "tie_word_embeddings", bool, default=False, required=False) or False,
        qkv_bias=qkv_bias,
        qk_norm=qk_norm,
        max_positions=max_positions,
        sliding_window=window,
        experts=experts,
        moe_layers=moe_layers,
    )
    # an unserved quantization is refused here, whoever reads the config
    quant_from_config(cfg, source)
    return geometry


def load_config(path: Path) -> tuple[Geometry, WeightQuant | None]:
    """A config.json's geometry and its weights' quantization (None: unquantized)."""
    cfg = _read_json(path)
    return geometry_from_config(cfg, str(path)), quant_from_config(cfg, str(path))


def _read_json(path: Path) -> dict:
    text = read_text(Path(path), "config.json")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, None, f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise InputError(path, None, "malformed JSON: nested too deeply") from None
    return cfg


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))
