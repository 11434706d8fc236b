"""Weight, activation and accumulation precision on the digits CNN, for the lesson "Choose
weight, activation and accumulation precision".

The CNN of the lesson "Train a CNN on a small dataset" (``core.nn.nnx_models.CNN``, trained
with ``digits.CNN_LESSON``'s settings) is trained once and cached by content hash
(``core.post_training.cache``). It then runs under five precision policies, with every
convolution written as a matmul (3x3 patches, im2col) so each policy's matmuls can be read
and checked one by one:

    float32            f32 weights and activations, f32 accumulation
    bfloat16           bf16 weights and activations, f32 accumulation
                       (``preferred_element_type=float32``)
    int8 weights       integer weights (per-channel or per-tensor symmetric scales), f32
                       activations, f32 accumulation
    int8 weights + activations
                       integer weights and activations (activation scales calibrated on
                       training images), integer accumulation
                       (``preferred_element_type=int32`` or int16), rescaled to f32 after
    fp8 e4m3           float8_e4m3fn weights and activations, scaled so their largest value
                       maps to 448 (e4m3's largest), f32 accumulation. XLA:CPU converts the
                       fp8 operands to f32 before the dot (``fp8_support`` reads the compiled
                       HLO): the numbers are fp8's, the arithmetic is emulated (the app says so).

Quantized integers live in int8 whatever the bit width (2..8): q = clip(round(w / s), -Q, Q)
with Q = 2^(bits-1) - 1 and s = max|w| / Q. Without ``preferred_element_type`` a dot of two
int8 arrays accumulates into int8 and wraps around: ``wrong_int8_accumulation`` shows it.

Dimension glossary: N images, Y/X pixel rows/columns, K channels, M matmul rows (N*Y*X),
I matmul inputs (9*K for a conv, 16*K2 for the head), O outputs, C classes.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core import numerics
from core.data import digits
from core.nn import nnx_models, training
from core.post_training import cache

LAYERS = ("conv1", "conv2", "head")
POLICIES = (
    "float32",
    "bfloat16",
    "int8 weights",
    "int8 weights + activations",
    "fp8 e4m3",
)
GRANULARITIES = ("per channel", "per tensor")
ACCUMULATORS = ("int32", "int16")
FP8 = jnp.float8_e4m3fn
# float32 operands are multiplied in float32 on every backend (a TPU's default would round
# them to bfloat16 passes, and the float32 policy would not be float32)
HIGHEST = jax.lax.Precision.HIGHEST
FP8_MAX = 448.0  # the largest finite float8_e4m3fn
CACHE_KIND = "deployment.precision_policy.cnn"
CACHE_SOURCES = (
    "core/lessons/deployment/precision_policy.py",
    "core/nn/nnx_models.py",
    "core/nn/training.py",
    "core/data/digits.py",
    "core/post_training/cache.py",
)
# Integer accumulation is exact as long as no sum overflows (accumulator_problem rules that out
# for the worst case), so an integer matmul must equal the int64 reference exactly.
INTEGER_EXACT = 0.0


# ---------------------------------------------------------------- the trained CNN


def train_cnn(seed: int):
    """(params, origin): the lesson CNN trained with ``digits.CNN_LESSON``'s settings and
    ``seed``, as {"conv1"|"conv2"|"head": {"kernel", "bias"}} float32 NumPy arrays; from the
    on-disk cache when it holds a verified copy."""
    settings = {**digits.CNN_LESSON, "seed": int(seed)}

    def compute():
        split = digits.load(settings["test_fraction"], settings["seed"])
        steps_per_epoch = len(split.y_train) // settings["batch_size"]
        schedule = optax.cosine_decay_schedule(
            settings["learning_rate"], settings["epochs"] * steps_per_epoch
        )
        tx = training.make_optimizer("adam", schedule)
        model = nnx_models.CNN(
            rngs=nnx.Rngs(params=jax.random.key(seed, impl="rbg")),
            channels=(settings["channels1"], settings["channels2"]),
        )
        optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        training.fit(
            model,
            optimizer,
            split.x_train,
            split.y_train,
            epochs=settings["epochs"],
            batch_size=settings["batch_size"],
            seed=settings["seed"],
        )
        return {
            name: {
                "kernel": np.asarray(getattr(model, name).kernel[...], np.float32),
                "bias": np.asarray(getattr(model, name).bias[...], np.float32),
            }
            for name in LAYERS
        }

    tree, origin = cache.cached(CACHE_KIND, settings, compute, sources=CACHE_SOURCES)
    return {n: {k: np.asarray(v) for k, v in tree[n].items()} for n in LAYERS}, origin


def data(seed: int) -> digits.Split:
    """The split the CNN of ``seed`` was trained on (its test images are held out)."""
    return digits.load(digits.CNN_LESSON["test_fraction"], seed)


# ---------------------------------------------------------------- quantizers


def qmax(bits: int) -> int:
    if not 2 <= bits <= 8:
        raise ValueError(f"integer bits must be in [2, 8] (stored in int8), got {bits}")
    return 2 ** (bits - 1) - 1


def weight_scales(w_IO, granularity: str, top: float) -> np.ndarray:
    """Symmetric scales mapping max|w| to ``top``: one per output column ("per channel",
    shape (O,)) or one for the whole matrix ("per tensor", shape (1,)). A zero column gets
    scale 1 (any scale represents zeros exactly)."""
    w = np.asarray(w_IO, np.float32)
    if granularity == "per channel":
        largest = np.max(np.abs(w), axis=0)
    elif granularity == "per tensor":
        largest = np.max(np.abs(w), keepdims=True).reshape(1)
    else:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    return np.where(largest > 0, largest / np.float32(top), 1.0).astype(np.float32)


def quantize_int(x, scale, bits: int) -> np.ndarray:
    """clip(round(x / scale), -Q, Q) as int8 (round half to even, as np.rint)."""
    q = qmax(bits)
    return np.clip(np.rint(np.asarray(x, np.float32) / scale), -q, q).astype(np.int8)


def to_fp8(x, scale):
    """x / scale rounded to float8_e4m3fn (scale maps the largest |x| to FP8_MAX)."""
    return jnp.asarray(np.asarray(x, np.float32) / scale, jnp.float32).astype(FP8)


# ---------------------------------------------------------------- the network as matmuls


def patches_3x3(h_NYXK) -> jax.Array:
    """(N, Y, X, 9K): each pixel's 3x3 neighbourhood with SAME zero padding, ordered (dy, dx,
    k) like a (3, 3, K, O) kernel reshaped to (9K, O)."""
    n, y, x, k = h_NYXK.shape
    padded = jnp.pad(h_NYXK, ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = [padded[:, dy : dy + y, dx : dx + x, :] for dy in range(3) for dx in range(3)]
    return jnp.concatenate(windows, axis=-1)


def matrices(params: dict) -> dict:
    """Each layer's kernel as a matrix (I, O) and its bias (O,), float32."""
    return {
        n: (
            np.asarray(params[n]["kernel"], np.float32).reshape(-1, params[n]["kernel"].shape[-1]),
            np.asarray(params[n]["bias"], np.float32),
        )
        for n in LAYERS
    }


@dataclasses.dataclass(frozen=True)
class Settings:
    """The quantization choices the policies share."""

    weight_bits: int = 8
    activation_bits: int = 8
    granularity: str = "per channel"
    accumulator: str = "int32"

    def __post_init__(self):
        qmax(self.weight_bits)
        qmax(self.activation_bits)
        if self.granularity not in GRANULARITIES:
            raise ValueError(
                f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}"
            )
        if self.accumulator not in ACCUMULATORS:
            raise ValueError(f"accumulator must be one of {ACCUMULATORS}, got {self.accumulator!r}")


@dataclasses.dataclass(frozen=True)
class Quantized:
    """One policy's stored model: per layer the stored kernel (I, O) in its dtype, its scales
    (or None), the bias as stored, and the activation scale its input is quantized with."""

    policy: str
    kernels: dict
    scales: dict
    biases: dict
    activation_scales: dict

    def weight_bytes(self) -> int:
        """Bytes of what is stored: kernels in their dtype, their scales, the biases."""
        total = 0
        for n in LAYERS:
            total += np.asarray(self.kernels[n]).nbytes + np.asarray(self.biases[n]).nbytes
            if self.scales[n] is not None:
                total += np.asarray(self.scales[n]).nbytes
        return int(total)


def _patches_np(h_NYXK: np.ndarray) -> np.ndarray:
    n, y, x, k = h_NYXK.shape
    padded = np.pad(h_NYXK, ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = [padded[:, dy : dy + y, dx : dx + x, :] for dy in range(3) for dx in range(3)]
    return np.concatenate(windows, axis=-1)


def bytes_closed_form(params: dict, policy: str, granularity: str) -> int:
    """The stored bytes from the layer shapes alone: float32 4 (K + B), bfloat16 2 (K + B),
    integer and fp8 kernels K bytes + float32 biases 4 B + float32 scales (4 per output
    channel, or 4 per layer), where K and B count kernel and bias numbers."""
    kernels = sum(int(np.size(params[n]["kernel"])) for n in LAYERS)
    biases = sum(int(np.size(params[n]["bias"])) for n in LAYERS)
    if policy == "float32":
        return 4 * (kernels + biases)
    if policy == "bfloat16":
        return 2 * (kernels + biases)
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    scales = biases if granularity == "per channel" else len(LAYERS)  # one per output
    return kernels + 4 * biases + 4 * scales


def layer_inputs(params: dict, x_NYXK) -> dict:
    """The float32 input matrix (M, I) of each layer's matmul for images ``x_NYXK``, in
    NumPy (no compile: calibration runs once per setting)."""
    mats = matrices(params)
    out = {}
    h = np.asarray(x_NYXK, np.float32)
    for n in LAYERS[:2]:
        lhs = _patches_np(h)
        out[n] = lhs.reshape(-1, lhs.shape[-1])
        w, b = mats[n]
        h = np.maximum(lhs @ w + b, np.float32(0.0))
        if n == "conv1":
            nb, y, x, k = h.shape
            h = h.reshape(nb, y // 2, 2, x // 2, 2, k).max(axis=(2, 4))
    out["head"] = h.reshape(h.shape[0], -1)
    return out


def calibrate(params: dict, x_NYXK) -> dict:
    """Per layer, the largest |input| of the float32 network on the calibration images."""
    return {n: float(np.max(np.abs(v))) for n, v in layer_inputs(params, x_NYXK).items()}


def quantize(params: dict, policy: str, settings: Settings, calibration: dict) -> Quantized:
    """``params`` stored as ``policy`` stores them."""
    mats = matrices(params)
    kernels, scales, biases, act = {}, {}, {}, {}
    for n in LAYERS:
        w, b = mats[n]
        biases[n] = b
        scales[n] = None
        act[n] = None
        if policy == "float32":
            kernels[n] = w
        elif policy == "bfloat16":
            kernels[n] = np.asarray(jnp.asarray(w).astype(jnp.bfloat16))
            biases[n] = np.asarray(jnp.asarray(b).astype(jnp.bfloat16))
        elif policy in ("int8 weights", "int8 weights + activations"):
            scales[n] = weight_scales(w, settings.granularity, qmax(settings.weight_bits))
            kernels[n] = quantize_int(w, scales[n], settings.weight_bits)
            if policy == "int8 weights + activations":
                act[n] = np.float32(max(calibration[n], 1e-12) / qmax(settings.activation_bits))
        elif policy == "fp8 e4m3":
            scales[n] = weight_scales(w, settings.granularity, FP8_MAX)
            kernels[n] = np.asarray(to_fp8(w, scales[n]))
            act[n] = np.float32(max(calibration[n], 1e-12) / FP8_MAX)
        else:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    return Quantized(policy, kernels, scales, biases, act)


@dataclasses.dataclass(frozen=True)
class Matmul:
    """One matmul as a policy ran it: the operands as they went in (lhs M x I, rhs I x O),
    the raw product, and the dtype it accumulated in."""

    layer: str
    lhs: np.ndarray
    rhs: np.ndarray
    product: np.ndarray
    accumulator: str


def accumulator_of(policy: str, settings: Settings) -> str:
    return settings.accumulator if policy == "int8 weights + activations" else "float32"


def _stored(q: Quantized) -> dict:
    """The stored model as jit arguments (a missing scale is 1)."""
    one = np.float32(1.0)
    return {
        n: {
            "kernel": jnp.asarray(q.kernels[n]),
            "bias": jnp.asarray(q.biases[n]),
            "scale": jnp.asarray(one if q.scales[n] is None else q.scales[n]),
            "act_scale": jnp.asarray(
                one if q.activation_scales[n] is None else q.activation_scales[n]
            ),
        }
        for n in LAYERS
    }


def _layer(policy: str, settings: Settings, stored: dict, lhs_f32):
    """(output float32 (M, O), lhs as it went in, raw product) of one layer."""
    kernel, bias = stored["kernel"], stored["bias"]
    scale, act_scale = stored["scale"], stored["act_scale"]
    if policy == "float32":
        lhs = lhs_f32
        product = jnp.dot(lhs, kernel, precision=HIGHEST, preferred_element_type=jnp.float32)
        out = product + bias
    elif policy == "bfloat16":
        lhs = lhs_f32.astype(jnp.bfloat16)
        product = jnp.dot(lhs, kernel, preferred_element_type=jnp.float32)
        # the activation is stored in bf16, computed from the f32 sum
        out = (product + bias.astype(jnp.float32)).astype(jnp.bfloat16).astype(jnp.float32)
    elif policy == "int8 weights":
        lhs = lhs_f32
        product = jnp.dot(
            lhs, kernel.astype(jnp.float32), precision=HIGHEST, preferred_element_type=jnp.float32
        )
        out = product * scale + bias
    elif policy == "int8 weights + activations":
        q = qmax(settings.activation_bits)
        lhs = jnp.clip(jnp.round(lhs_f32 / act_scale), -q, q).astype(jnp.int8)
        product = jnp.dot(lhs, kernel, preferred_element_type=jnp.dtype(settings.accumulator))
        out = product.astype(jnp.float32) * (act_scale * scale) + bias
    elif policy == "fp8 e4m3":
        lhs = (lhs_f32 / act_scale).astype(FP8)
        product = jnp.dot(lhs, kernel, preferred_element_type=jnp.float32)
        out = product * (act_scale * scale) + bias
    else:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    return out, lhs, product


def _forward_one(stored: dict, x_NYXK, policy: str, settings: Settings):
    h = x_NYXK.astype(jnp.float32)
    operands = {}
    for n in LAYERS[:2]:
        patches = patches_3x3(h)
        shape = patches.shape
        out, lhs, product = _layer(policy, settings, stored[n], patches.reshape(-1, shape[-1]))
        operands[n] = (lhs, product)
        h = jax.nn.relu(out).reshape(*shape[:3], -1)
        if n == "conv1":
            h = nnx_models.max_pool_2x2(h)
    logits, lhs, product = _layer(policy, settings, stored["head"], h.reshape(h.shape[0], -1))
    operands["head"] = (lhs, product)
    return logits, operands


@functools.partial(jax.jit, static_argnames=("policies", "settings"))
def _forward(stored_by_policy: dict, x_NYXK, policies: tuple, settings: Settings):
    """Every policy in ``policies`` in one compiled program (one compile, not five)."""
    return {p: _forward_one(stored_by_policy[p], x_NYXK, p, settings) for p in policies}


def forward_many(quantized: list, x_NYXK, settings: Settings) -> list:
    """[(logits_NC float32, the three matmuls as run)] of each stored model."""
    policies = tuple(q.policy for q in quantized)
    if len(set(policies)) != len(policies):
        raise ValueError(f"each policy at most once, got {policies}")
    stored = {q.policy: _stored(q) for q in quantized}
    outputs = jax.device_get(_forward(stored, jnp.asarray(x_NYXK), policies, settings))
    results = []
    for q in quantized:
        logits, operands = outputs[q.policy]
        accumulator = accumulator_of(q.policy, settings)
        matmuls = [
            Matmul(
                n,
                np.asarray(operands[n][0]),
                np.asarray(q.kernels[n]),
                np.asarray(operands[n][1]),
                accumulator,
            )
            for n in LAYERS
        ]
        results.append((np.asarray(logits), matmuls))
    return results


def forward(q: Quantized, x_NYXK, settings: Settings) -> tuple[np.ndarray, list[Matmul]]:
    """(logits_NC float32, the three matmuls as run) of the stored model ``q``."""
    return forward_many([q], x_NYXK, settings)[0]


# ---------------------------------------------------------------- references and checks


def matmul_reference(matmul: Matmul) -> np.ndarray:
    """The product in NumPy from the same operands: int64 for integer operands (exact),
    float64 otherwise (fp8 and bf16 values widen exactly)."""
    if np.asarray(matmul.lhs).dtype.kind in "iu" and np.asarray(matmul.rhs).dtype.kind in "iu":
        return np.asarray(matmul.lhs, np.int64) @ np.asarray(matmul.rhs, np.int64)
    return numerics.as_float64(matmul.lhs) @ numerics.as_float64(matmul.rhs)


def matmul_error(matmul: Matmul) -> float:
    """The product's error against ``matmul_reference``: exact difference for integer
    accumulators, scaled max error for float ones."""
    reference = matmul_reference(matmul)
    if matmul.accumulator in ACCUMULATORS:
        return numerics.max_abs_error(np.asarray(matmul.product, np.int64), reference)
    return numerics.scaled_max_error(matmul.product, reference)


def matmul_tolerance(matmul: Matmul) -> float:
    """The accumulator's tolerance: core.numerics' float32 entry, or exact for integers."""
    if matmul.accumulator in ACCUMULATORS:
        return INTEGER_EXACT
    return numerics.tolerance(matmul.accumulator)


def wrong_int8_accumulation(matmul: Matmul) -> np.ndarray:
    """The planted mistake: the same int8 operands multiplied without
    ``preferred_element_type``, so the sum is kept in int8 and wraps."""
    return np.asarray(jnp.dot(jnp.asarray(matmul.lhs), jnp.asarray(matmul.rhs)))


@dataclasses.dataclass(frozen=True)
class Planted:
    """The planted int8 accumulator in one integer matmul, and whether it can do harm there.

    Summed in int8 the product wraps modulo 256, so it differs from the exact sum exactly
    where that sum leaves int8's range: ``outside`` counts those sums (0: the mistake is
    harmless on these operands, as at 2-bit weights and activations)."""

    matmul: Matmul
    exact: np.ndarray  # the int64 product (matmul_reference)
    error: float  # the wrapped product's largest error against it
    outside: int  # exact sums outside [-128, 127]
    largest: int  # the largest |exact sum|

    @property
    def caught(self) -> bool:
        """Caught where it does harm, equal to the exact sum where it cannot."""
        return self.error > 0 if self.outside else self.error == 0


def plant_int8_accumulator(matmuls) -> Planted:
    """The planted mistake in the integer matmul whose exact sums reach furthest."""
    exact = {m.layer: matmul_reference(m) for m in matmuls}
    matmul = max(matmuls, key=lambda m: int(np.abs(exact[m.layer]).max()))
    reference = exact[matmul.layer]
    error = matmul_error(dataclasses.replace(matmul, product=wrong_int8_accumulation(matmul)))
    info = np.iinfo(np.int8)
    outside = int(((reference < info.min) | (reference > info.max)).sum())
    return Planted(matmul, reference, error, outside, int(np.abs(reference).max()))


def worst_case_sum(weight_bits: int, activation_bits: int, inputs: int) -> int:
    """The largest |sum| an integer matmul of ``inputs`` terms can reach: I * Qw * Qa."""
    return inputs * qmax(weight_bits) * qmax(activation_bits)


def largest_inputs(params: dict) -> int:
    return max(matrices(params)[n][0].shape[0] for n in LAYERS)


def accumulator_problem(settings: Settings, inputs: int) -> str | None:
    """Why the integer accumulator is refused (None when every sum fits)."""
    worst = worst_case_sum(settings.weight_bits, settings.activation_bits, inputs)
    limit = int(np.iinfo(np.dtype(settings.accumulator)).max)
    if worst > limit:
        return (
            f"an {settings.accumulator} accumulator can overflow: {inputs} products of "
            f"{settings.weight_bits}-bit weights and {settings.activation_bits}-bit activations "
            f"can sum to {worst:,}, above {limit:,}. Use int32, or 4 bits or fewer for both"
        )
    return None


def fp8_support() -> dict:
    """How float8_e4m3fn runs here, tested: does a jitted dot of fp8 operands with
    preferred_element_type=float32 compile and run, does it equal float64 on the same fp8
    values, and does the compiled program convert the operands to f32 before the dot
    (then the arithmetic is emulated: the CPU has no fp8 units)."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(8, 32)), jnp.float32).astype(FP8)
    w = jnp.asarray(rng.normal(size=(32, 4)), jnp.float32).astype(FP8)
    fn = jax.jit(functools.partial(jnp.dot, preferred_element_type=jnp.float32))
    try:
        compiled = fn.lower(x, w).compile()
        out = np.asarray(compiled(x, w))
    except Exception as error:  # noqa: BLE001 (an unsupported dtype raises several kinds)
        return {"runs": False, "error": f"{type(error).__name__}: {error}"[:200]}
    blocks = compiled.as_text().split("\n\n")  # one HLO computation per block
    converts = any("f8e4m3fn[" in b and " convert(" in b and "f32[" in b for b in blocks)
    dot_reads_fp8 = any(
        " dot(" in b
        and any("parameter(" in line and "f8e4m3fn[" in line for line in b.splitlines())
        for b in blocks
    )
    error = numerics.scaled_max_error(out, numerics.as_float64(x) @ numerics.as_float64(w))
    return {
        "runs": True,
        "error vs float64": error,
        "operands converted to f32 before the dot": converts and not dot_reads_fp8,
        "backend": jax.default_backend(),
    }


# ---------------------------------------------------------------- the comparison


@dataclasses.dataclass(frozen=True)
class PolicyRun:
    policy: str
    quantized: Quantized
    logits: np.ndarray
    matmuls: list
    accuracy: float
    weight_bytes: int
    max_error: float
    mean_error: float


def run_policies(params: dict, split: digits.Split, settings: Settings, calibration_images: int):
    """{policy: PolicyRun} on the test images; errors are |logits - float32 logits| (max and
    mean), calibration on the first ``calibration_images`` training images."""
    if not 1 <= calibration_images <= len(split.y_train):
        raise ValueError(
            f"calibration images must be in [1, {len(split.y_train)}], got {calibration_images}"
        )
    calibration = calibrate(params, split.x_train[:calibration_images])
    stored = [quantize(params, policy, settings, calibration) for policy in POLICIES]
    runs = {
        q.policy: (q, *out)
        for q, out in zip(stored, forward_many(stored, split.x_test, settings), strict=True)
    }
    base = runs["float32"][1].astype(np.float64)
    out = {}
    for policy, (q, logits, matmuls) in runs.items():
        diff = np.abs(logits.astype(np.float64) - base)
        out[policy] = PolicyRun(
            policy,
            q,
            logits,
            matmuls,
            float(np.mean(logits.argmax(axis=1) == split.y_test)),
            q.weight_bytes(),
            float(diff.max()),
            float(diff.mean()),
        )
    return out


def label(policy: str, settings: Settings, fp8_emulated: bool = True) -> str:
    """The policy's name with its bit widths ("int4 weights (per channel)", ...), and fp8
    marked emulated or native (from ``fp8_support``)."""
    if policy == "fp8 e4m3":
        return f"fp8 e4m3 ({'emulated' if fp8_emulated else 'native'})"
    if policy == "int8 weights":
        return f"int{settings.weight_bits} weights ({settings.granularity})"
    if policy == "int8 weights + activations":
        return (
            f"int{settings.weight_bits} weights + int{settings.activation_bits} activations "
            f"({settings.accumulator} accumulator)"
        )
    return policy


def fp8_emulated(support: dict) -> bool:
    """True unless the fp8 test found a dot that reads fp8 operands itself."""
    return not support.get("runs") or bool(support["operands converted to f32 before the dot"])


def rows(runs: dict, settings: Settings, fp8_is_emulated: bool = True) -> list[dict]:
    base_bytes = runs["float32"].weight_bytes
    return [
        {
            "policy": label(p, settings, fp8_is_emulated),
            "test accuracy": f"{r.accuracy:.2%}",
            "weight bytes": r.weight_bytes,
            "vs float32": f"{r.weight_bytes / base_bytes:.2f}x",
            "max |logit error|": r.max_error,
            "mean |logit error|": r.mean_error,
            "accumulator": r.matmuls[0].accumulator,
        }
        for p, r in runs.items()
    ]
