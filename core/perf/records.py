"""Benchmark records kept in the repo: dated, per machine, validated, citable.

A number an app or a doc quotes as measured points at a record here, not at a JSON that
lived in the git-ignored ``benchmarks/results/`` of the machine that made it. One record is a
small JSON file ``benchmarks/records/<name>/<YYYY-MM-DD>_<machine-slug>.json`` validated by
``core.documents.BenchmarkRecord``: what was measured (``figures``), the exact ``command``, the
machine (label, CPU model, cores, JAX platform), the versions (python, jax, jaxlib, and torch
when the process imported it) and the load during the run (``load``: how many cores OTHER
processes kept busy, measured from two readings of the machine's and this process's CPU
seconds, at the start of the run and at the end).

A record taken on a busy machine measures the load, not the machine (the byte Transformer
bench run beside other work said JAX was several times faster than PyTorch eager; quiet runs
did not). So ``write_record`` refuses (``BusyMachine``, nothing written) when other processes
kept more than ``LOAD_LIMIT`` of the cores busy, and ``latest``/``cite`` never pick a record
marked ``under_load`` (the records kept from before the check, marked by hand with what their
notes measured); when only marked ones exist they raise ``NoCitableRecord``, saying how to
re-record. Float figures keep ``SIGNIFICANT`` significant digits, so a small error such as
2.2e-07 is never rounded to 0.0.

    path = write_record("byte_transformer_bench", "python -m ... bench", {"decode_ratio": 21.5})
    latest("byte_transformer_bench").figures["decode_ratio"]
    cite("byte_transformer_bench")   # "benchmarks/records/... (2026-12-02, AMD EPYC, 2 cores ...)"

The root is ``benchmarks/records`` of this checkout; ``root=`` (or the environment variable
``JAX_LAB_RECORDS_DIR``) points elsewhere, so tests and trial runs do not touch the repo.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import pathlib
import platform
import re
import sys
import time

from core import documents, runtime

REPO = pathlib.Path(__file__).resolve().parents[2]
# In a wheel install (a TPU VM) the committed records ship in core/_course/ (wheel_contents).
RECORDS_DIR = runtime.course_path("benchmarks/records")
ROOT_ENV = "JAX_LAB_RECORDS_DIR"
NAME = re.compile(r"[a-z0-9]+(_[a-z0-9]+)*")
WHAT = "benchmark record"
# Other processes may keep at most this share of the machine's CPUs busy, averaged over the
# run (a quarter of a core on 2 CPUs, the bench's own "shared machine" warning): past it, a
# framework whose threads wait at barriers (torch's OpenMP) loses more than one whose threads
# take independent work (XLA), and the figures rank the load instead of the frameworks.
LOAD_LIMIT = 0.125
SIGNIFICANT = 5  # significant digits a float figure keeps (never a fixed number of decimals)


class BusyMachine(RuntimeError):
    """The machine was busy past ``LOAD_LIMIT`` during the run: no record was written."""


class NoCitableRecord(FileNotFoundError):
    """A benchmark has records, but every one was taken under load: none may be cited."""


def records_root(root: str | os.PathLike | None = None) -> pathlib.Path:
    """``root`` if given, else ``$JAX_LAB_RECORDS_DIR`` if set, else the repo's records."""
    if root is not None:
        return pathlib.Path(root)
    return pathlib.Path(os.environ.get(ROOT_ENV) or RECORDS_DIR)


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"a benchmark record name is snake_case ([a-z0-9_]), got {name!r}")
    return name


def machine_slug(machine: dict) -> str:
    """``"amd-epyc-2core-cpu"``: the file-name part naming the machine (CPU, cores, platform);
    with an accelerator it comes first: ``"tpu-v5-lite-x1-unknown-13core-tpu"``."""
    cores = "" if machine["cores"] is None else f" {machine['cores']}core"
    text = f"{machine['cpu']}{cores} {machine['platform']}"
    if accelerator := machine.get("accelerator"):
        text = f"{accelerator['kind']} x{accelerator['count']} {text}"
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_label(cpu_label: str, accelerator: dict | None) -> str:
    """The record's machine label: ``cpu_label`` alone, or led by the accelerator
    (``"1 x TPU v5 lite; host CPU: unknown, 13 cores"``)."""
    if not accelerator:
        return cpu_label
    return f"{accelerator['count']} x {accelerator['kind']}; host CPU: {cpu_label}"


def accelerator(backend: str, device_kinds: list[str], device_count: int) -> dict | None:
    """The record's accelerator from JAX's backend and devices: None on the CPU backend."""
    if backend == "cpu" or not device_kinds:
        return None
    return {"kind": ", ".join(sorted(set(device_kinds))), "count": device_count}


def _versions() -> dict[str, str]:
    import jax
    import jaxlib

    versions = {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
    }
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(getattr(torch, "__version__", None), str):
        versions["torch"] = str(torch.__version__)
    return versions


def _load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _machine_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine since boot (/proc/stat; None elsewhere)."""
    try:
        first = pathlib.Path("/proc/stat").read_text().split("\n")[0].split()
        fields = [int(value) for value in first[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _live_descendants_s() -> float:
    """CPU seconds of this process's live descendants (/proc; 0 elsewhere). A child that
    is still running (a server, a worker) is not in os.times() until it is waited for."""
    parents, seconds = {}, {}
    try:
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
            parents[int(entry.name)] = int(fields[1])
            seconds[int(entry.name)] = sum(int(v) for v in fields[11:15])  # u, s, cu, cs
    except (OSError, ValueError, IndexError):
        return 0.0
    ours, total, frontier = {os.getpid()}, 0, [os.getpid()]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        children = [pid for pid in children if pid not in ours]
        ours.update(children)
        total += sum(seconds[pid] for pid in children)
        frontier = children
    return total / os.sysconf("SC_CLK_TCK")


def read_load() -> dict:
    """One reading: the load average, the whole machine's busy CPU seconds (None without
    /proc/stat), this process's CPU seconds with its children's, and the wall clock. Two
    readings give what OTHER processes used in between (``measure_load``)."""
    own = os.times()
    return {
        "load_average": _load_average(),
        "machine_busy_s": _machine_busy_s(),
        "own_s": own.user
        + own.system
        + own.children_user
        + own.children_system
        + _live_descendants_s(),
        "wall_s": time.monotonic(),
    }


# The default start of a measured run: benchmarks import this module before they measure.
PROCESS_START = read_load()


def measure_load(start: dict | None = None, end: dict | None = None, cpus: int | None = None):
    """The load between two ``read_load`` readings (``start`` default: when this module was
    imported; ``end``: now), as a record keeps it: the run's seconds, the cores this process
    (and its children) used, the cores OTHER processes kept busy on average, the load
    averages, and the limit. Without /proc/stat, the 1-minute load average before the run
    stands for the others (it cannot tell this process's threads from theirs after)."""
    start = PROCESS_START if start is None else start
    end = read_load() if end is None else end
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    seconds = end["wall_s"] - start["wall_s"]
    own = end["own_s"] - start["own_s"]
    others = None
    if seconds > 0 and None not in (start["machine_busy_s"], end["machine_busy_s"]):
        busy = end["machine_busy_s"] - start["machine_busy_s"]
        others = max(0.0, (busy - own) / seconds)
    elif start["load_average"] is not None:
        others = float(start["load_average"][0])
    return {
        "seconds": round(seconds, 1),
        "cpus": cpus,
        "own_cores": round(own / seconds, 3) if seconds > 0 else 0.0,
        "other_processes_cores": None if others is None else round(others, 3),
        "limit_cores": LOAD_LIMIT * cpus,
        "load_average_start": start["load_average"],
        "load_average_end": end["load_average"],
    }


def busy_reason(load: dict | None) -> str:
    """Why ``load`` makes a record worthless ("" when it does not, or was not measured)."""
    if load is None or load.get("other_processes_cores") is None:
        return ""
    others, limit = load["other_processes_cores"], load["limit_cores"]
    if others <= limit:
        return ""
    return (
        f"other processes kept {others:.2f} of {load['cpus']} cores busy on average over "
        f"the {load['seconds']:g} s run (limit {limit:.2f}: {LOAD_LIMIT:.1%} of the cores)"
    )


def significant(value, digits: int = SIGNIFICANT):
    """``value`` with every float rounded to ``digits`` significant digits (lists too)."""
    if isinstance(value, list):
        return [significant(item, digits) for item in value]
    if isinstance(value, float) and math.isfinite(value) and value != 0.0:
        return float(f"{value:.{digits - 1}e}")
    return value


def make_record(
    name: str, command: str, figures: dict, notes: str = "", load: dict | None = None
) -> dict:
    """The record document of ``figures`` just measured here (validated; nothing written).

    ``load``: ``measure_load()``'s result for the run (default: measured now, from this
    module's import to this call). Float figures keep ``SIGNIFICANT`` significant digits.
    """
    import jax

    from core.perf import machine

    _check_name(name)
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"a benchmark record needs the exact command that ran, got {command!r}")
    if not isinstance(figures, dict) or not figures:
        raise ValueError(f"a benchmark record needs figures (a non-empty dict), got {figures!r}")
    devices = jax.devices()
    chips = accelerator(jax.default_backend(), [d.device_kind for d in devices], len(devices))
    here = {
        "label": machine_label(machine.machine_label(), chips),
        "cpu": machine.cpu_model(),
        "cores": machine.core_count(),
        "platform": jax.default_backend(),
        **({"accelerator": chips} if chips else {}),
    }
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    load = measure_load() if load is None else load
    return record_of(name, command, figures, here, _versions(), date, load, notes, _load_average())


def record_of(
    name: str,
    command: str,
    figures: dict,
    machine: dict,
    versions: dict,
    date: str,
    load: dict | None,
    notes: str = "",
    load_average: list | None = None,
) -> dict:
    """The record document of ``figures`` measured on ``machine`` with ``versions`` on
    ``date`` (validated; nothing written). ``make_record`` gives this machine's own; a record
    of figures measured elsewhere (a TPU host whose run came back as files) takes the machine,
    versions, date and load from that host's own files, never from this machine.
    ``load_average``: default the load's at its start."""
    document = {
        "schema_version": 1,
        "name": _check_name(name),
        "date": date,
        "machine": machine,
        "versions": versions,
        "command": command,
        "load_average": load_average or (load["load_average_start"] if load else None),
        "load": load,
        "figures": {key: significant(value) for key, value in figures.items()},
        "notes": notes,
        "under_load": "",
    }
    return documents.validate(documents.BenchmarkRecord, document, WHAT)


def write_record(
    name: str,
    command: str,
    figures: dict,
    notes: str = "",
    root: str | os.PathLike | None = None,
    load: dict | None = None,
) -> pathlib.Path:
    """Validate, then write the record atomically; returns its path.

    ``<root>/<name>/<YYYY-MM-DD>_<machine-slug>.json``: a second run on the same day on the
    same machine replaces that day's record (one record per machine per day). ``load``:
    ``measure_load()``'s result for the run (default: from this module's import to now).
    BusyMachine, with nothing written, when other processes kept more than ``LOAD_LIMIT``
    of the cores busy.
    """
    return write_document(make_record(name, command, figures, notes, load), root)


def record_path(document: dict, root: str | os.PathLike | None = None) -> pathlib.Path:
    """Where ``document`` is kept: ``<root>/<name>/<date>_<machine-slug>.json``."""
    file_name = f"{document['date']}_{machine_slug(document['machine'])}.json"
    return records_root(root) / _check_name(document["name"]) / file_name


def write_document(document: dict, root: str | os.PathLike | None = None) -> pathlib.Path:
    """Validate a whole record document and write it atomically (``record_path``).

    For records whose machine, versions and load were measured elsewhere (a TPU host's course
    run, written here from the bundles it brought back): BusyMachine, nothing written, when
    the document's own ``load`` says other processes kept that machine busy.
    """
    documents.validate(documents.BenchmarkRecord, document, WHAT)
    reason = busy_reason(document["load"])
    if reason:
        raise BusyMachine(
            f"benchmark record {document['name']!r} not written: {reason}. Its figures would "
            f"measure the load, not the machine; rerun on a quiet machine: {document['command']}"
        )
    path = record_path(document, root)
    return documents.write_text_atomic(path, json.dumps(document, indent=2) + "\n")


def load(path: str | os.PathLike) -> documents.BenchmarkRecord:
    """The record in ``path``, validated; ValueError naming the file (and the field) if not."""
    path = pathlib.Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the benchmark record ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting too deep
        raise ValueError(f"{path}: not JSON ({exc})") from None
    try:
        documents.validate(documents.BenchmarkRecord, document, WHAT)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    record = documents.BenchmarkRecord.model_validate(document)
    if path.parent.name != record.name:
        raise ValueError(f"{path}: field 'name' is {record.name!r}, its folder says otherwise")
    if not path.name.startswith(f"{record.date}_"):
        raise ValueError(f"{path}: field 'date' is {record.date!r}, its file name says otherwise")
    return record


def paths(name: str, root: str | os.PathLike | None = None) -> list[pathlib.Path]:
    """Every record file of ``name`` (sorted by file name: date, then machine)."""
    return sorted((records_root(root) / _check_name(name)).glob("*.json"))


def _newest(name: str, root) -> tuple[pathlib.Path, documents.BenchmarkRecord]:
    found = paths(name, root)
    if not found:
        raise FileNotFoundError(
            f"no benchmark record {name!r} under {records_root(root)} (run its benchmark with "
            "the option that writes a record)"
        )
    loaded = [(path, load(path)) for path in found]  # every file validated, not just the last
    citable = [(path, record) for path, record in loaded if not record.under_load]
    if not citable:
        marked = "; ".join(f"{path}: {record.under_load}" for path, record in loaded)
        raise NoCitableRecord(
            f"no citable benchmark record {name!r}: every one was taken under load ({marked}). "
            f"Re-record it on a quiet machine: {loaded[-1][1].command}"
        )
    return max(citable, key=lambda item: (item[1].date, item[0].name))


def latest(name: str, root: str | os.PathLike | None = None) -> documents.BenchmarkRecord:
    """The newest record of ``name`` not marked ``under_load`` (by its date; the same date:
    by file name).

    FileNotFoundError when there is none (NoCitableRecord, a FileNotFoundError, when every
    one is marked); ValueError naming the file and field when any record of ``name`` is
    damaged.
    """
    return _newest(name, root)[1]


def latest_path(name: str, root: str | os.PathLike | None = None) -> pathlib.Path:
    """The file of ``latest(name)``."""
    return _newest(name, root)[0]


def cite(name: str, root: str | os.PathLike | None = None) -> str:
    """``"<path> (<date>, <machine label>)"`` of the newest record, the path repo-relative."""
    path, record = _newest(name, root)
    try:
        shown = path.resolve().relative_to(RECORDS_DIR.resolve().parents[1])  # benchmarks/...
    except ValueError:
        shown = path
    return f"{shown} ({record.date}, {record.machine.label})"
