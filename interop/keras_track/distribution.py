"""``keras.distribution`` on the lab's 8 CPU devices (jax backend), each weight's sharding read.

One small MLP, ``keras.Sequential(name="mlp")`` of three Dense layers (paths
``mlp/dense/kernel``, ``mlp/dense/bias``, ``mlp/dense_1/...``, ``mlp/dense_2/...``), runs in a
``KERAS_BACKEND=jax`` child (``child.run``) four ways on the same weights and batch:

    single          no distribution (one device)
    data_parallel   DataParallel over all 8 devices: weights replicated, the batch split
    model_parallel  ModelParallel on a (batch, model) DeviceMesh with the request's LayoutMap:
                    kernels (None, "model"), biases ("model",)
    trap            ModelParallel with the keys as Keras's own docstring writes them
                    (TRAP_KEYS): Keras matches a LayoutMap key with ``re.fullmatch`` against
                    the whole path, so "dense.*kernel" matches nothing under "mlp/..." and
                    every weight stays replicated, without a warning

For each it reads back every weight's ``w.value.sharding.spec`` and the shape and index of
the shard on each device, and the output. This parent side predicts each weight's spec from
the keys with its own ``re.fullmatch`` (``expected_spec``) and each shard's shape from the
mesh shape (``expected_shard_shape``), flags keys that match nothing and weights left
replicated (``audit``), and holds a NumPy float64 forward (``numpy_forward``) as the outputs'
reference. Keras is never imported here.

Dimension glossary: B batch, F input features, H hidden units, C outputs.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
import sys
from collections.abc import Mapping, Sequence

import numpy as np

from core.lab import text
from interop.keras_track import child

DEVICES = 8
MESHES: tuple[str, ...] = ("8x1", "4x2", "2x4", "1x8")  # data x model: the divisors of 8
AXES = ("batch", "model")
KERNEL_LAYOUT = (None, "model")
BIAS_LAYOUT = ("model",)
GOOD_KEYS = (".*dense.*/kernel", ".*dense.*/bias")
TRAP_KEYS = ("dense.*kernel", "dense.*bias")  # keras.distribution.LayoutMap's docstring keys
MODES = ("single", "data_parallel", "model_parallel", "trap")
LAYERS = ("dense", "dense_1", "dense_2")
_MODULE = "interop.keras_track.distribution"


@dataclasses.dataclass(frozen=True)
class Request:
    seed: int = 0
    batch: int = 16
    features: int = 16
    hidden: int = 32
    outputs: int = 8
    mesh: str = "2x4"
    kernel_key: str = GOOD_KEYS[0]
    bias_key: str = GOOD_KEYS[1]

    @property
    def mesh_shape(self) -> tuple[int, int]:
        data, model = (int(n) for n in self.mesh.split("x"))
        return data, model

    @property
    def axis_sizes(self) -> dict[str, int]:
        return dict(zip(AXES, self.mesh_shape, strict=True))


def parse_mesh(text: str) -> tuple[int, int]:
    """'2x4' -> (2, 4), refusing a shape that does not use all 8 devices."""
    try:
        data, model = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"mesh {text!r} is not DATAxMODEL (for example 2x4)") from None
    if data < 1 or model < 1 or data * model != DEVICES:
        raise ValueError(f"mesh {data}x{model} holds {data * model} devices, not {DEVICES}")
    return data, model


def weight_shapes(request: Request) -> dict[str, tuple[int, ...]]:
    """Every weight path of the MLP and its shape (what Keras names them in a Sequential)."""
    dims = (request.features, request.hidden, request.hidden, request.outputs)
    shapes = {}
    for i, layer in enumerate(LAYERS):
        shapes[f"mlp/{layer}/kernel"] = (dims[i], dims[i + 1])
        shapes[f"mlp/{layer}/bias"] = (dims[i + 1],)
    return shapes


def layout_keys(kernel_key: str, bias_key: str) -> dict[str, tuple]:
    return {kernel_key: KERNEL_LAYOUT, bias_key: BIAS_LAYOUT}


def matches(key: str, path: str) -> bool:
    """LayoutMap's rule, written here from its documented behaviour: an exact key, or a key
    that ``re.fullmatch``-es the whole variable path."""
    return key == path or re.fullmatch(key, path) is not None


def expected_spec(path: str, ndim: int, keys: Mapping[str, tuple]) -> tuple:
    """The spec a weight should get (None per replicated dimension)."""
    hits = [k for k in keys if matches(k, path)]
    if not hits:
        return (None,) * ndim
    return tuple(keys[hits[0]])


def normalize_spec(spec: Sequence, ndim: int) -> tuple:
    """A PartitionSpec read back as a tuple of ``ndim`` entries (P() is all None)."""
    spec = tuple(spec)
    return spec + (None,) * (ndim - len(spec))


def expected_shard_shape(
    shape: Sequence[int], spec: Sequence, axis_sizes: Mapping[str, int]
) -> tuple[int, ...]:
    """Each device's shard shape: a dimension split over a mesh axis of n devices is size / n;
    None (replicated) keeps the whole dimension."""
    out = []
    for size, axis in zip(shape, normalize_spec(spec, len(shape)), strict=True):
        names = () if axis is None else ((axis,) if isinstance(axis, str) else tuple(axis))
        n = math.prod(axis_sizes[a] for a in names)
        out.append(size // n)
    return tuple(out)


def problem(request: Request) -> str | None:
    """Why this request cannot run (None when it can)."""
    try:
        data, model = parse_mesh(request.mesh)
    except ValueError as error:
        return str(error)
    for name, key in (("kernel key", request.kernel_key), ("bias key", request.bias_key)):
        if not key.strip():
            return f"the {name} is empty"
        try:
            re.compile(key)
        except re.error as error:
            return f"the {name} {text.code(key)} is not a regular expression ({error})"
    if request.kernel_key == request.bias_key:
        return "the kernel key and the bias key are the same key"
    if request.batch % data:
        return f"a batch of {request.batch} rows does not split over the data axis of {data}"
    keys = layout_keys(request.kernel_key, request.bias_key)
    for path, shape in weight_shapes(request).items():
        hits = [k for k in keys if matches(k, path)]
        if len(hits) > 1:
            return (
                f"{text.code(path)} matches both keys {', '.join(map(text.code, hits))} (Keras "
                "refuses a path with two layouts)"
            )
        if hits:
            layout = keys[hits[0]]
            if len(layout) != len(shape):
                return (
                    f"{text.code(path)} has {len(shape)} dimension(s); the layout {layout} of "
                    f"key {text.code(hits[0])} names {len(layout)}"
                )
            for size, axis in zip(shape, layout, strict=True):
                if axis is not None and size % request.axis_sizes[axis]:
                    return (
                        f"{text.code(path)} {shape}: dimension {size} does not split over the "
                        f"{axis} axis of {request.axis_sizes[axis]} devices"
                    )
    return None


def audit(request: Request, weights: Sequence[Mapping]) -> list[dict]:
    """One row per LayoutMap key (the request's and the trap's): what it fullmatches, what
    re.search would have matched, and a flag when it shards nothing."""
    paths = [w["path"] for w in weights]
    rows = []
    for label, keys in (("asked", (request.kernel_key, request.bias_key)), ("trap", TRAP_KEYS)):
        for key in keys:
            full = [p for p in paths if matches(key, p)]
            searched = [p for p in paths if re.search(key, p)]
            if full:
                flag = ""
            elif searched:
                flag = "matches nothing with re.fullmatch (would with re.search): prefix '.*'"
            else:
                flag = "matches no weight path"
            rows.append(
                {
                    "key set": label,
                    "key": key,
                    "fullmatch": ", ".join(full) or "nothing",
                    "flag": flag or "ok",
                }
            )
    return rows


def replicated(weights: Sequence[Mapping]) -> list[str]:
    """Paths whose read-back spec shards no dimension."""
    return [w["path"] for w in weights if all(a is None for a in w["spec"])]


def weight_rows(request: Request, mode: str, weights: Sequence[Mapping]) -> list[dict]:
    """The read-back table of one mode: path, shape, spec, per-device shard shapes, and the
    spec and shard shape predicted here."""
    keys = _keys_for(request, mode)
    sizes = _axis_sizes(request, mode)
    rows = []
    for w in weights:
        shape = tuple(w["shape"])
        want = expected_spec(w["path"], len(shape), keys)
        shards = sorted({tuple(s["shape"]) for s in w["shards"]})
        rows.append(
            {
                "path": w["path"],
                "shape": str(shape),
                "spec read": str(tuple(w["spec"])),
                "spec expected": str(want),
                "shard shapes": ", ".join(map(str, shards)),
                "expected shard": str(expected_shard_shape(shape, want, sizes)),
                "distinct shards": len({tuple(map(tuple, s["index"])) for s in w["shards"]}),
                "devices": len(w["shards"]),
                "replicated": all(a is None for a in w["spec"]),
            }
        )
    return rows


def _keys_for(request: Request, mode: str) -> dict[str, tuple]:
    if mode == "model_parallel":
        return layout_keys(request.kernel_key, request.bias_key)
    if mode == "trap":
        return layout_keys(*TRAP_KEYS)
    return {}


def _axis_sizes(request: Request, mode: str) -> dict[str, int]:
    if mode == "data_parallel":
        return {"batch": DEVICES}
    if mode == "single":
        return {}
    return request.axis_sizes


def mismatches(request: Request, mode: str, weights: Sequence[Mapping]) -> list[str]:
    """Every way the read-back sharding of ``mode`` differs from the prediction here."""
    keys, sizes = _keys_for(request, mode), _axis_sizes(request, mode)
    shapes = weight_shapes(request)
    out = []
    if sorted(w["path"] for w in weights) != sorted(shapes):
        out.append(f"{mode}: weight paths {sorted(w['path'] for w in weights)} differ")
    devices = 1 if mode == "single" else DEVICES
    for w in weights:
        shape = tuple(w["shape"])
        want = expected_spec(w["path"], len(shape), keys)
        got = normalize_spec(w["spec"], len(shape))
        if got != want:
            out.append(f"{mode}: {w['path']} spec {got}, expected {want}")
        if shapes.get(w["path"]) != shape:
            out.append(f"{mode}: {w['path']} shape {shape}, expected {shapes.get(w['path'])}")
        shard = expected_shard_shape(shape, want, sizes)
        for s in w["shards"]:
            if tuple(s["shape"]) != shard:
                out.append(f"{mode}: {w['path']} shard {tuple(s['shape'])}, expected {shard}")
                break
        if len(w["shards"]) != devices:
            out.append(f"{mode}: {w['path']} on {len(w['shards'])} devices, not {devices}")
        split = math.prod(sizes[a] for a in want if a is not None)
        if len({tuple(map(tuple, s["index"])) for s in w["shards"]}) != split:
            out.append(f"{mode}: {w['path']} is not split into {split} distinct shards")
    return out


def expected_input_shard(request: Request, mode: str) -> tuple[int, int]:
    data = {"single": 1, "data_parallel": DEVICES}.get(mode, request.mesh_shape[0])
    return (request.batch // data, request.features)


def numpy_forward(weights: Mapping[str, np.ndarray], x_BF) -> np.ndarray:
    """The MLP in NumPy float64: relu(x W0 + b0) -> relu(. W1 + b1) -> . W2 + b2."""
    h = np.asarray(x_BF, np.float64)
    for i, layer in enumerate(LAYERS):
        h = h @ np.asarray(weights[f"mlp/{layer}/kernel"], np.float64)
        h = h + np.asarray(weights[f"mlp/{layer}/bias"], np.float64)
        if i < len(LAYERS) - 1:
            h = np.maximum(h, 0.0)
    return h


def seeded(request: Request) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The batch x_BF and the weights from ``request.seed`` with NumPy: Glorot-uniform
    kernels, small nonzero biases (a zero bias would hide a misplaced one)."""
    rng = np.random.default_rng(request.seed)
    x = rng.normal(size=(request.batch, request.features)).astype(np.float32)
    weights = {}
    for path, shape in weight_shapes(request).items():
        if len(shape) == 2:
            limit = np.sqrt(6.0 / sum(shape))
            weights[path] = rng.uniform(-limit, limit, size=shape).astype(np.float32)
        else:
            weights[path] = rng.normal(scale=0.1, size=shape).astype(np.float32)
    return x, weights


@dataclasses.dataclass(frozen=True)
class Result:
    request: Request
    x_BF: np.ndarray
    weights: dict[str, np.ndarray]  # by path, made here (``seeded``)
    outputs: dict[str, np.ndarray]  # mode -> y_BC
    readback: dict[str, list[dict]]  # mode -> [{path, shape, spec, shards}]
    inputs: dict[str, dict]  # mode -> {"spec", "shards"} of the distributed batch
    output_specs: dict[str, list]
    seconds: float
    keras_version: str


def run(request: Request, folder: str | pathlib.Path) -> Result:
    """Run the four modes in one jax child; the arrays and read-backs returned."""
    reason = problem(request)
    if reason is not None:
        raise ValueError(reason)
    x, weights = seeded(request)
    arrays = {"x_BF": x, **{f"w:{k}": v for k, v in weights.items()}}
    done, arrays = child.run_arrays(_MODULE, request, arrays, folder, "distribution")
    outputs = {k.removeprefix("y:"): v for k, v in arrays.items() if k.startswith("y:")}
    r = done.result
    return Result(
        request,
        x,
        weights,
        outputs,
        r["weights"],
        r["inputs"],
        r["output_specs"],
        done.seconds,
        r["keras_version"],
    )


# --- the child (KERAS_BACKEND=jax) -------------------------------------------------------------


def _spec(sharding) -> list:
    spec = getattr(sharding, "spec", None)
    if spec is None:  # a single-device sharding: nothing is split
        return []
    return [None if a is None else (a if isinstance(a, str) else list(a)) for a in spec]


def _shards(array) -> list[dict]:
    return [
        {
            "device": int(s.device.id),
            "shape": list(s.data.shape),
            "index": [
                [sl.start or 0, sl.stop if sl.stop is not None else n]
                for sl, n in zip(s.index, array.shape, strict=True)
            ],
        }
        for s in array.addressable_shards
    ]


def _build(request: Request):
    """The MLP with zero initial weights (the parent's seeded weights are set afterwards)."""
    import keras

    zeros = {"kernel_initializer": "zeros", "bias_initializer": "zeros"}
    return keras.Sequential(
        [
            keras.Input((request.features,)),
            keras.layers.Dense(request.hidden, activation="relu", name=LAYERS[0], **zeros),
            keras.layers.Dense(request.hidden, activation="relu", name=LAYERS[1], **zeros),
            keras.layers.Dense(request.outputs, name=LAYERS[2], **zeros),
        ],
        name="mlp",
    )


def _handle(job: dict) -> dict:
    import time

    import jax
    from keras import distribution

    start = time.perf_counter()
    request = Request(**job["request"])
    with np.load(job["inputs"], allow_pickle=False) as data:
        x = data["x_BF"]
        given = {k.removeprefix("w:"): data[k] for k in data.files if k.startswith("w:")}
    single = _build(request)
    values = [given[w.path] for w in single.weights]  # a missing path raises, naming it
    single.set_weights(values)
    devices = distribution.list_devices()
    if len(devices) != DEVICES:
        raise RuntimeError(f"JAX sees {len(devices)} devices, the lesson needs {DEVICES}")
    mesh = distribution.DeviceMesh(request.mesh_shape, AXES, devices)
    dists = {"data_parallel": distribution.DataParallel(devices=devices)}
    for mode, keys in (
        ("model_parallel", (request.kernel_key, request.bias_key)),
        ("trap", TRAP_KEYS),
    ):
        layout_map = distribution.LayoutMap(mesh)
        for key, layout in layout_keys(*keys).items():
            layout_map[key] = layout
        dists[mode] = distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    y = single(x)
    arrays = {"y:single": np.asarray(y, np.float32)}
    read = {"single": [_read(w) for w in single.weights]}
    x_single = jax.numpy.asarray(x)
    inputs = {"single": {"spec": _spec(x_single.sharding), "shards": _shards(x_single)}}
    out_specs = {"single": _spec(y.sharding)}
    for mode, dist in dists.items():
        with dist.scope():
            model = _build(request)
            model.set_weights(values)
            x_dist = distribution.distribute_tensor(x, dist.get_data_layout(x.shape))
            y = model(x_dist)
        arrays[f"y:{mode}"] = np.asarray(y, np.float32)
        read[mode] = [_read(w) for w in model.weights]
        inputs[mode] = {"spec": _spec(x_dist.sharding), "shards": _shards(x_dist)}
        out_specs[mode] = _spec(y.sharding)
    np.savez(job["output"], **arrays)
    seconds = time.perf_counter() - start
    return {"weights": read, "inputs": inputs, "output_specs": out_specs, "work_s": seconds}


def _read(w) -> dict:
    value = w.value
    return {
        "path": w.path,
        "shape": list(value.shape),
        "spec": _spec(value.sharding),
        "shards": _shards(value),
    }


if __name__ == "__main__":
    sys.exit(child.serve(sys.argv[1:], _handle))
