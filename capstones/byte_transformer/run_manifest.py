"""The manifest of a run: what ran where, and whether it may be called a TPU run.

    python -m capstones.byte_transformer run-manifest run_dir=DIR [log=JOB.log]
        [describe_json=DESCRIBE.json] [teardown_log=TEARDOWN.log] [claim_tpu=false] [out=...]

writes DIR/run_manifest.json (atomically) and prints a summary. The runtime (backend and
devices) is the one the job recorded on its own host in DIR/runtime.json
(tpu_scripts/byte_transformer_tpu.py writes it with ``capture_runtime()`` on the TPU VM);
without that file it is this process's own runtime, and on a laptop that is a CPU.

A run is a TPU run only if its backend is "tpu" AND every device is a TPU device. A claim
that contradicts that is refused and nothing is written: ``claim_tpu=true``, or a result
file in DIR marked as a TPU result (``tpu_result.json`` with ``is_tpu_result: true``),
on a runtime that is not a TPU. The manifest detects contradictions, not forgery: whoever
can write DIR can write runtime.json.

Nothing here reaches the network. On a TPU VM the metadata server
(http://metadata.google.internal/computeMetadata/v1/instance/attributes/accelerator-type,
header Metadata-Flavor: Google) also knows the accelerator type; this module reads the
gcloud describe JSON instead, fetched by the person running the job.

run_manifest.json (keys; documents.RunManifest, docs/schemas/run_manifest.schema.json):
    schema, created_utc, run_dir
    tpu: {name, zone, project, accelerator_type, runtime_version, state, topology, source,
          conflicts: [str]}
    runtime_source: "recorded: runtime.json" | "live: this process" | "given"
    environment: {python, packages: {jax, jaxlib, libtpu, flax, optax, orbax-checkpoint},
          platform, hostname, tpu_vm}
    devices: [{platform, device_kind, id, process_index, coords, core_on_chip}]
    backend: str
    backend_events: {log, log_sha256, lines, counts: {kind: n}, events: [{line, kinds,
          text}], truncated}
    results: [{path, kind, is_tpu_result}]
    checkpoints: {files: [{path, bytes, sha256}], file_count, total_bytes,
          steps: [{directory, step, verified, problems}], partial_saves: [str]}
    teardown: {deleted, applicable, proof, names_tpu}
    is_tpu_run: bool
    verdict: str
"""

from __future__ import annotations

import datetime
import importlib.metadata
import pathlib
import platform
import re
import socket
import sys

from capstones.byte_transformer import args, documents
from core import documents as core_documents

SCHEMA = documents.RUN_MANIFEST_SCHEMA
MANIFEST_FILE = "run_manifest.json"
RUNTIME_FILE = "runtime.json"
# result files written by tpu_scripts/byte_transformer_tpu.py: name -> is it a TPU result
TPU_RESULT_FILE = "tpu_result.json"
REHEARSAL_RESULT_FILE = "cpu_rehearsal_result.json"
RESULT_FILES = {TPU_RESULT_FILE: True, REHEARSAL_RESULT_FILE: False}
TPU_RESULT_KIND = "tpu result"
REHEARSAL_KIND = "cpu rehearsal — not a TPU result"
CHECKPOINTS_DIR = "checkpoints"  # training.CHECKPOINTS
PACKAGES = ("jax", "jaxlib", "libtpu", "flax", "optax", "orbax-checkpoint")
MAX_EVENTS = 400

# Each log line gets every kind whose pattern it matches (a libtpu error is both).
EVENT_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        (
            "error",
            r"Traceback \(most recent call last\)|\b\w*(Error|Exception)\b:|RESOURCE_EXHAUSTED"
            r"|\bINTERNAL\b:|FAILED_PRECONDITION|DEADLINE_EXCEEDED|UNAVAILABLE:"
            r"|Segmentation fault|[Oo]ut of memory|\bKilled\b|^E\d{4} |\bERROR\b|^refused:",
        ),
        (
            "tpu_init",
            r"libtpu|TPU_WORKER|TPU_ACCELERATOR_TYPE|TPU_SKIP_MDS_QUERY|tpu_driver"
            r"|TPU platform|[Ii]nitializ\w* TPU|TPU backend|InitGoogle|megascale|/dev/accel",
        ),
        (
            "platform",
            r"Unable to initialize backend|[Ff]alling back to (cpu|CPU)|No GPU/TPU found"
            r"|jax_platforms|JAX_PLATFORMS|default[ _]backend|^backend: \w+|Platform '\w+'"
            r"|devices: \d+",
        ),
        (
            "compile",
            r"[Cc]ompil(e|ed|es|ing|ation)\b|compile_s|persistent compilation cache"
            r"|XLA compilation",
        ),
        ("warning", r"^W\d{4} |\bWARNING\b|Warning:"),
    )
)
NOT_FOUND = re.compile(r"NOT_FOUND|was not found")
STILL_THERE = re.compile(r"state:\s*READY|\"state\":\s*\"READY\"|still exists")


class ClaimRefused(ValueError):
    """A run claims to be a TPU run but its runtime is not a TPU."""


# --- the runtime -----------------------------------------------------------------------------


def package_versions() -> dict[str, str | None]:
    """Installed versions (importlib.metadata; None when not installed)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def environment() -> dict:
    from core import runtime

    return {
        "python": platform.python_version(),
        "packages": package_versions(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "tpu_vm": runtime.host_has_tpu(),
    }


def device_record(device) -> dict:
    """One jax device as JSON: platform, kind, id, process index, coords (TPU only)."""
    coords = getattr(device, "coords", None)
    core = getattr(device, "core_on_chip", None)
    return {
        "platform": str(device.platform),
        "device_kind": str(device.device_kind),
        "id": int(device.id),
        "process_index": int(device.process_index),
        "coords": [int(c) for c in coords] if coords is not None else None,
        "core_on_chip": int(core) if core is not None else None,
    }


def capture_runtime() -> dict:
    """This process's backend, devices and environment (starts JAX's backend)."""
    import jax

    return {
        "captured_utc": _now(),
        "backend": jax.default_backend(),
        "devices": [device_record(d) for d in jax.devices()],
        "environment": environment(),
    }


def validate_runtime(runtime) -> dict:
    """``runtime`` if documents.Runtime accepts it (a backend string and device records with
    a platform and a kind), else ValueError naming the first bad field."""
    found = documents.problem(documents.Runtime, runtime)
    if found is not None:
        raise ValueError(f"runtime record: {found}")
    return runtime


def tpu_refusal(runtime: dict, rehearsal: str) -> str | None:
    """None when ``runtime`` (capture_runtime()) is a TPU run, else the refusal a script
    prints before writing anything; ``rehearsal`` says what --allow-cpu-rehearsal does."""
    if is_tpu_run(runtime):
        return None
    kind = (runtime.get("devices") or [{}])[0].get("device_kind", "no device")
    return (
        f"refused: jax.default_backend() is {runtime.get('backend')!r} ({kind}), not 'tpu'. "
        "This script writes TPU results only on a TPU VM; a CPU number never stands in for a "
        f"TPU number. To rehearse here, pass --allow-cpu-rehearsal ({rehearsal}). Nothing was "
        "written."
    )


def is_tpu_run(runtime: dict) -> bool:
    """backend "tpu" AND at least one device AND every device a TPU."""
    devices = runtime.get("devices") or []
    return (
        runtime.get("backend") == "tpu"
        and bool(devices)
        and all(
            d.get("platform") == "tpu" and str(d.get("device_kind", "")).startswith("TPU")
            for d in devices
        )
    )


# --- the TPU VM's identity ---------------------------------------------------------------------

_NODE_NAME = re.compile(r"^projects/([^/\n]+)/locations/([^/\n]+)/nodes/([^/\n]+)\Z")
TPU_FIELDS = ("name", "zone", "project", "accelerator_type", "runtime_version")


def tpu_identity(describe: dict | None = None, **given: str) -> dict:
    """name, zone, project, accelerator type, runtime version (+ state, topology) from a
    ``gcloud compute tpus tpu-vm describe NAME --zone=Z --format=json`` document and/or
    arguments; an argument that disagrees with the describe JSON is listed in conflicts."""
    identity = dict.fromkeys(TPU_FIELDS)
    identity.update(state=None, topology=None, conflicts=[])
    sources = []
    if describe is not None:
        if not isinstance(describe, dict):
            raise ValueError("the describe JSON must be an object (gcloud ... --format=json)")
        sources.append("describe_json")
        match = _NODE_NAME.match(str(describe.get("name", "")))
        if match:
            identity.update(project=match[1], zone=match[2], name=match[3])
        elif describe.get("name"):
            identity["name"] = str(describe["name"]).rsplit("/", 1)[-1]
        identity["accelerator_type"] = describe.get("acceleratorType")
        identity["runtime_version"] = describe.get("runtimeVersion")
        identity["state"] = describe.get("state")
        identity["topology"] = (describe.get("acceleratorConfig") or {}).get("topology")
    for key in TPU_FIELDS:
        value = given.get(key) or None
        if value is None:
            continue
        if identity[key] is not None and identity[key] != value:
            identity["conflicts"].append(
                f"{key}: describe JSON says {identity[key]!r}, argument says {value!r}"
            )
            continue
        identity[key] = value
        if "arguments" not in sources:
            sources.append("arguments")
    identity["source"] = "+".join(sources) or "none"
    return identity


# --- the job log ---------------------------------------------------------------------------------


def parse_backend_events(text: str, limit: int = MAX_EVENTS) -> dict:
    """Lines of a job log about TPU/libtpu initialization, platform selection, compiling,
    errors and warnings: [{line (1-based), kinds, text}] and a count per kind."""
    counts = {kind: 0 for kind, _ in EVENT_PATTERNS}
    events = []
    matched = 0
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        kinds = [kind for kind, pattern in EVENT_PATTERNS if pattern.search(line)]
        if not kinds:
            continue
        matched += 1
        for kind in kinds:
            counts[kind] += 1
        if len(events) < limit:
            events.append({"line": number, "kinds": kinds, "text": line.strip()[:400]})
    return {"lines": len(lines), "counts": counts, "events": events, "truncated": matched > limit}


# --- what came back ------------------------------------------------------------------------------


def checkpoint_records(run_dir: pathlib.Path) -> dict:
    """sha256 of every file under ``run_dir`` (but the manifest itself), and every
    committed checkpoint step verified against its core.state.checkpoint manifest."""
    from core.state import checkpoint

    run_dir = pathlib.Path(run_dir)
    files = []
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        relative = path.relative_to(run_dir).as_posix()
        if relative == MANIFEST_FILE or relative.startswith(MANIFEST_FILE + ".tmp"):
            continue
        files.append(
            {"path": relative, "bytes": path.stat().st_size, "sha256": checkpoint.sha256_file(path)}
        )
    steps, partial = [], []
    # a committed step is a numbered directory holding a checkpoint manifest
    # (or any directory named like the capstone's, so a step missing its manifest is seen)
    step_parents = {p.parent for p in run_dir.rglob(checkpoint.MANIFEST)}
    checkpoint_dirs = {d.parent for d in step_parents if d.name.isdigit()}
    checkpoint_dirs |= {d for d in run_dir.rglob(CHECKPOINTS_DIR) if d.is_dir()}
    checkpoint_dirs = sorted(checkpoint_dirs)
    for directory in checkpoint_dirs:
        partial += [
            f"{directory.relative_to(run_dir).as_posix()}/{name}"
            for name in checkpoint.partial_saves(directory)
        ]
        for step, step_dir in sorted(checkpoint.step_dirs(directory).items()):
            problems = checkpoint.manifest_problems(step, step_dir, None)
            steps.append(
                {
                    "directory": directory.relative_to(run_dir).as_posix(),
                    "step": step,
                    "verified": not problems,
                    "problems": problems,
                }
            )
    return {
        "files": files,
        "file_count": len(files),
        "total_bytes": sum(f["bytes"] for f in files),
        "steps": steps,
        "partial_saves": partial,
    }


def result_records(run_dir: pathlib.Path) -> list[dict]:
    """The result files of tpu_scripts/byte_transformer_tpu.py found in ``run_dir``."""
    records = []
    for name, tpu in RESULT_FILES.items():
        path = pathlib.Path(run_dir) / name
        if not path.is_file():
            continue
        document = core_documents.parse_json(path.read_text(encoding="utf-8"), str(path))
        claimed = bool(document.get("is_tpu_result")) if isinstance(document, dict) else False
        records.append(
            {
                "path": name,
                "kind": document.get("kind") if isinstance(document, dict) else None,
                "is_tpu_result": claimed,
                "file_says_tpu": tpu,
            }
        )
    return records


def teardown_record(text: str | None, tpu_run: bool, tpu_name: str | None = None) -> dict:
    """Whether the TPU VM is gone: the output of a describe after delete must show
    NOT_FOUND. Not applicable when the run was not on a TPU."""
    if not tpu_run:
        return {
            "deleted": False,
            "applicable": False,
            "proof": "not applicable (CPU)",
            "names_tpu": None,
        }
    if text is None:
        return {
            "deleted": False,
            "applicable": True,
            "proof": "missing: after `python -m tpu_scripts launch delete`, run `gcloud compute "
            "tpus tpu-vm describe NAME --zone=ZONE` and pass its output as teardown_log= "
            "(it must show NOT_FOUND)",
            "names_tpu": None,
        }
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    gone = [line for line in lines if NOT_FOUND.search(line)]
    still = [line for line in lines if STILL_THERE.search(line)]
    names = bool(tpu_name) and any(tpu_name in line for line in gone)
    if gone and not still:
        return {
            "deleted": True,
            "applicable": True,
            "proof": "\n".join(gone[:5]),
            "names_tpu": names,
        }
    return {
        "deleted": False,
        "applicable": True,
        "proof": "\n".join(still[:5])
        if still
        else "no NOT_FOUND in the teardown log: the VM may still exist (and bill)",
        "names_tpu": names,
    }


# --- the manifest ------------------------------------------------------------------------------


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def build_manifest(
    run_dir: str | pathlib.Path,
    runtime: dict | None = None,
    runtime_source: str = "given",
    log_text: str | None = None,
    log_name: str | None = None,
    describe: dict | None = None,
    teardown_text: str | None = None,
    claim_tpu: bool = False,
    **tpu_arguments: str,
) -> dict:
    """The manifest of ``run_dir`` (see the module docstring). ``runtime`` None: the
    recorded DIR/runtime.json if present, else this process's. ClaimRefused when the run is
    claimed to be a TPU run (``claim_tpu`` or a TPU result file) but is not one."""
    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir} is not a directory")
    if runtime is None:
        recorded = run_dir / RUNTIME_FILE
        if recorded.is_file():
            runtime = documents.load(recorded, documents.Runtime)
            runtime_source = f"recorded: {RUNTIME_FILE}"
        else:
            runtime = capture_runtime()
            runtime_source = "live: this process"
    runtime = validate_runtime(runtime)
    tpu_run = is_tpu_run(runtime)
    results = result_records(run_dir)
    claimed_by = [r["path"] for r in results if r["is_tpu_result"] or r["file_says_tpu"]]
    if (claim_tpu or claimed_by) and not tpu_run:
        platforms = sorted({d["platform"] for d in runtime["devices"]}) or ["none"]
        why = "claim_tpu=true" if claim_tpu else f"{', '.join(claimed_by)} says TPU"
        raise ClaimRefused(
            f"refused: {run_dir} is claimed to be a TPU run ({why}) but its runtime "
            f"({runtime_source}) has backend {runtime['backend']!r} and devices "
            f"{', '.join(platforms)}; a TPU run needs backend 'tpu' and TPU devices. "
            "Nothing was written."
        )
    identity = tpu_identity(describe, **tpu_arguments)
    events = parse_backend_events(log_text) if log_text is not None else None
    if events is not None:
        import hashlib

        events = {
            "log": log_name,
            "log_sha256": hashlib.sha256(log_text.encode()).hexdigest(),
            **events,
        }
    manifest = {
        "schema": SCHEMA,
        "created_utc": _now(),
        "run_dir": str(run_dir.resolve()),
        "tpu": identity,
        "runtime_source": runtime_source,
        "environment": runtime.get("environment") or {},
        "devices": runtime["devices"],
        "backend": runtime["backend"],
        "backend_events": events,
        "results": results,
        "checkpoints": checkpoint_records(run_dir),
        "teardown": teardown_record(teardown_text, tpu_run, identity["name"]),
        "is_tpu_run": tpu_run,
    }
    manifest["verdict"] = verdict(manifest)
    return manifest


def verdict(manifest: dict) -> str:
    devices = manifest["devices"]
    steps = manifest["checkpoints"]["steps"]
    good = sum(1 for s in steps if s["verified"])
    checkpoints = f"checkpoints {good}/{len(steps)} verified"
    kinds = sorted({d["device_kind"] for d in devices}) or ["no devices"]
    if not manifest["is_tpu_run"]:
        return (
            f"not a TPU run: backend {manifest['backend']!r}, {len(devices)} x "
            f"{', '.join(kinds)}; its numbers describe this {manifest['backend'].upper()} "
            f"host, never a TPU; {checkpoints}"
        )
    tpu = manifest["tpu"]
    where = (
        f"{tpu['accelerator_type'] or 'accelerator type unknown'} "
        f"{tpu['name'] or '(name unknown)'} in {tpu['zone'] or 'zone unknown'}"
    )
    teardown = manifest["teardown"]
    torn = "teardown verified (NOT_FOUND)" if teardown["deleted"] else "teardown NOT verified"
    conflicts = f"; identity conflicts: {len(tpu['conflicts'])}" if tpu["conflicts"] else ""
    return (
        f"TPU run: backend 'tpu' on {len(devices)} x {', '.join(kinds)} ({where}); "
        f"{checkpoints}; {torn}{conflicts}"
    )


def write_manifest(manifest: dict, out: str | pathlib.Path) -> pathlib.Path:
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return documents.write(out, documents.RunManifest, manifest)


def summary_lines(manifest: dict) -> list[str]:
    tpu = manifest["tpu"]
    proof = manifest["teardown"]["proof"]
    events = manifest["backend_events"]
    checkpoints = manifest["checkpoints"]
    lines = [
        f"verdict: {manifest['verdict']}",
        f"is_tpu_run: {manifest['is_tpu_run']}   backend: {manifest['backend']}   "
        f"runtime: {manifest['runtime_source']}",
        "devices: "
        + (
            ", ".join(
                f"{d['device_kind']}#{d['id']}" + (f"@{d['coords']}" if d["coords"] else "")
                for d in manifest["devices"][:8]
            )
            + (" ..." if len(manifest["devices"]) > 8 else "")
        ),
        f"tpu: {', '.join(f'{k}={tpu[k]}' for k in TPU_FIELDS)} (source {tpu['source']})",
        "versions: "
        + ", ".join(
            f"{k} {v}" for k, v in manifest["environment"].get("packages", {}).items() if v
        ),
        "log events: "
        + (
            "no log given"
            if events is None
            else ", ".join(f"{k} {n}" for k, n in events["counts"].items())
            + f" (of {events['lines']} lines)"
        ),
        f"files: {checkpoints['file_count']} ({checkpoints['total_bytes']:,} bytes, sha256 each); "
        f"checkpoint steps: "
        + (
            ", ".join(
                f"{s['directory']}/{s['step']} {'ok' if s['verified'] else 'BAD'}"
                for s in checkpoints["steps"]
            )
            or "none"
        ),
        f"teardown: deleted={manifest['teardown']['deleted']} "
        f"({proof.splitlines()[0] if proof else ''})",
    ]
    return lines


def _read_text(name: str, path: str) -> str | None:
    if not path:
        return None
    try:
        return pathlib.Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise args.UsageError(f"{name}={path}: cannot read it ({exc.strerror})") from None


def run_manifest_command(parsed: args.Parsed) -> int:
    from capstones.byte_transformer import rundir

    run_dir = rundir.require_run_or_job(parsed["run_dir"])  # a run, or refused: nothing made
    describe_text = _read_text("describe_json", parsed["describe_json"])
    describe = None
    if describe_text is not None:
        try:
            describe = core_documents.parse_json(describe_text, "describe_json")
        except ValueError as exc:
            raise args.UsageError(str(exc)) from None
    log_text = _read_text("log", parsed["log"])
    try:
        manifest = build_manifest(
            run_dir,
            log_text=log_text,
            log_name=parsed["log"] or None,
            describe=describe,
            teardown_text=_read_text("teardown_log", parsed["teardown_log"]),
            claim_tpu=parsed["claim_tpu"],
            **{
                key: parsed[key]
                for key in ("zone", "project", "accelerator_type", "runtime_version")
            },
            name=parsed["tpu_name"],
        )
    except ClaimRefused as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except ValueError as exc:
        raise args.UsageError(str(exc)) from None
    out = write_manifest(manifest, parsed["out"] or run_dir / MANIFEST_FILE)
    for line in summary_lines(manifest):
        print(line)
    print(f"manifest saved to {out}")
    return 0


COMMANDS = {
    "run-manifest": args.Command(
        "The manifest of a run directory: TPU identity (gcloud describe JSON), environment "
        "and package versions, devices and backend (recorded by the job in DIR/runtime.json, "
        "else this process), backend events parsed from the job log, sha256 of every file and "
        "checkpoint verification, teardown proof (describe after delete shows NOT_FOUND), "
        "and whether it is a TPU run. A TPU claim on a non-TPU runtime is refused (exit 1).",
        {
            "run_dir": args.Option(str, args.REQUIRED, "the run directory (fetched back)"),
            "log": args.Option(str, "", "the job's log (stdout+stderr) to parse for events"),
            "describe_json": args.Option(
                str, "", "gcloud compute tpus tpu-vm describe NAME --format=json output"
            ),
            "teardown_log": args.Option(
                str, "", "output of a describe after delete (must show NOT_FOUND)"
            ),
            "claim_tpu": args.Option(bool, False, "refuse unless this is a TPU run"),
            "tpu_name": args.Option(str, "", "TPU VM name (if no describe JSON)"),
            "zone": args.Option(str, "", "zone (if no describe JSON)"),
            "project": args.Option(str, "", "project (if no describe JSON)"),
            "accelerator_type": args.Option(str, "", "e.g. v5litepod-4 (if no describe JSON)"),
            "runtime_version": args.Option(str, "", "TPU software version (if no describe JSON)"),
            "out": args.Option(str, "", "where to write (default DIR/run_manifest.json)"),
        },
        run_manifest_command,
        config_overrides=False,
    ),
}
