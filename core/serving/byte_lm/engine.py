"""The byte LM service's engine: the sampler, and the Engine holding the artifacts' endpoints,
the sessions and the generation logic (a subclass opens the artifacts); RequestError (from
core.serving.http) is what it refuses a request with."""

import collections
import secrets

import numpy as np

from core.lm import tokenizer
from core.serving.byte_lm.models import TOP_K
from core.serving.http import RequestError, ServiceEngine

MAX_SESSIONS = 64


# --- sampling -------------------------------------------------------------------------------


def next_token_probabilities(logits_V, temperature: float, top_k: int | None = None) -> np.ndarray:
    """float64 probabilities of the next token: one-hot on the argmax (the first one) when
    temperature is 0, else softmax(logits / temperature) over the top_k largest logits (all
    when None; ties broken towards the lower token id).

    Weights are exp((logit - max) / temperature): every exponent is <= 0 and the largest is
    exactly 0, so no temperature > 0 overflows them (logits / 1e-310 alone is +-inf, and
    inf - inf is NaN); a tiny temperature sends the others to 0: greedy, its limit."""
    logits = np.asarray(logits_V, np.float64)
    if not temperature > 0:
        probs = np.zeros_like(logits)
        probs[np.argmax(logits)] = 1.0
        return probs
    keep = np.zeros(logits.shape, bool)
    keep[np.argsort(-logits, kind="stable")[: top_k or logits.size]] = True
    with np.errstate(over="ignore", under="ignore"):
        weights = np.where(keep, np.exp((logits - logits.max()) / temperature), 0.0)
    return weights / weights.sum()


def _top_logits(logits_V: np.ndarray) -> list[dict]:
    order = np.argsort(-logits_V, kind="stable")[:TOP_K]
    return [
        {
            "token": int(t),
            "logit": float(logits_V[t]),
            "text": tokenizer.decode([t], errors="replace"),
        }
        for t in order
    ]


# --- the engine: artifacts + sessions -------------------------------------------------------


class Engine(ServiceEngine):
    """The model's endpoints, the sessions and one lock (the model runs one request at a time).

    A subclass says where the model comes from: ``open()`` returns verified artifacts (an
    object with ``precisions``, ``shapes`` {"batch", "prefill_len", "capacity"} and
    ``prefill(precision, tokens_BT, lengths_B) -> (logits, cache)``, ``decode(precision,
    tokens_B, cache) -> (logits, cache)``), and it may set ``contract``: the shapes known before
    loading, which bound the request models (None: not known yet)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        super().__init__()
        self.max_sessions = max_sessions
        self.sessions: collections.OrderedDict[str, dict] = collections.OrderedDict()

    def warm(self, artifacts) -> None:
        """One prefill + decode per precision (compiles them)."""
        for precision in artifacts.precisions:
            tokens = np.zeros((1, artifacts.shapes["prefill_len"]), np.int32)
            logits, cache = artifacts.prefill(precision, tokens, np.ones((1,), np.int32))
            artifacts.decode(precision, np.zeros((1,), np.int32), cache)[0].block_until_ready()

    def _artifacts(self):
        return self.require_ready()

    def readiness(self) -> dict:
        a = self._artifacts()
        return {
            "status": "ready",
            "precisions": a.precisions,
            "prefill_len": a.shapes["prefill_len"],
            "capacity": a.shapes["capacity"],
        }

    def _check_precision(self, precision: str) -> None:
        if precision not in self.artifacts.precisions:
            raise RequestError(
                f"cache {precision!r} was not exported; have {self.artifacts.precisions}"
            )

    def _prompt_tokens(self, request) -> np.ndarray:
        """The prompt's bytes (the model checked their type and range), within prefill_len."""
        prefill_len = self.artifacts.shapes["prefill_len"]
        if request.prompt is not None:
            tokens = tokenizer.encode(request.prompt)
        else:
            tokens = np.array(request.tokens, np.int32)
        if tokens.size < 1:
            raise RequestError("the prompt must hold at least one byte")
        if tokens.size > prefill_len:
            raise RequestError(f"prompt has {tokens.size} bytes; at most prefill_len={prefill_len}")
        return tokens

    def _prefill(self, tokens: np.ndarray, precision: str):
        a = self.artifacts
        padded = np.full((1, a.shapes["prefill_len"]), tokenizer.PAD_ID, np.int32)
        padded[0, : tokens.size] = tokens
        logits, cache = a.prefill(precision, padded, np.array([tokens.size], np.int32))
        return np.asarray(logits)[0], cache

    def _decode(self, token: int, cache: dict, precision: str):
        logits, cache = self.artifacts.decode(precision, np.array([token], np.int32), cache)
        return np.asarray(logits)[0], cache

    def _summary(self, session_id: str, session: dict) -> dict:
        logits = session["logits"]
        return {
            "session": session_id,
            "cache": session["precision"],
            "length": session["length"],
            "next_token": int(np.argmax(logits)),
            "next_token_logits_top": _top_logits(logits),
        }

    def prefill(self, request) -> dict:
        """A new session holding the prompt's cache (a PrefillRequest, already validated)."""
        self._artifacts()
        tokens = self._prompt_tokens(request)
        self._check_precision(request.cache)
        with self.lock:
            logits, cache = self._prefill(tokens, request.cache)
            session_id = secrets.token_hex(16)
            session = {
                "precision": request.cache,
                "cache": cache,
                "length": int(tokens.size),
                "logits": logits,
            }
            self.sessions[session_id] = session
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)
            return self._summary(session_id, session)

    def decode(self, request) -> dict:
        """One more token into a session (a DecodeRequest, already validated)."""
        a = self._artifacts()
        with self.lock:
            session = self.sessions.get(request.session)
            if session is None:
                raise RequestError(
                    "unknown session (never created, or dropped as least recently used)"
                )
            if session["length"] >= a.shapes["capacity"]:
                raise RequestError(f"session cache is full: capacity {a.shapes['capacity']} tokens")
            session["logits"], session["cache"] = self._decode(
                request.token, session["cache"], session["precision"]
            )
            session["length"] += 1
            self.sessions.move_to_end(request.session)
            return self._summary(request.session, session)

    def generate(self, request) -> dict:
        """max_new_tokens tokens after the prompt (a GenerateRequest, already validated)."""
        a = self._artifacts()
        tokens = self._prompt_tokens(request)
        self._check_precision(request.cache)
        room = a.shapes["capacity"] - tokens.size
        if not 1 <= request.max_new_tokens <= room:
            raise RequestError(
                f"max_new_tokens must be an integer in [1, {room}] (capacity "
                f"{a.shapes['capacity']} minus the prompt's {tokens.size} bytes), got "
                f"{request.max_new_tokens}"
            )
        with self.lock:
            new = self.generate_tokens(
                tokens,
                request.max_new_tokens,
                request.cache,
                request.temperature,
                request.seed,
                request.top_k,
            )
        return {
            "text": tokenizer.decode(new, errors="replace"),
            "tokens": [int(t) for t in new],
            "cache": request.cache,
            "prompt_length": int(tokens.size),
        }

    def generate_tokens(
        self,
        tokens,
        count: int,
        precision: str,
        temperature: float = 0.0,
        seed: int = 0,
        top_k: int | None = None,
    ):
        """``count`` new tokens: greedy when temperature is 0, else drawn from
        next_token_probabilities with numpy's generator seeded by ``seed``."""
        rng = np.random.default_rng(seed)
        logits, cache = self._prefill(np.asarray(tokens, np.int32), precision)
        new = []
        for i in range(count):
            if temperature == 0:
                token = int(np.argmax(logits))
            else:
                probs = next_token_probabilities(logits, temperature, top_k)
                token = int(rng.choice(probs.size, p=probs))
            new.append(token)
            if i + 1 < count:
                logits, cache = self._decode(token, cache, precision)
        return np.array(new, np.int32)
