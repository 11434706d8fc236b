"""GKE manifests for the predict service on TPU nodes, and their validation.

    manifests = gke_manifests("REGISTRY/jax-tpu-lab-predict:TAG", "v5e", "2x2", replicas=2,
                              hpa=Hpa(metric="queue_depth", target=4, max_replicas=8))
    problems = validate(manifests)  # [] or ["Deployment/predict: ...", ...]

A Deployment (one pod per TPU host: the node selectors ``cloud.google.com/gke-tpu-accelerator``
and ``cloud.google.com/gke-tpu-topology``, ``google.com/tpu`` requested = limited = the chips
of that host, probes on /readyz and /healthz, the image's own command line from
deploy/Dockerfile), a Service, and optionally a HorizontalPodAutoscaler (autoscaling/v2) on a
per-pod custom metric (queue depth or p95 latency, as lesson 7's replayed policies). validate()
checks each against the Kubernetes OpenAPI schemas that ``kubernetes-validate`` ships (offline,
strict: an unknown field is an error) and adds the rules the schemas cannot say.

A Deployment replica is one pod on one host, so only single-host topologies are offered; a
multi-host slice needs a JobSet or LeaderWorkerSet (not generated here). The image built from
deploy/Dockerfile is the CPU image (its lock has no libtpu): a TPU node needs an image whose
lock adds ``jax[tpu]`` (libtpu), which this module takes as ``image`` and does not build.
"""

from __future__ import annotations

import dataclasses
import json
import re

from core.serving import container
from core.tpu import generations, specs

KUBERNETES_VERSION = "1.33.0"  # schemas kubernetes-validate ships; GKE's regular channel era
# GKE's accelerator names (the node label cloud.google.com/gke-tpu-accelerator), from the GKE
# docs "Plan TPUs in GKE" (cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus) and, for
# TPU7x, "TPU7x (Ironwood) in GKE" (.../docs/concepts/tpu-ironwood), as read 2026-12; not
# re-verified from this machine (no access to Google Cloud here).
GKE_ACCELERATORS = {
    "v5e": "tpu-v5-lite-podslice",
    "v5p": "tpu-v5p-slice",
    "v6e": "tpu-v6e-slice",
    "tpu7x": "tpu7x",
}
# Single-host topologies per generation (one node = one pod), from the same pages' tables.
SINGLE_HOST_TOPOLOGIES = {
    "v5e": ("1x1", "2x2", "2x4"),
    "v5p": ("2x2x1",),
    "v6e": ("1x1", "2x2", "2x4"),
    "tpu7x": ("2x2x1",),
}
METRICS = {
    # metric -> (the custom metric's name as the service's exporter would publish it, unit)
    "queue_depth": ("predict_queue_depth", "requests waiting per pod"),
    "p95_ms": ("predict_latency_p95_ms", "p95 latency per pod in ms"),
}
NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclasses.dataclass(frozen=True)
class Hpa:
    """The autoscaling policy: keep ``metric``'s per-pod average at ``target``."""

    metric: str = "queue_depth"
    target: float = 4.0
    min_replicas: int = 1
    max_replicas: int = 8
    scale_down_window_s: int = 300  # replicas drop only after 5 min of low load (flapping)

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"hpa metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        if not self.target > 0:
            raise ValueError(f"hpa target must be > 0, got {self.target}")
        if not 1 <= self.min_replicas <= self.max_replicas <= 1000:
            raise ValueError(
                f"need 1 <= min_replicas ({self.min_replicas}) <= max_replicas "
                f"({self.max_replicas}) <= 1000"
            )
        if not 0 <= self.scale_down_window_s <= 3600:
            raise ValueError(
                f"scale_down_window_s must be in [0, 3600], got {self.scale_down_window_s}"
            )


def chips(generation: str, topology: str) -> int:
    """TPU chips of one node for ``generation`` at a single-host ``topology``."""
    if generation not in GKE_ACCELERATORS:
        raise ValueError(
            f"unknown TPU generation {generation!r}: choose one of {sorted(GKE_ACCELERATORS)}"
        )
    if topology not in SINGLE_HOST_TOPOLOGIES[generation]:
        raise ValueError(
            f"{generation} topology {topology!r} is not a single-host slice (a Deployment pod "
            f"runs on one host; a multi-host slice needs a JobSet or LeaderWorkerSet); choose "
            f"one of {SINGLE_HOST_TOPOLOGIES[generation]}"
        )
    count = generations.topology_chips(f"{generation}:{topology}")
    if count > specs.chip(generation).chips_per_host:
        raise ValueError(f"{generation}:{topology} has {count} chips, more than one host holds")
    return count


def _quantity(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.3f}".rstrip("0")


def gke_manifests(
    image: str,
    generation: str = "v5e",
    topology: str = "2x2",
    replicas: int = 1,
    hpa: Hpa | None = None,
    name: str = "predict",
    namespace: str = "default",
    cpu: str = "4",
    memory: str = "8Gi",
) -> list[dict]:
    """[Deployment, Service] (+ HorizontalPodAutoscaler with ``hpa``) as plain dicts."""
    if not NAME.fullmatch(name) or not NAME.fullmatch(namespace):
        raise ValueError(f"name {name!r} and namespace {namespace!r} must be DNS labels")
    if not image or any(c.isspace() for c in image):
        raise ValueError(f"image must be a registry reference, got {image!r}")
    if not 1 <= replicas <= 1000:
        raise ValueError(f"replicas must be in [1, 1000], got {replicas}")
    count = chips(generation, topology)
    image_file = container.read()
    port = int(image_file.env["PREDICT_PORT"])
    user = int(image_file.user.split(":")[0])
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "jax-tpu-lab"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    env = [{"name": k, "value": v} for k, v in image_file.env.items()]
    probe = {"port": "http"}
    pod = {
        "metadata": {"labels": labels},
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": GKE_ACCELERATORS[generation],
                "cloud.google.com/gke-tpu-topology": topology,
            },
            "securityContext": {"runAsNonRoot": True, "runAsUser": user, "runAsGroup": user},
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 30,
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
            "containers": [
                {
                    "name": name,
                    "image": image,
                    "command": image_file.command_line,
                    "env": env,
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
                    "resources": {
                        "requests": {"google.com/tpu": str(count), "cpu": cpu, "memory": memory},
                        "limits": {"google.com/tpu": str(count), "memory": memory},
                    },
                    "readinessProbe": {
                        "httpGet": {"path": "/readyz", **probe},
                        "periodSeconds": 5,
                        "failureThreshold": 3,
                    },
                    "livenessProbe": {
                        "httpGet": {"path": "/healthz", **probe},
                        "periodSeconds": 10,
                        "timeoutSeconds": 3,
                        "failureThreshold": 3,
                    },
                    "startupProbe": {  # the artifact is verified and compiled before ready
                        "httpGet": {"path": "/healthz", **probe},
                        "periodSeconds": 5,
                        "failureThreshold": 24,
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": hpa.min_replicas if hpa else replicas,
            "selector": {"matchLabels": labels},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": pod,
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": labels,
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    out = [deployment, service]
    if hpa is not None:
        metric, _ = METRICS[hpa.metric]
        out.append(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": meta,
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "minReplicas": hpa.min_replicas,
                    "maxReplicas": hpa.max_replicas,
                    "metrics": [
                        {
                            "type": "Pods",
                            "pods": {
                                "metric": {"name": metric},
                                "target": {
                                    "type": "AverageValue",
                                    "averageValue": _quantity(hpa.target),
                                },
                            },
                        }
                    ],
                    "behavior": {
                        "scaleDown": {
                            "stabilizationWindowSeconds": hpa.scale_down_window_s,
                            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                        },
                        "scaleUp": {
                            "stabilizationWindowSeconds": 0,
                            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
                        },
                    },
                },
            }
        )
    return out


def _where(manifest) -> str:
    if not isinstance(manifest, dict):
        return "?"
    return f"{manifest.get('kind', '?')}/{(manifest.get('metadata') or {}).get('name', '?')}"


def schema_problems(manifest, version: str = KUBERNETES_VERSION) -> list[str]:
    """kubernetes-validate's verdict (strict: unknown fields refused) for one manifest."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path) or "(top)"
        return [f"{_where(manifest)}: {path}: {exc.message}"]
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
        return [f"{_where(manifest)}: no schema: {exc}"]
    return []


def rule_problems(manifests: list[dict]) -> list[str]:
    """What the schemas allow but a TPU serving deployment must not do."""
    problems = []
    deployments = {m["metadata"]["name"]: m for m in manifests if m.get("kind") == "Deployment"}
    for name, d in deployments.items():
        spec = d["spec"]["template"]["spec"]
        selector = spec.get("nodeSelector", {})
        accelerator = selector.get("cloud.google.com/gke-tpu-accelerator")
        if accelerator not in GKE_ACCELERATORS.values():
            problems.append(
                f"Deployment/{name}: gke-tpu-accelerator {accelerator!r} is not a GKE TPU name"
            )
        if "cloud.google.com/gke-tpu-topology" not in selector:
            problems.append(f"Deployment/{name}: no cloud.google.com/gke-tpu-topology selector")
        for c in spec["containers"]:
            resources = c.get("resources", {})
            asked = resources.get("requests", {}).get("google.com/tpu")
            if asked is None or asked != resources.get("limits", {}).get("google.com/tpu"):
                problems.append(
                    f"Deployment/{name}: google.com/tpu must be requested and limited equally"
                )
            paths = {
                probe: (c.get(probe) or {}).get("httpGet", {}).get("path")
                for probe in ("readinessProbe", "livenessProbe")
            }
            if paths != {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}:
                problems.append(f"Deployment/{name}: probes ask {paths}, not /readyz and /healthz")
    for m in manifests:
        if m.get("kind") == "HorizontalPodAutoscaler":
            target = m["spec"]["scaleTargetRef"]["name"]
            if target not in deployments:
                problems.append(f"{_where(m)}: scales {target!r}, which is not generated here")
    return problems


def validate(manifests: list[dict], version: str = KUBERNETES_VERSION) -> list[str]:
    """Every problem of ``manifests`` (schemas first, then the TPU rules); [] when valid."""
    problems = [p for m in manifests for p in schema_problems(m, version)]
    return problems or rule_problems(manifests)


def to_yaml(manifests: list[dict]) -> str:
    """One multi-document YAML (what ``kubectl apply -f`` reads)."""
    import yaml

    plain = json.loads(json.dumps(manifests))  # no shared objects: no YAML anchors
    return "---\n".join(yaml.safe_dump(m, sort_keys=False) for m in plain)
