"""Lesson "ModelOps: own, approve, roll back and retire a model": the MLflow model registry
(MLflow 3.17, a SQLite store in a run directory, core.state.tracking's template) driven by a
small governance layer.

- **Own**: the registered model and each version carry an ``owner`` tag.
- **Approve**: ``approval.by`` / ``approval.at`` tags on the version (who and when).
- **Promote**: the ``champion`` alias (what serves) moves only to an approved, unretired
  version whose artifact verifies against its provenance manifest; ``challenger`` (what is
  evaluated beside it) needs no approval. Stages are deprecated since MLflow 2.9: aliases.
- **Roll back**: the champion alias moves back to the version it held before.
- **Retire**: ``retired.by`` / ``retired.at`` tags and the version's aliases deleted; a retired
  version cannot be promoted again.

Every operation is also appended to the registered model as an ``audit.NNNN`` tag (JSON), so
the registry itself holds its history, which a fresh reader can check against what was done.
The log is append-only across sessions: an entry is numbered after the last one in the store
(not in this object's memory), and ``rollback`` reads the champion's history from the store,
so a registry reopened on the same store carries on where the last session stopped. One
writer at a time: MLflow's tags have no compare-and-set, so two sessions writing at the same
moment could take the same number.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib

import numpy as np

from core.data import digits
from core.serving.predict import export
from core.state import tracking
from core.workload import provenance

MODEL = "digits-classifier"
ALIASES = ("champion", "challenger")
AUDIT_PREFIX = "audit."


class PromotionRefused(ValueError):
    """A promotion the governance rules do not allow; nothing in the registry changed."""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


@dataclasses.dataclass(frozen=True)
class Op:
    at: str
    op: str  # create | register | approve | alias | rollback | retire
    version: str | None
    by: str
    detail: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def audit_key(number: int) -> str:
    """The tag of audit entry ``number`` (0, 1, ...): ``audit.0000``; wider past 9999."""
    return f"{AUDIT_PREFIX}{number:04d}"


def _audit(tags: dict) -> list[tuple[int, dict]]:
    """(number, entry) of every audit tag, ordered by number (as text audit.10000 would sort
    before audit.9999)."""
    found = []
    for key, value in tags.items():
        number = key.removeprefix(AUDIT_PREFIX)
        if key.startswith(AUDIT_PREFIX) and number.isdigit():
            found.append((int(number), json.loads(value)))
    return sorted(found, key=lambda pair: pair[0])


class Registry:
    """The model registry of ``store_dir`` (its own MLflow SQLite store) and the operations
    performed through this object, in order (``ops``); ``history()`` is every operation the
    store holds, this session's and earlier ones'."""

    def __init__(self, store_dir: str | os.PathLike, name: str = MODEL):
        self.tracker = tracking.Tracker(store_dir)
        self.client = self.tracker.client
        self.uri = self.tracker.uri
        self.name = name
        self.ops: list[Op] = []

    def _stored(self) -> list[tuple[int, dict]]:
        return _audit(dict(self.client.get_registered_model(self.name).tags))

    def history(self) -> list[Op]:
        """Every audit entry in the store, oldest first (earlier sessions included)."""
        return [Op(**entry) for _number, entry in self._stored()]

    def _log(self, op: str, version: str | None, by: str, detail: str = "", at=None) -> Op:
        entry = Op(at or _now(), op, version, by, detail)
        stored = self._stored()  # numbered after the store's last entry, not this session's
        key = audit_key(stored[-1][0] + 1 if stored else 0)
        self.client.set_registered_model_tag(self.name, key, json.dumps(entry.to_dict()))
        self.ops.append(entry)
        return entry

    def create(self, owner: str, description: str) -> None:
        self.client.create_registered_model(
            self.name, tags={"owner": owner}, description=description
        )
        self._log("create", None, owner, description)

    def register(self, source: pathlib.Path, owner: str, description: str) -> str:
        """A new version whose source is an artifact directory with a provenance manifest."""
        manifest = provenance.verify(source)
        version = self.client.create_model_version(
            self.name,
            source=str(source),
            tags={
                "owner": owner,
                "provenance.manifest_sha256": manifest["manifest_sha256"],
                "provenance.git_revision": manifest["git_revision"],
            },
            description=description,
        ).version
        self._log("register", str(version), owner, description)
        return str(version)

    def approve(self, version: str, by: str, note: str) -> None:
        at = _now()
        self.client.set_model_version_tag(self.name, version, "approval.by", by)
        self.client.set_model_version_tag(self.name, version, "approval.at", at)
        self._log("approve", version, by, note, at)

    def _tags(self, version: str) -> dict:
        return dict(self.client.get_model_version(self.name, version).tags)

    def promote(self, version: str, alias: str, by: str, reason: str, op: str = "alias") -> None:
        """Point ``alias`` at ``version``; refused (PromotionRefused) when the rules say no."""
        if alias not in ALIASES:
            raise ValueError(f"alias must be one of {ALIASES}, got {alias!r}")
        tags = self._tags(version)
        if "retired.by" in tags:
            raise PromotionRefused(
                f"version {version} was retired by {tags['retired.by']} at {tags['retired.at']}: "
                "a retired version is never promoted again (register a new one)"
            )
        if alias == "champion" and "approval.by" not in tags:
            raise PromotionRefused(
                f"version {version} has no approval: the champion alias moves only to an "
                "approved version (approve it first: approval.by, approval.at)"
            )
        source = pathlib.Path(self.client.get_model_version(self.name, version).source)
        provenance.verify(source)  # the artifact it would serve, before it can serve
        self.client.set_registered_model_alias(self.name, alias, version)
        self._log(op, version, by, f"{alias}: {reason}")

    def champion(self) -> str | None:
        aliases = self.client.get_registered_model(self.name).aliases
        return str(aliases["champion"]) if "champion" in aliases else None

    def rollback(self, by: str, reason: str) -> str:
        """Move champion back to the version it pointed at before its current one."""
        current = self.champion()
        held = [
            o.version
            for o in self.history()  # the store's, so a reopened registry rolls back too
            if o.op in ("alias", "rollback") and o.detail.startswith("champion:")
        ]
        earlier = [v for v in held[:-1] if v != current]
        if current is None or not earlier:
            raise PromotionRefused("nothing to roll back to: champion has had one version")
        self.promote(earlier[-1], "champion", by, reason, op="rollback")
        return earlier[-1]

    def retire(self, version: str, by: str, reason: str) -> None:
        if self.champion() == version:
            raise PromotionRefused(
                f"version {version} is the champion: promote or roll back to another first"
            )
        at = _now()
        self.client.set_model_version_tag(self.name, version, "retired.by", by)
        self.client.set_model_version_tag(self.name, version, "retired.at", at)
        for alias in self.client.get_model_version(self.name, version).aliases:
            self.client.delete_registered_model_alias(self.name, alias)
        self._log("retire", version, by, reason, at)


# --- the expected state and an independent reader -----------------------------------------


def expected_state(ops: list[Op]) -> dict:
    """What the registry must hold after ``ops``: {aliases, owners, approved, retired}."""
    aliases, owners, approved, retired = {}, {}, {}, {}
    for o in ops:
        if o.op == "register":
            owners[o.version] = o.by
        elif o.op == "approve":
            approved[o.version] = o.by
        elif o.op in ("alias", "rollback"):
            aliases[o.detail.split(":")[0]] = o.version
        elif o.op == "retire":
            retired[o.version] = o.by
            aliases = {a: v for a, v in aliases.items() if v != o.version}
    return {"aliases": aliases, "owners": owners, "approved": approved, "retired": retired}


def read_back(uri: str, name: str = MODEL) -> dict:
    """The registry as a fresh MlflowClient on ``uri`` reads it: the same shape as
    expected_state, plus the audit log and every version's record."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    model = client.get_registered_model(name)
    versions = sorted(client.search_model_versions(f"name='{name}'"), key=lambda v: int(v.version))
    held = {}  # search_model_versions leaves a version's aliases empty: take the model's
    for alias, version in model.aliases.items():
        held.setdefault(str(version), []).append(alias)
    audit = [entry for _number, entry in _audit(dict(model.tags))]
    return {
        "aliases": {a: str(v) for a, v in model.aliases.items()},
        "owners": {str(v.version): v.tags.get("owner") for v in versions},
        "approved": {
            str(v.version): v.tags["approval.by"] for v in versions if "approval.by" in v.tags
        },
        "retired": {
            str(v.version): v.tags["retired.by"] for v in versions if "retired.by" in v.tags
        },
        "audit": audit,
        "model_owner": model.tags.get("owner"),
        "versions": [
            {
                "version": str(v.version),
                "created": datetime.datetime.fromtimestamp(
                    v.creation_timestamp / 1000, datetime.UTC
                ).isoformat(timespec="milliseconds"),
                "owner": v.tags.get("owner"),
                "approved by": v.tags.get("approval.by", ""),
                "approved at": v.tags.get("approval.at", ""),
                "aliases": ", ".join(sorted(held.get(str(v.version), []))),
                "retired by": v.tags.get("retired.by", ""),
                "source": v.source,
                "description": v.description,
            }
            for v in versions
        ],
    }


def load_alias(uri: str, alias: str, name: str = MODEL) -> tuple[str, export.Artifacts]:
    """(version, artifacts) of the version ``alias`` names, read by a fresh client, its
    artifact verified against its provenance before it is loaded."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_model_version_by_alias(name, alias)
    source = pathlib.Path(version.source)
    provenance.verify(source)
    return str(version.version), export.load_artifacts(source)


# --- the versions the lesson registers ----------------------------------------------------


def build(root: pathlib.Path, label: str, seed: int, steps: int, learning_rate: float, revision):
    """Train the digits MLP (core.serving.predict.export), export it, record its provenance."""
    trained = export.train(seed, steps, learning_rate)
    directory = root / label
    export.write_artifacts(trained, directory, max_batch=512, model_version=label)
    split = digits.load(0.2, seed)
    provenance.record(
        directory,
        label,
        {"seed": seed, "steps": steps, "learning_rate": learning_rate},
        tracking.dataset_sha256({"x": split.x_train, "y": split.y_train}),
        checkpoint=[export.WEIGHTS],
        export=[export.EXPORTED, export.MANIFEST],
        revision=revision,
    )
    return directory, trained.info


def held_out(seed: int) -> tuple[np.ndarray, np.ndarray]:
    split = digits.load(0.2, seed)
    x = (split.x_test.reshape(len(split.y_test), -1) * export.MAX_VALUE).astype(np.float32)
    return x, np.asarray(split.y_test)


@dataclasses.dataclass
class Lifecycle:
    registry: Registry
    predictions: dict[str, tuple[np.ndarray, np.ndarray]]  # version -> at registration
    refused: list[dict]  # [{attempt, why}]
    x: np.ndarray
    y: np.ndarray


OWNER, REVIEWER, ONCALL = "ana (ml-platform)", "ben (reviewer)", "chen (on-call)"


def lifecycle(store_dir: pathlib.Path, seed: int, steps: int, revision: str) -> Lifecycle:
    """Own, register, approve, promote, roll back and retire: three versions, one store."""
    store_dir = pathlib.Path(store_dir)
    registry = Registry(store_dir)
    registry.create(OWNER, "8x8 digits classifier (MLP, jax.export)")
    x, y = held_out(seed)
    predictions, refused = {}, []

    def add(label, lr, why):  # equal steps: one compiled training program for all three
        directory, _ = build(store_dir / "artifacts", label, seed, steps, lr, revision)
        version = registry.register(directory, OWNER, why)
        labels, probabilities = export.load_artifacts(directory).predict(x)
        predictions[version] = (labels, probabilities)
        return version

    def attempt(what, fn):
        try:
            fn()
        except PromotionRefused as exc:
            refused.append({"attempt": what, "why": str(exc)})
        else:
            raise AssertionError(f"{what} was not refused")

    v1 = add("m1", 0.1, "first release")
    registry.approve(v1, REVIEWER, "held-out accuracy reviewed")
    registry.promote(v1, "champion", OWNER, "first release")
    v2 = add("m2", 0.3, "higher learning rate")
    registry.promote(v2, "challenger", OWNER, "evaluate beside the champion")
    attempt(
        f"champion -> v{v2} before approval",
        lambda: registry.promote(v2, "champion", OWNER, "skip review"),
    )
    registry.approve(v2, REVIEWER, "challenger beat the champion offline")
    registry.promote(v2, "champion", OWNER, "approved challenger")
    registry.rollback(ONCALL, "incident: v2 mislabels a customer's scans")
    registry.retire(v2, OWNER, "withdrawn after the incident")
    attempt(
        f"challenger -> v{v2} after retirement",
        lambda: registry.promote(v2, "challenger", OWNER, "retry"),
    )
    v3 = add("m3", 0.05, "lower learning rate, awaiting review")
    registry.promote(v3, "challenger", OWNER, "next candidate")
    return Lifecycle(registry, predictions, refused, x, y)
