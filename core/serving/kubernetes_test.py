import copy

import pytest
import yaml

from core.serving import container
from core.serving import kubernetes as k

CASES = [
    ("v5e", "1x1", 1),
    ("v5e", "2x2", 4),
    ("v5e", "2x4", 8),
    ("v5p", "2x2x1", 4),
    ("v6e", "2x2", 4),
    ("v6e", "2x4", 8),
    ("tpu7x", "2x2x1", 4),
]


@pytest.mark.parametrize("generation,topology,count", CASES)
def test_every_generation_validates_and_asks_its_chips(generation, topology, count):
    manifests = k.gke_manifests("r.example/p:1", generation, topology, hpa=k.Hpa())
    assert k.validate(manifests) == []
    deployment, service, hpa = manifests
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": k.GKE_ACCELERATORS[generation],
        "cloud.google.com/gke-tpu-topology": topology,
    }
    c = pod["containers"][0]
    assert c["resources"]["requests"]["google.com/tpu"] == str(count)
    assert c["resources"]["limits"]["google.com/tpu"] == str(count)
    assert c["command"] == container.read().command_line  # the image's own command line
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert hpa["apiVersion"] == "autoscaling/v2"


def test_hpa_follows_the_policy():
    for metric, (name, _) in k.METRICS.items():
        policy = k.Hpa(metric=metric, target=250 if metric == "p95_ms" else 4, max_replicas=12)
        hpa = k.gke_manifests("r/p:1", "v6e", "2x2", hpa=policy)[2]
        assert hpa["spec"]["maxReplicas"] == 12
        (m,) = hpa["spec"]["metrics"]
        assert m["type"] == "Pods" and m["pods"]["metric"]["name"] == name
        assert m["pods"]["target"]["averageValue"] == str(policy.target)
    assert len(k.gke_manifests("r/p:1", "v6e", "2x2")) == 2  # no hpa: no autoscaler


def _mutate(manifests, index, path, value=None, rename=None):
    bad = copy.deepcopy(manifests)
    node = bad[index]
    for key in path[:-1]:
        node = node[key]
    if rename:
        node[rename] = node.pop(path[-1])
    else:
        node[path[-1]] = value
    return bad


CONTAINER = ["spec", "template", "spec", "containers", 0]


@pytest.mark.parametrize(
    "index,path,value,rename,expect",
    [
        (0, [*CONTAINER, "readinessProbe"], None, "readinesProbe", "readinesProbe"),  # typo
        (0, ["spec", "replicas"], "2", None, "not of type"),  # a string for an integer
        (0, [*CONTAINER, "ports", 0, "containerPort"], "http", None, "containerPort"),
        (2, ["spec", "minReplicas"], 1.5, None, "minReplicas"),
        (1, ["spec", "ports"], {"port": 80}, None, "ports"),
        (0, ["kind"], "Deploymnet", None, "no schema"),
    ],
)
def test_the_schema_refuses_planted_mistakes(index, path, value, rename, expect):
    manifests = k.gke_manifests("r/p:1", "v5e", "2x2", hpa=k.Hpa())
    problems = k.validate(_mutate(manifests, index, path, value, rename))
    assert problems and expect in " ".join(problems), problems


def test_the_tpu_rules_refuse_what_the_schema_allows():
    m = k.gke_manifests("r/p:1", "v5e", "2x2", hpa=k.Hpa())
    limits = [*CONTAINER, "resources", "limits", "google.com/tpu"]
    for bad, expect in [
        (_mutate(m, 0, limits, "8"), "requested and limited equally"),
        (
            _mutate(
                m,
                0,
                [
                    "spec",
                    "template",
                    "spec",
                    "nodeSelector",
                    "cloud.google.com/gke-tpu-accelerator",
                ],
                "tpu-v5e",
            ),
            "not a GKE TPU",
        ),
        (_mutate(m, 0, [*CONTAINER, "livenessProbe", "httpGet", "path"], "/readyz"), "probes"),
        (_mutate(m, 2, ["spec", "scaleTargetRef", "name"], "other"), "not generated"),
    ]:
        assert k.schema_problems(bad[0]) == [] and expect in " ".join(k.validate(bad))


@pytest.mark.parametrize(
    "kwargs,expect",
    [
        ({"generation": "v4"}, "unknown TPU generation"),
        ({"generation": "v5p", "topology": "2x2x2"}, "not a single-host"),
        ({"generation": "v5e", "topology": "4x4"}, "not a single-host"),
        ({"replicas": 0}, "replicas"),
        ({"name": "Predict_1"}, "DNS labels"),
        ({"image": "has space"}, "registry reference"),
    ],
)
def test_bad_requests_are_refused(kwargs, expect):
    with pytest.raises(ValueError, match=expect):
        k.gke_manifests(**{"image": "r/p:1", **kwargs})
    with pytest.raises(ValueError, match="min_replicas"):
        k.Hpa(min_replicas=5, max_replicas=2)
    with pytest.raises(ValueError, match="metric"):
        k.Hpa(metric="cpu")


def test_yaml_round_trips_without_anchors():
    m = k.gke_manifests("r/p:1", "v6e", "2x4", hpa=k.Hpa())
    text = k.to_yaml(m)
    assert "&id" not in text and list(yaml.safe_load_all(text)) == m
