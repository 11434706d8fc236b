"""The process that runs one learner's code answer, started by core.assessment.sandbox.

This file is the child's whole program: the parent passes its source with ``python -I -B -c``,
so the child imports nothing of the course (only the standard library, NumPy and JAX). Before
it reads the learner's source it

1. limits itself (RLIMIT_AS: address space, RLIMIT_FSIZE, no core file), drops every Linux
   capability (a grader run as root keeps no privilege in its child), sets no_new_privs;
2. starts JAX on CPU with the parent's device count;
3. where the kernel has Landlock (Linux 5.13+), confines itself: it may read only the Python
   installation and the system libraries the parent names, write only its own temporary
   folder, open no TCP connection and signal no process outside itself (ABI 6). The course's
   folder, and with it the reference solutions and the hidden tests' references, is not
   readable at all, by import or by path.

Then it answers the parent's requests, one JSON object a line: ``load`` (execute the source,
find the function) and ``call`` (call it on the arguments, return what it returned). Values
travel as plain JSON (arrays as base64 of their bytes), never pickle; the parent validates
every reply and judges the results itself, so nothing the child says can make an answer
pass except return values that pass the hidden tests.
"""

from __future__ import annotations

import base64
import builtins
import json
import os
import struct
import sys
import traceback

SOURCE_NAME = "<your code>"  # the file name the learner's tracebacks show
MAX_TEXT = 2000  # characters of a message or repr sent back
MAX_DEPTH = 24  # nesting of a value sent back
DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
)  # fmt: skip

# --- values on the wire (both directions; the parent validates what comes back) ----------


def _numpy():
    import numpy as np

    return np


def _dtype(name: str):
    np = _numpy()
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def encode_array(array, scalar: bool = False) -> dict:
    np = _numpy()
    array = np.asarray(array)  # (tobytes writes C order whatever the strides)
    if array.dtype.name not in DTYPES:
        raise TypeError(f"an array of dtype {array.dtype}")
    return {
        "t": "ndarray",
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "data": base64.b64encode(array.tobytes()).decode("ascii"),
        "scalar": scalar,
    }


def decode_array(value: dict):
    np = _numpy()
    data = base64.b64decode(value["data"], validate=True)
    array = np.frombuffer(data, dtype=_dtype(value["dtype"])).reshape(value["shape"]).copy()
    return array[()] if value.get("scalar") else array


def _spec_entry(entry):
    if entry is None or isinstance(entry, str):
        return entry
    if isinstance(entry, tuple | list) and all(isinstance(e, str) for e in entry):
        return list(entry)
    raise TypeError(f"a PartitionSpec entry {entry!r}")


def encode(value, devices: list, depth: int = 0) -> dict:
    """``value`` as JSON: arrays, jax.Arrays (with their sharding), meshes, scalars, strings,
    lists, tuples and dicts; anything else as its type name and repr."""
    np = _numpy()
    if depth > MAX_DEPTH:
        return {"t": "other", "type": type(value).__name__, "repr": "(nested too deep)"}
    if isinstance(value, np.generic) and value.dtype.name in DTYPES:  # before float: float64
        return encode_array(np.asarray(value), scalar=True)
    if value is None:
        return {"t": "none"}
    if isinstance(value, bool):
        return {"t": "bool", "v": value}
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return {"t": "int", "v": value}
    if isinstance(value, float):
        return {"t": "float", "v": value.hex()}
    if isinstance(value, str) and len(value) <= 100_000:
        return {"t": "str", "v": value}
    if isinstance(value, list | tuple):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {"t": kind, "items": [encode(v, devices, depth + 1) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str | int) for k in value):
        return {
            "t": "dict",
            "items": [
                [encode(k, devices), encode(v, devices, depth + 1)] for k, v in value.items()
            ],
        }
    if "jax" in sys.modules:
        import jax

        if isinstance(value, jax.sharding.Mesh):
            return _encode_mesh(value, devices)
        if isinstance(value, jax.Array):
            return _encode_jax(value, devices)
    if isinstance(value, np.ndarray) and value.dtype.name in DTYPES:
        return encode_array(value)
    return {"t": "other", "type": type(value).__name__, "repr": _short(repr(value))}


def _encode_mesh(mesh, devices: list) -> dict:
    types = getattr(mesh, "axis_types", None)
    return {
        "t": "mesh",
        "shape": [int(n) for n in mesh.devices.shape],
        "axis_names": [str(a) for a in mesh.axis_names],
        "axis_types": [t.name for t in types] if types is not None else None,
        "devices": [devices.index(d) for d in mesh.devices.flat],
    }


def _encode_jax(array, devices: list) -> dict:
    import jax

    np = _numpy()
    sharding = array.sharding
    out = {"t": "jax", "dtype": array.dtype.name, "shape": list(array.shape)}
    if len(sharding.device_set) == 1:
        (device,) = sharding.device_set
        return {**out, "device": devices.index(device), "committed": bool(array.committed),
                "named": None, "shard_devices": [],
                "shards": [encode_array(np.asarray(array))]}  # fmt: skip
    if isinstance(sharding, jax.sharding.NamedSharding):
        named = {"mesh": _encode_mesh(sharding.mesh, devices),
                 "spec": [_spec_entry(e) for e in sharding.spec]}  # fmt: skip
    elif sharding.is_fully_replicated:  # a replicated GSPMD sharding: the same on a 1-D mesh
        order = sorted(sharding.device_set, key=devices.index)
        named = {"mesh": {"t": "mesh", "shape": [len(order)], "axis_names": ["devices"],
                          "axis_types": None, "devices": [devices.index(d) for d in order]},
                 "spec": []}  # fmt: skip
    else:
        return encode_array(np.asarray(array))
    shards = sorted(array.addressable_shards, key=lambda s: devices.index(s.device))
    return {
        **out,
        "device": None,
        "committed": True,
        "named": named,
        "shard_devices": [devices.index(s.device) for s in shards],
        "shards": [encode_array(np.asarray(s.data)) for s in shards],
    }


def _mesh(value: dict, devices: list):
    import jax

    np = _numpy()
    grid = np.array([devices[i] for i in value["devices"]], dtype=object)
    kwargs = {}
    if value.get("axis_types") is not None:
        kwargs["axis_types"] = tuple(jax.sharding.AxisType[t] for t in value["axis_types"])
    return jax.sharding.Mesh(grid.reshape(value["shape"]), tuple(value["axis_names"]), **kwargs)


def decode(value: dict, devices: list):
    """The object ``value`` encodes, on ``devices`` (this process's jax.devices())."""
    kind = value["t"]
    if kind == "none":
        return None
    if kind in ("bool", "int", "str"):
        return value["v"]
    if kind == "float":
        return float.fromhex(value["v"])
    if kind in ("list", "tuple"):
        items = [decode(v, devices) for v in value["items"]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {decode(k, devices): decode(v, devices) for k, v in value["items"]}
    if kind == "ndarray":
        return decode_array(value)
    if kind == "mesh":
        return _mesh(value, devices)
    if kind == "jax":
        import jax

        if value["named"] is None:  # one device; uncommitted (jnp.asarray) goes where used
            place = devices[value["device"]] if value["committed"] else None
            return jax.device_put(decode_array(value["shards"][0]), place)
        named = value["named"]
        spec = jax.sharding.PartitionSpec(
            *(tuple(e) if isinstance(e, list) else e for e in named["spec"])
        )
        sharding = jax.sharding.NamedSharding(_mesh(named["mesh"], devices), spec)
        pieces = [
            jax.device_put(decode_array(s), devices[d])
            for s, d in zip(value["shards"], value["shard_devices"], strict=True)
        ]
        return jax.make_array_from_single_device_arrays(tuple(value["shape"]), sharding, pieces)
    if kind == "other":
        return Opaque(value["type"], value["repr"])
    raise ValueError(f"unknown value kind {kind!r}")


class Opaque:
    """A value the wire does not carry (a function, a generator, ...): its type and repr."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"


def _short(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 20] + " ... (cut)"


# --- limits and confinement ---------------------------------------------------------------

_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
# Landlock access rights (linux/landlock.h) and the ABI that brought each.
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_ALL_V1 = (1 << 13) - 1  # execute .. make_sym
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2


def set_limits(memory_bytes: int, file_bytes: int) -> None:
    import resource

    for name, value in (("RLIMIT_AS", memory_bytes), ("RLIMIT_FSIZE", file_bytes),
                        ("RLIMIT_CORE", 0)):  # fmt: skip
        limit = getattr(resource, name, None)
        if limit is not None:
            try:
                resource.setrlimit(limit, (value, value))
            except (ValueError, OSError):  # not enforced here (macOS RLIMIT_AS): left as is
                pass


def drop_privileges() -> None:
    """No capability left (a root grader's child cannot raise its limits or read past file
    permissions), none regained by exec, and no_new_privs (Landlock needs it)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):  # the bounding set: exec cannot give them back
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two empty (effective, permitted, inheritable) sets
    libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data))
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def confine(read: list[str], write: list[str]) -> str:
    """Landlock: read (and execute) only under ``read``, read and write only under ``write``;
    no TCP, no signal out of the domain where the ABI has them. Returns what was done."""
    if not sys.platform.startswith("linux"):
        return f"unconfined: no Landlock on {sys.platform}"
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 0:
        return f"unconfined: this kernel offers no Landlock ({os.strerror(ctypes.get_errno())})"
    fs = _FS_ALL_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    fs |= _FS_IOCTL_DEV if abi >= 5 else 0
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("=QQQ", fs, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = syscall(_LANDLOCK_CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    reading = _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE
    try:
        for paths, rights in ((read, reading), (write, fs)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # a root that does not exist here
                try:
                    allowed = rights if os.path.isdir(path) else rights & _FILE_RIGHTS & fs
                    rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
                    if syscall(_LANDLOCK_ADD_RULE, ruleset, 1, rule, 0) < 0:
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
                finally:
                    os.close(fd)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if syscall(_LANDLOCK_RESTRICT_SELF, ruleset, 0) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    parts = ["files"] + (["TCP"] if net else []) + (["signals"] if scoped else [])
    return f"Landlock ABI {abi}: {', '.join(parts)} confined"


# --- the loop -------------------------------------------------------------------------------


def _error(error: BaseException) -> dict:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == SOURCE_NAME]
    kind = "exception"
    if isinstance(error, SystemExit | KeyboardInterrupt | GeneratorExit):
        kind = "exit"
    elif isinstance(error, MemoryError):
        kind = "memory"
    name = type(error).__name__
    return {
        "kind": kind,
        "type": name,
        "builtin": getattr(builtins, name, None) is type(error),
        "message": _short(str(error) if not isinstance(error, SystemExit) else repr(error.code)),
        "line": frames[-1].lineno if frames else None,
    }


def _materialize(value):
    """Wait for JAX's asynchronous results, so an error in them is the learner's call's."""
    if "jax" in sys.modules:
        import jax

        jax.block_until_ready(value)
    return value


def main(config: dict) -> None:
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    os.dup2(2, 1)  # the learner's print() goes to stderr, never into a reply
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # input() reads nothing
    os.close(null)
    # An editable install's finder and path hook map the course's packages: drop them.
    editable = lambda f: str(getattr(f, "__module__", "")).startswith("__editable")  # noqa: E731
    sys.meta_path[:] = [f for f in sys.meta_path if not editable(f)]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not editable(h)]
    sys.path_importer_cache.clear()
    prefixes = (sys.prefix, sys.exec_prefix)  # a virtual environment inside the project stays
    own = [
        p
        for p in sys.path
        if p and (not _inside(p, config["project_root"]) or any(_inside(p, x) for x in prefixes))
    ]
    sys.path[:] = config["path"] + [p for p in own if p not in config["path"]]

    def reply(message: dict) -> None:
        for stream in (sys.stdout, sys.stderr):  # what the learner printed, before the reply
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        replies.write(json.dumps(message, allow_nan=False) + "\n")
        replies.flush()

    set_limits(config["memory_bytes"], config["file_bytes"])
    drop_privileges()
    import jax
    import numpy  # noqa: F401

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", int(config["cpu_devices"]))
    devices = list(jax.devices())
    confinement = confine(config["read"] + [f"/proc/{os.getpid()}"], config["write"])
    reply({"ready": {"confinement": confinement, "devices": len(devices)}})
    function = None
    for line in requests:
        request = json.loads(line)
        try:
            if request["op"] == "load":
                namespace = {"__name__": "learner", "__builtins__": builtins}
                exec(compile(request["source"], SOURCE_NAME, "exec"), namespace)  # noqa: S102
                function = namespace.get(request["name"])
                if not callable(function):
                    raise NameError(f"the source defines no function named {request['name']!r}")
                reply({"ok": True})
            else:
                args = [decode(v, devices) for v in request["args"]]
                kwargs = {k: decode(v, devices) for k, v in request["kwargs"].items()}
                out = _materialize(function(*args, **kwargs))
                reply({"ok": True, "value": encode(out, devices)})
        except BaseException as error:  # the learner's: every kind is reported, none ends us
            reply({"ok": False, "error": _error(error)})


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


if __name__ == "__main__" and len(sys.argv) == 2:
    main(json.loads(sys.argv[1]))
