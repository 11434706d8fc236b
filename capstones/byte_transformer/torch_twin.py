"""A PyTorch twin of the capstone's TinyLM and its training step, for apples-to-apples speed.

The twin computes the same function as ``core.lm.transformer.TinyLM`` under the capstone's
training step (training.train_step), with the same parameters in the same layout:

    x = token_embed[tokens] + pos_embed[positions]            (dropout)
    per block (pre-LN):  h = x + drop(attn(LN(x)));  y = h + drop(mlp(LN(h)))
        attn: q, k, v = LN(x) . w_DHK; softmax(q.k / sqrt(K), same-segment causal mask) . v
              then . wo_HKD;  mlp: gelu_tanh(. w_in + b_in) . w_out + b_out
    logits = LN(x) . head_DV;  loss = mean cross-entropy over the valid (weight 1) targets
    AdamW (b1 0.9, b2 0.999, eps 1e-8, decoupled weight decay on every parameter) after
    clipping the gradients to a global norm (optax.clip_by_global_norm semantics).

Dropout is placed where the JAX model puts it (embeddings; each residual branch before the
add) but draws from torch's generator, so with dropout on the two are equal in distribution,
not bit for bit; with dropout off they agree to float32 rounding (torch_twin_test.py).

Attention uses ``torch.nn.functional.scaled_dot_product_attention`` with a boolean mask
(what a PyTorch author would write; the JAX model's finite MASK_VALUE and torch's -inf give
the same probabilities because no row is masked everywhere: every query sees itself).

Public: ``TwinLM`` (an ``nn.Module``), ``from_jax_params(config, params)``,
``to_jax_params(config, model)``, ``adam_moments``, ``make_optimizer``, ``train_step``,
``batch_to_torch``.
torch is imported inside the functions (``import capstones.byte_transformer.torch_twin`` is
cheap); ``TwinLM`` is built by ``twin_class()``.
"""

from __future__ import annotations

import functools

import numpy as np

from capstones.byte_transformer import config as config_lib

BATCH_KEYS = ("tokens_BT", "segment_ids_BT", "positions_BT", "targets_BT", "weights_BT")


@functools.cache
def twin_class():
    """The ``TwinLM`` nn.Module class (defined on first use so torch loads lazily)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class TwinBlock(nn.Module):
        def __init__(self, d: int, h: int, f: int, eps: float):
            super().__init__()
            k = d // h
            self.h, self.k, self.eps = h, k, eps
            self.ln1_scale = nn.Parameter(torch.ones(d))
            self.ln1_bias = nn.Parameter(torch.zeros(d))
            # the JAX layouts: w_DHK for q/k/v, w_HKD for the output projection
            self.wq = nn.Parameter(torch.zeros(d, h, k))
            self.wk = nn.Parameter(torch.zeros(d, h, k))
            self.wv = nn.Parameter(torch.zeros(d, h, k))
            self.wo = nn.Parameter(torch.zeros(h, k, d))
            self.ln2_scale = nn.Parameter(torch.ones(d))
            self.ln2_bias = nn.Parameter(torch.zeros(d))
            self.w_in = nn.Parameter(torch.zeros(d, f))
            self.b_in = nn.Parameter(torch.zeros(f))
            self.w_out = nn.Parameter(torch.zeros(f, d))
            self.b_out = nn.Parameter(torch.zeros(d))

        def attention(self, x_BTD, mask_B1TT):
            b, t, d = x_BTD.shape
            # (B, T, D) @ (D, H*K) -> (B, H, T, K): a plain matmul on the JAX layout
            q, k, v = (
                (x_BTD @ w.reshape(d, -1)).view(b, t, self.h, self.k).transpose(1, 2)
                for w in (self.wq, self.wk, self.wv)
            )
            out_BHTK = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_B1TT)
            return out_BHTK.transpose(1, 2).reshape(b, t, d) @ self.wo.reshape(-1, d)

        def forward(self, x_BTD, mask_B1TT, rate: float):
            d = x_BTD.shape[-1]
            a = F.layer_norm(x_BTD, (d,), self.ln1_scale, self.ln1_bias, self.eps)
            h = x_BTD + F.dropout(self.attention(a, mask_B1TT), rate, self.training)
            m = F.layer_norm(h, (d,), self.ln2_scale, self.ln2_bias, self.eps)
            hidden = F.gelu(m @ self.w_in + self.b_in, approximate="tanh")
            return h + F.dropout(hidden @ self.w_out + self.b_out, rate, self.training)

    class TwinLM(nn.Module):
        """TinyLM in PyTorch: ``forward(tokens, segments, positions) -> logits_BTV``."""

        def __init__(self, config: config_lib.Config):
            super().__init__()
            model_config = config.model_config()
            d, v = config.d_model, model_config.vocab_size
            self.rate = config.dropout
            self.eps = model_config.layer_norm_eps
            self.token_embed = nn.Parameter(torch.zeros(v, d))
            self.pos_embed = nn.Parameter(torch.zeros(config.max_len, d))
            self.blocks = nn.ModuleList(
                TwinBlock(d, config.num_heads, config.hidden, self.eps)
                for _ in range(config.num_layers)
            )
            self.final_scale = nn.Parameter(torch.ones(d))
            self.final_bias = nn.Parameter(torch.zeros(d))
            self.head = nn.Parameter(torch.zeros(d, v))

        def forward(self, tokens_BT, segment_ids_BT, positions_BT):
            t = tokens_BT.shape[1]
            causal_TT = torch.ones(t, t, dtype=torch.bool, device=tokens_BT.device).tril()
            same_BTT = segment_ids_BT[:, :, None] == segment_ids_BT[:, None, :]
            mask_B1TT = (same_BTT & causal_TT)[:, None]
            x = self.token_embed[tokens_BT] + self.pos_embed[positions_BT]
            x = F.dropout(x, self.rate, self.training)
            for block in self.blocks:
                x = block(x, mask_B1TT, self.rate)
            x = F.layer_norm(x, (x.shape[-1],), self.final_scale, self.final_bias, self.eps)
            return x @ self.head

        def loss(self, batch: dict):
            """(mean cross-entropy over valid targets, valid count), as token_loss."""
            logits = self(batch["tokens_BT"], batch["segment_ids_BT"], batch["positions_BT"])
            nll = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                batch["targets_BT"].reshape(-1).long(),
                reduction="none",
            )
            weights = batch["weights_BT"].reshape(-1)
            count = weights.sum()
            return (nll * weights).sum() / torch.clamp(count, min=1.0), count

    return TwinLM


# JAX pure-dict path (per block) -> twin attribute name
_BLOCK_NAMES = {
    ("norm_attn", "scale"): "ln1_scale",
    ("norm_attn", "bias"): "ln1_bias",
    ("attn", "wq"): "wq",
    ("attn", "wk"): "wk",
    ("attn", "wv"): "wv",
    ("attn", "wo"): "wo",
    ("norm_mlp", "scale"): "ln2_scale",
    ("norm_mlp", "bias"): "ln2_bias",
    ("w_in",): "w_in",
    ("b_in",): "b_in",
    ("w_out",): "w_out",
    ("b_out",): "b_out",
}
_TOP_NAMES = {
    ("token_embed",): "token_embed",
    ("pos_embed",): "pos_embed",
    ("final_norm", "scale"): "final_scale",
    ("final_norm", "bias"): "final_bias",
    ("head",): "head",
}


def _get(tree, path):
    for part in path:
        tree = tree[part]
    return tree


def _named_jax_leaves(config: config_lib.Config, params: dict):
    """(twin parameter name, JAX array) for every parameter."""
    for path, name in _TOP_NAMES.items():
        yield name, _get(params, path)
    for layer in range(config.num_layers):
        block = params["blocks"][layer]
        for path, name in _BLOCK_NAMES.items():
            yield f"blocks.{layer}.{name}", _get(block, path)


def from_jax_params(config: config_lib.Config, params: dict):
    """A TwinLM (float32, train mode) holding ``params`` (training.init_state()["params"])."""
    import torch

    model = twin_class()(config)
    own = dict(model.named_parameters())
    seen = set()
    with torch.no_grad():
        for name, value in _named_jax_leaves(config, params):
            array = np.asarray(value, np.float32)
            if tuple(own[name].shape) != array.shape:
                raise ValueError(
                    f"parameter {name}: JAX shape {array.shape} vs twin {tuple(own[name].shape)}"
                )
            own[name].copy_(torch.from_numpy(array.copy()))
            seen.add(name)
    missing = sorted(set(own) - seen)
    if missing:
        raise ValueError(f"no JAX value for twin parameters {missing}")
    return model


def to_jax_params(config: config_lib.Config, model, values: dict | None = None) -> dict:
    """The twin's parameters (or ``values``: {parameter name: tensor}, e.g. Adam moments)
    as a nested dict of numpy arrays shaped like the JAX params."""
    own = values if values is not None else dict(model.named_parameters())
    out: dict = {"blocks": {layer: {} for layer in range(config.num_layers)}}

    def put(tree, path, tensor):
        for part in path[:-1]:
            tree = tree.setdefault(part, {})
        tree[path[-1]] = tensor.detach().numpy().copy()

    for path, name in _TOP_NAMES.items():
        put(out, path, own[name])
    for layer in range(config.num_layers):
        for path, name in _BLOCK_NAMES.items():
            put(out["blocks"][layer], path, own[f"blocks.{layer}.{name}"])
    return out


def adam_moments(config: config_lib.Config, model, optimizer) -> tuple[dict, dict]:
    """(first, second) Adam moments of the twin, shaped like the JAX params (compare with
    checkpoint.adam_state(opt_state).mu / .nu)."""
    names = dict(model.named_parameters())
    state = optimizer.state
    first = {n: state[p]["exp_avg"] for n, p in names.items()}
    second = {n: state[p]["exp_avg_sq"] for n, p in names.items()}
    return to_jax_params(config, model, first), to_jax_params(config, model, second)


def batch_to_torch(batch: dict) -> dict:
    """The numpy batch as torch tensors (same dtypes; no copy where possible)."""
    import torch

    return {key: torch.from_numpy(np.ascontiguousarray(batch[key])) for key in BATCH_KEYS}


def make_optimizer(config: config_lib.Config, model):
    """torch AdamW with optax.adamw's defaults and the config's rate and decay.

    optax.adamw decays every parameter (no mask) and its update is
    -lr * (m_hat / (sqrt(v_hat) + eps) + wd * p); torch's AdamW applies p *= 1 - lr * wd
    and then the same Adam step: the same arithmetic. ``fused`` (one kernel for all
    parameters) where this torch build supports it on CPU, else ``foreach``. The twin follows
    a constant rate: a config with warmup or a decaying schedule is refused (ValueError).
    """
    import torch

    if config.lr_schedule != "constant" or config.warmup_steps:
        raise ValueError(
            "the PyTorch twin trains at a constant learning rate; set lr_schedule=constant "
            f"warmup_steps=0 (got {config.lr_schedule!r}, warmup_steps={config.warmup_steps})"
        )
    kwargs = dict(
        lr=config.learning_rate,
        betas=(0.9, config.adam_b2),
        eps=1e-8,
        weight_decay=config.weight_decay,
    )
    try:
        return torch.optim.AdamW(model.parameters(), fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(model.parameters(), foreach=True, **kwargs)


def clip_by_global_norm_(parameters, max_norm: float):
    """optax.clip_by_global_norm in place: if ||g|| > max_norm, g *= max_norm / ||g||
    (torch's clip_grad_norm_ adds 1e-6 to the norm; this does not). Returns ||g||."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / norm, max=1.0)
    torch._foreach_mul_(grads, scale)
    return norm


def train_step(model, optimizer, batch: dict, clip_norm: float, loss_fn=None) -> dict:
    """One step on a torch batch (batch_to_torch): loss, backward, clip, AdamW. ``loss_fn``
    (default model.loss) may be a torch.compile'd model.loss. Metrics are tensors."""
    optimizer.zero_grad(set_to_none=True)
    loss, count = (loss_fn or model.loss)(batch)
    loss.backward()
    grad_norm = clip_by_global_norm_(list(model.parameters()), clip_norm)
    optimizer.step()
    return {"loss": loss.detach(), "tokens": count, "grad_norm": grad_norm}
