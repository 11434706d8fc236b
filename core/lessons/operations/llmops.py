"""LLMOps: version prompts, evaluate behavior and trace requests (lesson code of apps/llmops.py).

- a prompt registry: versions content-hashed (sha256 of the template), one pydantic JSON
  document per version written atomically, aliases ("production", "candidate"), diffs;
- the course's byte LM (core.lm.transformer.TinyLM) trained in a few seconds on a
  repeated-pattern language ("rep: abcabcabc...") and an evaluation suite per prompt
  version: the held-out loss of the filled templates and a behavioural task (continue a
  pattern shown twice, greedy, exact match);
- request traces: OpenTelemetry SDK spans through the course's model service
  (core.serving.byte_lm on a loopback Server): request -> tokenize -> prefill -> decode ...
  -> detokenize, into an in-memory exporter, the trace id in the response's X-Trace-ID.
"""

import dataclasses
import difflib
import hashlib
import http.client
import json
import pathlib
import re
import socket
import threading

import jax
import numpy as np
import pydantic
from flax import nnx

from core import documents
from core.lm import tokenizer, transformer
from core.serving.byte_lm import app as service_app
from core.serving.byte_lm import engine as service_engine

ALPHABET = "abcdefgh"
PATTERN_LEN = 3
SEQ_LEN = 32
TRAIN_PREFIX = "rep: "  # the format the model is trained on
CONFIG = transformer.TransformerConfig(width=32, num_heads=4, num_layers=2, max_len=SEQ_LEN)
LEARNING_RATE = 1e-2  # AdamW; the pattern is learnt by ~150 steps of 16 rows at this rate
BATCH_ROWS = 16
SLOT = "{pattern}"  # every template holds it exactly once
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SERVER_LIFETIME_S = 120  # the loopback server stops by itself after this, whatever happens


# --- the prompt registry ---------------------------------------------------------------------


class PromptVersion(pydantic.BaseModel):
    """One registered version of a prompt template (one JSON document on disk)."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)
    name: str
    version: int = pydantic.Field(ge=1)
    template: str
    sha256: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$")
    note: str = ""


class Aliases(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    aliases: dict[str, int]


def template_hash(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def check_template(template: str) -> None:
    if template.count(SLOT) != 1:
        raise ValueError(f"a template must hold {SLOT} exactly once, got {template!r}")
    filled = template.replace(SLOT, "x" * 2 * PATTERN_LEN)
    if len(filled.encode("utf-8")) > SEQ_LEN // 2:
        raise ValueError(
            f"template {template!r} leaves no room: filled with a pattern shown twice it has "
            f"{len(filled.encode())} bytes; the model's prompts hold at most {SEQ_LEN // 2}"
        )


class Registry:
    """Prompt versions under ``root``: root/NAME/vNNNN.json and root/NAME/aliases.json."""

    def __init__(self, root):
        self.root = pathlib.Path(root)

    def _dir(self, name: str) -> pathlib.Path:
        if not NAME_RE.fullmatch(name):
            raise ValueError(f"prompt name {name!r}: use 1-64 of a-z 0-9 _ - (first a-z 0-9)")
        return self.root / name

    def versions(self, name: str) -> list[PromptVersion]:
        """Every version of ``name``, oldest first, each verified (schema, hash, its file)."""
        out = []
        for path in sorted(self._dir(name).glob("v*.json")):
            v = PromptVersion.model_validate_json(path.read_text(encoding="utf-8"))
            if v.sha256 != template_hash(v.template):
                raise ValueError(f"{path}: the template does not match its sha256 (edited?)")
            if path.name != f"v{v.version:04d}.json" or v.name != name:
                raise ValueError(f"{path}: holds {v.name} v{v.version}")
            out.append(v)
        return out

    def register(self, name: str, template: str, note: str = "") -> PromptVersion:
        """A new version, or the existing one with the same content (hashes are the identity)."""
        check_template(template)
        existing = self.versions(name)
        digest = template_hash(template)
        for v in existing:
            if v.sha256 == digest:
                return v
        v = PromptVersion(
            name=name, version=len(existing) + 1, template=template, sha256=digest, note=note
        )
        documents.write_text_atomic(
            self._dir(name) / f"v{v.version:04d}.json", v.model_dump_json(indent=1)
        )
        return v

    def aliases(self, name: str) -> dict[str, int]:
        path = self._dir(name) / "aliases.json"
        if not path.exists():
            return {}
        return Aliases.model_validate_json(path.read_text(encoding="utf-8")).aliases

    def set_alias(self, name: str, alias: str, version: int) -> None:
        if not NAME_RE.fullmatch(alias) or alias.isdigit():
            raise ValueError(f"alias {alias!r}: a name (a-z 0-9 _ -), not a number")
        if not 1 <= version <= len(self.versions(name)):
            raise ValueError(f"{name} has no version {version}")
        table = {**self.aliases(name), alias: version}
        documents.write_text_atomic(
            self._dir(name) / "aliases.json", Aliases(aliases=table).model_dump_json(indent=1)
        )

    def get(self, name: str, ref) -> PromptVersion:
        """A version by number (1, "3") or alias ("production")."""
        versions = self.versions(name)
        if isinstance(ref, str) and not ref.isdigit():
            table = self.aliases(name)
            if ref not in table:
                raise ValueError(f"{name} has no alias {ref!r}; have {sorted(table)}")
            ref = table[ref]
        number = int(ref)
        if not 1 <= number <= len(versions):
            raise ValueError(f"{name} has no version {number}; have 1..{len(versions)}")
        return versions[number - 1]

    def diff(self, name: str, a, b) -> str:
        va, vb = self.get(name, a), self.get(name, b)
        return "\n".join(
            difflib.unified_diff(
                [va.template], [vb.template], f"{name} v{va.version}", f"{name} v{vb.version}",
                lineterm="",
            )
        )  # fmt: skip


# --- the byte LM and its evaluation ------------------------------------------------------------


def patterns(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(ALPHABET), PATTERN_LEN)) for _ in range(count)]


def fill(template: str, pattern: str, repeats: int | None = None) -> str:
    """The template around the pattern repeated (to the row's end when repeats is None)."""
    head = template.replace(SLOT, "")
    if repeats is None:
        repeats = SEQ_LEN  # cut below
    text = template.replace(SLOT, pattern * repeats)
    return text[: max(SEQ_LEN, len(head))]


def batch_for(texts: list[str]) -> dict:
    docs = [tokenizer.encode(t)[:SEQ_LEN] for t in texts]
    return transformer.batch_from_packed(tokenizer.pack_documents(docs, SEQ_LEN, len(docs)))


def train(steps: int, seed: int):
    """The tiny byte LM on the training format: (model, per-step records)."""
    model = transformer.TinyLM(CONFIG, jax.random.key(seed))
    optimizer = transformer.make_optimizer(model, LEARNING_RATE, flatten=True)
    history = transformer.train_loop(
        model, optimizer,
        lambda step: batch_for([fill(TRAIN_PREFIX + SLOT, p)
                                for p in patterns(BATCH_ROWS, seed * 100_003 + step)]),
        steps,
    )  # fmt: skip
    return model, history


def numpy_loss(logits_BTV, batch: dict) -> float:
    """Mean cross-entropy over the weighted targets in NumPy float64 (the check's reference)."""
    z = np.asarray(logits_BTV, np.float64)
    z = z - z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, np.asarray(batch["targets_BT"])[..., None], -1)[..., 0]
    w = np.asarray(batch["weights_BT"], np.float64)
    return float((nll * w).sum() / w.sum())


def greedy_in_row(model, prompt_BT, num_new: int) -> np.ndarray:
    """Greedy decoding by full forward passes over rows padded to SEQ_LEN (causal: the
    padding after a position does not change its logits), so every template and step reuses
    the one compiled (B, SEQ_LEN) forward (core.lm.generate.greedy_without_cache pads to
    prompt + new tokens: one compile per prompt length)."""
    prompt = np.asarray(prompt_BT, np.int32)
    length = prompt.shape[1]
    if length + num_new > SEQ_LEN:
        raise ValueError(f"prompt {length} + {num_new} new tokens exceed SEQ_LEN={SEQ_LEN}")
    rows = np.zeros((prompt.shape[0], SEQ_LEN), np.int32)
    rows[:, :length] = prompt
    for t in range(length, length + num_new):
        rows[:, t] = np.argmax(np.asarray(transformer.forward(model, rows))[:, t - 1], -1)
    return rows[:, : length + num_new]


@dataclasses.dataclass
class Evaluation:
    version: int
    heldout_loss: float
    heldout_logits: np.ndarray
    heldout_batch: dict
    exact_match: float
    samples: list[dict]


def evaluate(model, template: str, version: int, cases: int, seed: int) -> Evaluation:
    """Held-out loss of the filled template, and the pattern-continuation task: the prompt
    shows the pattern twice, the model must continue it for two more periods (greedy)."""
    held = patterns(cases, 10_000_019 + seed)
    batch = batch_for([fill(template, p) for p in held])
    loss, _count = transformer.heldout_loss(model, batch)
    logits = np.asarray(
        transformer.forward(model, batch["tokens_BT"], batch["segment_ids_BT"],
                            batch["positions_BT"])
    )  # fmt: skip
    prompts = [tokenizer.encode(template.replace(SLOT, p * 2)) for p in held]
    out = greedy_in_row(model, np.stack(prompts), 2 * PATTERN_LEN)
    samples = []
    for p, row, prompt in zip(held, out, prompts, strict=True):
        got = tokenizer.decode(row[len(prompt) :], errors="replace")
        samples.append({"pattern": p, "expected": p * 2, "completion": got, "ok": got == p * 2})
    return Evaluation(
        version, loss, logits, batch, float(np.mean([s["ok"] for s in samples])), samples
    )


# --- the model service with traces -------------------------------------------------------------


@nnx.jit
def _extend(model, tokens_BT, cache):
    return model.extend(tokens_BT, cache)


class LMArtifacts:
    """What core.serving.byte_lm.Engine serves: the trained model in this process (fp32)."""

    precisions = ["fp32"]

    def __init__(self, model):
        self.model = model
        self.shapes = {"batch": 1, "prefill_len": SEQ_LEN // 2, "capacity": SEQ_LEN}

    def prefill(self, precision, tokens_BT, lengths_B):
        length = int(np.asarray(lengths_B)[0])
        cache = transformer.init_cache(CONFIG, 1, SEQ_LEN)
        logits, cache = _extend(self.model, np.asarray(tokens_BT)[:, :length], cache)
        return logits[:, -1], cache

    def decode(self, precision, tokens_B, cache):
        logits, cache = _extend(self.model, np.asarray(tokens_B)[:, None], cache)
        return logits[:, -1], cache


class TracedEngine(service_engine.Engine):
    """The course's byte LM engine with a span around each stage of a request."""

    def __init__(self, model, tracer):
        super().__init__()
        self.model, self.tracer = model, tracer
        self.contract = {"prefill_len": SEQ_LEN // 2, "capacity": SEQ_LEN}

    def open(self):
        return LMArtifacts(self.model)

    warm_lengths: tuple[int, ...] = ()

    def warm(self, artifacts) -> None:
        """Compile prefill for each prompt length in ``warm_lengths`` and decode once, so a
        trace shows serving, not XLA compiling (the spans are made only by requests)."""
        for length in self.warm_lengths:
            tokens = np.zeros((1, artifacts.shapes["prefill_len"]), np.int32)
            _logits, cache = artifacts.prefill("fp32", tokens, np.array([length], np.int32))
            artifacts.decode("fp32", np.zeros((1,), np.int32), cache)[0].block_until_ready()

    def _prompt_tokens(self, request):
        with self.tracer.start_as_current_span("tokenize") as span:
            tokens = super()._prompt_tokens(request)
            span.set_attribute("tokens", int(tokens.size))
            return tokens

    def _prefill(self, tokens, precision):
        with self.tracer.start_as_current_span("prefill") as span:
            span.set_attribute("tokens", int(tokens.size))
            logits, cache = super()._prefill(tokens, precision)
            return np.asarray(logits), cache

    def _decode(self, token, cache, precision):
        with self.tracer.start_as_current_span("decode"):
            logits, cache = super()._decode(token, cache, precision)
            return np.asarray(logits), cache

    def generate(self, request) -> dict:
        out = super().generate(request)
        with self.tracer.start_as_current_span("detokenize") as span:
            out["text"] = tokenizer.decode(out["tokens"], errors="replace")
            span.set_attribute("bytes", len(out["tokens"]))
        return out


class TraceMiddleware:
    """ASGI: one SERVER span "request" per HTTP request (the parent of the engine's spans);
    the trace id goes out in X-Trace-ID, the request id (core.serving.http) into the span."""

    def __init__(self, app, tracer):
        self.app, self.tracer = app, tracer

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from opentelemetry import trace  # imported where it traces: a host may lack OpenTelemetry

        name = "request"
        with self.tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER) as span:
            span.set_attribute("http.method", scope["method"])
            span.set_attribute("http.route", scope["path"])
            trace_id = format(span.get_span_context().trace_id, "032x")

            async def send_traced(message):
                if message["type"] == "http.response.start":
                    headers = list(message.get("headers", []))
                    for key, value in headers:
                        if key.lower() == b"x-request-id":
                            span.set_attribute("request_id", value.decode("latin-1"))
                    span.set_attribute("http.status_code", message["status"])
                    headers.append((b"x-trace-id", trace_id.encode()))
                    message = {**message, "headers": headers}
                await send(message)

            await self.app(scope, receive, send_traced)


@dataclasses.dataclass
class Traced:
    responses: list[dict]
    spans: list[dict]
    access_log: list[dict]


ACCESS_LINE = re.compile(
    r"(?P<method>\S+) (?P<path>\S+) (?P<status>\d+) (?P<ms>[0-9.]+)ms id=(?P<id>\S+)\Z"
)


def serve_and_trace(model, prompts: list[str], max_new_tokens: int) -> Traced:
    """Serve the model on 127.0.0.1 (port 0), send one /generate per prompt with its own
    request id, stop the server; the spans (in-memory exporter) and the access log."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("jax-tpu-lab.llmops")
    lines: list[str] = []
    engine = TracedEngine(model, tracer)
    engine.warm_lengths = tuple(sorted({len(tokenizer.encode(p)) for p in prompts}))
    asgi = service_app.make_app(engine, lines.append, title="llmops", description="byte LM")
    sock = socket.create_server(("127.0.0.1", 0))
    server = service_app.Server(TraceMiddleware(asgi, tracer), engine, sock, lines.append)
    engine.load()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    timer = threading.Timer(SERVER_LIFETIME_S, server.shutdown, kwargs={"wait": False})
    timer.daemon = True
    responses = []
    try:
        thread.start()
        timer.start()
        host, port = server.server_address[:2]
        for i, prompt in enumerate(prompts):
            conn = http.client.HTTPConnection(host, port, timeout=60)
            body = json.dumps({"prompt": prompt, "max_new_tokens": max_new_tokens})
            request_id = f"llmops-{i}"
            conn.request("POST", "/generate", body, {"Content-Type": "application/json",
                                                     "X-Request-ID": request_id})  # fmt: skip
            reply = conn.getresponse()
            data = json.loads(reply.read())
            responses.append({
                "request_id": reply.getheader("X-Request-ID"),
                "trace_id": reply.getheader("X-Trace-ID"),
                "status": reply.status,
                "prompt": prompt,
                "text": data.get("text", data.get("error")),
            })  # fmt: skip
            conn.close()
    finally:
        timer.cancel()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        provider.shutdown()
    return Traced(responses, span_rows(exporter.get_finished_spans()), parse_access(lines))


def span_rows(spans) -> list[dict]:
    rows = []
    for s in spans:
        rows.append({
            "trace_id": format(s.context.trace_id, "032x"),
            "span_id": format(s.context.span_id, "016x"),
            "parent_id": format(s.parent.span_id, "016x") if s.parent else None,
            "name": s.name,
            "start_ns": s.start_time, "end_ns": s.end_time,
            "ms": (s.end_time - s.start_time) / 1e6,
            "request_id": s.attributes.get("request_id"),
        })  # fmt: skip
    return rows


def parse_access(lines: list[str]) -> list[dict]:
    out = []
    for line in lines:
        m = ACCESS_LINE.search(line)
        if m:
            out.append({**m.groupdict(), "ms": float(m["ms"]), "status": int(m["status"])})
    return out


def timeline(spans: list[dict]) -> list[dict]:
    """The spans for a chart: start and end in ms after the first span, with their request."""
    t0 = min(s["start_ns"] for s in spans)
    roots = {s["trace_id"]: s["request_id"] for s in spans if s["parent_id"] is None}
    return [
        {"request": roots.get(s["trace_id"]), "span": s["name"],
         "start_ms": (s["start_ns"] - t0) / 1e6, "end_ms": (s["end_ns"] - t0) / 1e6,
         "ms": s["ms"]}
        for s in sorted(spans, key=lambda s: s["start_ns"])
    ]  # fmt: skip


def trace_problems(traced: Traced, max_new_tokens: int) -> dict:
    """Structure and timing checks of each trace against the response and the access log:
    {"problems": [...], "log_excess_ms": the largest access-log time beyond its span's}."""
    problems, excess = [], 0.0
    log = {row["id"]: row for row in traced.access_log}
    for r in traced.responses:
        spans = [s for s in traced.spans if s["trace_id"] == r["trace_id"]]
        roots = [s for s in spans if s["parent_id"] is None]
        if len(roots) != 1 or roots[0]["name"] != "request":
            problems.append(f"{r['request_id']}: {len(roots)} root spans")
            continue
        root = roots[0]
        if root["request_id"] != r["request_id"]:
            problems.append(f"{r['request_id']}: the span holds request id {root['request_id']}")
        children = [s for s in spans if s is not root]
        names = [s["name"] for s in sorted(children, key=lambda s: s["start_ns"])]
        want = ["tokenize", "prefill", *["decode"] * (max_new_tokens - 1), "detokenize"]
        if names != want:
            problems.append(f"{r['request_id']}: spans {names}, expected {want}")
        for s in children:
            if s["parent_id"] != root["span_id"]:
                problems.append(f"{r['request_id']}: {s['name']} is not a child of the request")
            if not root["start_ns"] <= s["start_ns"] <= s["end_ns"] <= root["end_ns"]:
                problems.append(f"{r['request_id']}: {s['name']} lies outside the request span")
        ordered = sorted(children, key=lambda s: s["start_ns"])
        for a, b in zip(ordered, ordered[1:], strict=False):
            if b["start_ns"] < a["end_ns"]:
                problems.append(f"{r['request_id']}: {a['name']} and {b['name']} overlap")
        line = log.get(r["request_id"])
        if line is None:
            problems.append(f"{r['request_id']}: no access-log line")
            continue
        # the access log times the middleware's start to the response's start, inside the
        # request span; it prints 0.1 ms, so it may read up to 0.05 ms over
        excess = max(excess, line["ms"] - 0.05 - root["ms"])
        if line["ms"] + 0.05 < sum(s["ms"] for s in children if s["name"] != "detokenize"):
            problems.append(f"{r['request_id']}: the engine's spans outlast the access log")
    return {"problems": problems, "log_excess_ms": max(excess, 0.0)}
