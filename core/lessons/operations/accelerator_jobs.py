"""Lesson "Accelerator jobs and runtime lifecycle": the runner's states beside what Google Cloud
reports for each provisioning path, and the same job as a GKE JobSet for a TPU slice.

Sources (read 2026-12 through the course's search of stored docs; nothing here calls Google):
- Cloud TPU API Node.State (what `gcloud compute tpus tpu-vm describe` prints as ``state``):
  cloud.google.com/python/docs/reference/tpu/latest/google.cloud.tpu_v2.types.Node.State
- QueuedResourceState.State (`gcloud compute tpus queued-resources describe`, ``state.state``):
  cloud.google.com/python/docs/reference/tpu/latest/google.cloud.tpu_v2.types.QueuedResourceState.State
- "Manage queued resources" (docs.cloud.google.com/tpu/docs/queued-resources): the Cloud TPU API
  is not supported on TPU7x and later; use Compute Engine or GKE (core.tpu.cloud_tpu.PROVISIONING).
- Kubernetes Pod phases and Job conditions (kubernetes.io/docs/concepts/workloads/pods/
  pod-lifecycle, .../controllers/job); JobSet (jobset.sigs.k8s.io, API jobset.x-k8s.io/v1alpha2).
"""

from __future__ import annotations

import copy

from core import runtime
from core.serving import kubernetes
from core.tpu import cloud_tpu, generations
from core.workload import job, runner

NODE_STATE_SOURCE = (
    "cloud.google.com/python/docs/reference/tpu/latest/google.cloud.tpu_v2.types.Node.State"
)
QUEUED_STATE_SOURCE = (
    "cloud.google.com/python/docs/reference/tpu/latest/"
    "google.cloud.tpu_v2.types.QueuedResourceState.State"
)
# `gcloud compute tpus tpu-vm describe` state (Cloud TPU API v2 Node.State).
TPU_VM_STATES = (
    "STATE_UNSPECIFIED", "CREATING", "READY", "RESTARTING", "REIMAGING", "DELETING",
    "REPAIRING", "STOPPED", "STOPPING", "STARTING", "PREEMPTED", "TERMINATED", "HIDING",
    "HIDDEN", "UNHIDING", "UNKNOWN",
)  # fmt: skip
# `gcloud compute tpus queued-resources describe` state.state (QueuedResourceState.State).
QUEUED_RESOURCE_STATES = (
    "STATE_UNSPECIFIED", "CREATING", "ACCEPTED", "PROVISIONING", "FAILED", "DELETING",
    "ACTIVE", "SUSPENDING", "SUSPENDED", "WAITING_FOR_RESOURCES",
)  # fmt: skip
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
GCE_STATUSES = (
    "PROVISIONING", "STAGING", "RUNNING", "STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED",
    "REPAIRING", "TERMINATED",
)  # fmt: skip

PATHS = {
    "tpu-vm": "Cloud TPU API: gcloud compute tpus tpu-vm create / describe (v5e, v5p, v6e)",
    "queued": "Cloud TPU API: gcloud compute tpus queued-resources create / describe",
    "gke": "GKE: a TPU node pool, the job as a JobSet (v5e ... TPU7x)",
    "gce": "Compute Engine: TPU machine types, gcloud compute instances describe (TPU7x)",
}

# runner state -> what each path reports at that moment. A state of the job is not a state
# of the machine: after the job ends the VM stays READY (and billed) until deleted.
STATE_MAP: dict[str, dict[str, str]] = {
    "queued": {
        "tpu-vm": "(no node yet: the create request is being accepted)",
        "queued": "CREATING -> ACCEPTED -> WAITING_FOR_RESOURCES",
        "gke": "Pod Pending (Unschedulable until the TPU node pool scales up)",
        "gce": "(no instance yet)",
    },
    "provisioning": {
        "tpu-vm": "CREATING",
        "queued": "PROVISIONING",
        "gke": "Pod Pending (node ready; pulling the image, ContainerCreating)",
        "gce": "PROVISIONING -> STAGING",
    },
    "running": {
        "tpu-vm": "READY",
        "queued": "ACTIVE",
        "gke": "Pod Running; JobSet active",
        "gce": "RUNNING",
    },
    "succeeded": {
        "tpu-vm": "READY (the job ended; delete the VM or it keeps billing)",
        "queued": "ACTIVE (delete the queued resource to release the slice)",
        "gke": "Pod Succeeded; Job Complete; JobSet Completed (node pool can scale down)",
        "gce": "RUNNING (the job ended; stop or delete the instance)",
    },
    "failed": {
        "tpu-vm": "READY (a job failure; the machine is fine) or REPAIRING / UNKNOWN (the host)",
        "queued": "ACTIVE (job failure) or FAILED (the request itself could not be honoured)",
        "gke": "Pod Failed (exit code); the JobSet restarts it up to maxRestarts, then Failed",
        "gce": "RUNNING (job failure) or REPAIRING (host failure)",
    },
    "preempted": {
        "tpu-vm": "PREEMPTED (spot or preemptible; then TERMINATED)",
        "queued": "SUSPENDING -> SUSPENDED (the slice was taken back)",
        "gke": "Pod Failed with condition DisruptionTarget; the JobSet recreates it",
        "gce": "STOPPED or TERMINATED (the spot VM's instance termination action)",
    },
}


def state_rows() -> list[dict]:
    """One row per runner state: the path's reported state beside it."""
    return [{"runner state": s, **{p: STATE_MAP[s][p] for p in PATHS}} for s in runner.STATES]


def path_rows() -> list[dict]:
    """Which path each generation is provisioned through (course fact: core.tpu.cloud_tpu)."""
    return [
        {
            "generation": g,
            "Cloud TPU API (tpu-vm, queued)": "yes" if way.tpu_vm_api else "no",
            "provisioned with": way.how,
            "source": way.source,
        }
        for g, way in cloud_tpu.PROVISIONING.items()
    ]


def map_problems() -> list[str]:
    """Every state named in STATE_MAP is in the documented enums (the recorded grammar)."""
    known = {
        "tpu-vm": set(TPU_VM_STATES),
        "queued": set(QUEUED_RESOURCE_STATES),
        "gce": set(GCE_STATUSES),
        "gke": set(POD_PHASES),
    }
    problems = []
    for state, row in STATE_MAP.items():
        for path, text in row.items():
            words = {w.strip("(),;:.") for w in text.replace("->", " ").split()}
            if path == "gke":
                named = {w for w in words if w in ("Pending", "Running", "Succeeded", "Failed")}
            else:
                named = {w for w in words if w.isupper() and len(w) > 3 and w.isalpha()}
                named |= {w for w in words if "_" in w and w.isupper()}
            if not named and not text.startswith("(no "):
                problems.append(f"{state}/{path}: names no documented state")
            problems += [f"{state}/{path}: {w} is not a {path} state" for w in named - known[path]]
    return problems


# -- the job as a GKE JobSet --

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
# GKE multi-host TPU slices use 4-chip nodes (ct5lp-hightpu-4t, ct5p-hightpu-4t, ct6e-standard-4t,
# TPU7x: 4 chips per VM): "Plan TPUs in GKE" (cloud.google.com/kubernetes-engine/docs/concepts/
# plan-tpus), read 2026-12. One pod per node, so the Job runs one completion per host.
GKE_CHIPS_PER_NODE = 4
JOB_TOPOLOGIES = {  # multi-host slices the lesson offers (chips = product of the dims)
    "v5e": ("2x4", "4x4", "4x8"),
    "v5p": ("2x2x2", "2x2x4"),
    "v6e": ("2x4", "4x4", "4x8"),
    "tpu7x": ("2x2x2", "2x2x4"),
}
MAX_RESTARTS = 3  # preemptions the JobSet absorbs before it gives up (each resumes from a save)


def slice_hosts(generation: str, topology: str) -> tuple[int, int]:
    """(chips, hosts) of a multi-host GKE slice."""
    if generation not in JOB_TOPOLOGIES:
        raise ValueError(f"generation must be one of {sorted(JOB_TOPOLOGIES)}, got {generation!r}")
    if topology not in JOB_TOPOLOGIES[generation]:
        raise ValueError(
            f"{generation} topology {topology!r}: choose one of {JOB_TOPOLOGIES[generation]}"
        )
    chips = generations.topology_chips(f"{generation}:{topology}")
    return chips, chips // GKE_CHIPS_PER_NODE


def jobset_manifest(
    name: str,
    image: str,
    generation: str,
    topology: str,
    steps: int,
    bucket_dir: str = "gs://BUCKET/runs",
    max_restarts: int = MAX_RESTARTS,
) -> dict:
    """The training job as a JobSet: one indexed Job, one pod per TPU host of the slice.

    The pod failure policy reads the job's exit codes (core.workload.job): a preemption
    (DisruptionTarget, or EXIT_PREEMPTED) does not count against the restart budget; a
    non-finite loss or a refused config fails the JobSet at once (a retry would repeat it).
    """
    if not kubernetes.NAME.fullmatch(name):
        raise ValueError(f"name {name!r} must be a DNS label")
    chips, hosts = slice_hosts(generation, topology)
    argv = job.command(f"{bucket_dir}/{name}", name, steps, python="python")
    container = {
        "name": "train",
        "image": image,
        "command": argv,
        "resources": {
            "requests": {"google.com/tpu": str(GKE_CHIPS_PER_NODE)},
            "limits": {"google.com/tpu": str(GKE_CHIPS_PER_NODE)},
        },
        "ports": [{"containerPort": 8471}, {"containerPort": 8431}],  # TPU runtime ports
    }
    pod = {
        "spec": {
            "restartPolicy": "Never",  # the pod failure policy needs it; JobSet restarts
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": kubernetes.GKE_ACCELERATORS[generation],
                "cloud.google.com/gke-tpu-topology": topology,
            },
            "terminationGracePeriodSeconds": 60,  # SIGTERM -> finish the step, save, exit
            "containers": [container],
        }
    }
    job_spec = {
        "parallelism": hosts,
        "completions": hosts,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": "train",
                        "operator": "In",
                        "values": [job.EXIT_BAD_INPUT, job.EXIT_NONFINITE_LOSS],
                    },
                },
            ]
        },
        "template": pod,
    }
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "annotations": {
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
            },
        },
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts},
            "replicatedJobs": [{"name": "slice", "replicas": 1, "template": {"spec": job_spec}}],
        },
    }


def embedded_job(jobset: dict) -> dict:
    """The JobSet's Job template as a batch/v1 Job (what kubernetes-validate has a schema for)."""
    replicated = jobset["spec"]["replicatedJobs"][0]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{jobset['metadata']['name']}-{replicated['name']}-0"},
        **copy.deepcopy(replicated["template"]),
    }


def validate_jobset(jobset: dict) -> list[str]:
    """kubernetes-validate's verdict on the embedded Job (JobSet is a CRD: it ships no JobSet
    schema), then the TPU rules the schema cannot know."""
    problems = kubernetes.schema_problems(embedded_job(jobset))
    spec = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod = spec["template"]["spec"]
    selector = pod.get("nodeSelector", {})
    accelerator = selector.get("cloud.google.com/gke-tpu-accelerator")
    if accelerator not in kubernetes.GKE_ACCELERATORS.values():
        problems.append(f"gke-tpu-accelerator {accelerator!r} is not a GKE TPU name")
    generation = {v: k for k, v in kubernetes.GKE_ACCELERATORS.items()}.get(accelerator)
    topology = selector.get("cloud.google.com/gke-tpu-topology")
    if generation and topology:
        chips = generations.topology_chips(f"{generation}:{topology}")
        if spec.get("completions") != chips // GKE_CHIPS_PER_NODE:
            problems.append(
                f"completions {spec.get('completions')} != hosts of {topology} "
                f"({chips} chips / {GKE_CHIPS_PER_NODE})"
            )
    for c in pod["containers"]:
        r = c.get("resources", {})
        asked = r.get("requests", {}).get("google.com/tpu")
        if asked is None or asked != r.get("limits", {}).get("google.com/tpu"):
            problems.append("google.com/tpu must be requested and limited equally")
    if jobset.get("apiVersion") != JOBSET_API or jobset.get("kind") != "JobSet":
        problems.append(f"not a {JOBSET_API} JobSet")
    return problems


# -- the real job, run by the runner --

JOB_TIMEOUT_S = 120.0  # a tiny job takes a few seconds; the runner kills it past this


def run_job(
    run_dir, steps: int, step_seconds: float, preempt_after: int, save_every: int = 2
) -> runner.JobRunner:
    """Run core.workload.job under the runner; send SIGTERM once step ``preempt_after`` is
    logged (0: never). Returns the finished runner (transitions, events)."""

    argv = job.command(
        run_dir, "lesson-job", steps, "--save-every", str(save_every),
        "--step-seconds", str(step_seconds), "--heartbeat-s", "0.5",
    )  # fmt: skip
    env = runtime.child_env(PYTHONUNBUFFERED="1")  # on the CPU while this holds a TPU
    r = runner.JobRunner(
        argv, job.events_path(run_dir), timeout_s=JOB_TIMEOUT_S, env=env,
        log_path=f"{run_dir}/runner.jsonl",
    )  # fmt: skip
    try:
        r.start()
        sent = False
        while not r.done:
            r.poll()
            if (
                preempt_after
                and not sent
                and any(e["event"] == "step" and e["step"] >= preempt_after for e in r.events)
            ):
                r.preempt()
                sent = True
            if not r.done:
                import time

                time.sleep(runner.POLL_S)
    finally:
        r.close()
    return r


def transition_rows(r: runner.JobRunner) -> list[dict]:
    t0 = r.transitions[0].ts
    return [
        {
            "state": t.state,
            "at (s)": round(t.ts - t0, 3),
            "cause": t.cause,
            "exit status": t.exit_status,
            "signal": t.signal,
        }
        for t in r.transitions
    ]
