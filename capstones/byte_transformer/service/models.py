"""The service's request and response models (strict pydantic, bounded by the exported shapes)
and the one-message description of a request's validation errors."""

from typing import Annotated, Literal

import pydantic
import pydantic_core

from core.lm import tokenizer

TOP_K = 5
MAX_TEMPERATURE = 100.0
MAX_SEED = 2**32 - 1
SESSION_ID = r"^[0-9a-f]{32}$"  # secrets.token_hex(16)
PRECISIONS = ("fp32", "bf16", "int8")  # the KV cache precisions an artifact may export
Precision = Literal[PRECISIONS]
Token = Annotated[int, pydantic.Field(ge=0, le=tokenizer.VOCAB_SIZE - 1)]


# --- request and response models ------------------------------------------------------------


class Strict(pydantic.BaseModel):
    """No coercion (``false`` is not a number, ``"4"`` not an integer); unknown keys refused."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")


def _may_be_left_out(schema: dict) -> None:
    """A field a client may leave out but not send as null: its default (None, "absent") is
    not a value the document offers."""
    schema.pop("default", None)


def request_models(prefill_len: int | None, capacity: int | None) -> dict[str, type[Strict]]:
    """{path: request model} bounded by the exported shapes (None: not known yet; the loaded
    artifacts' contract is checked on every request anyway)."""
    vocab = tokenizer.VOCAB_SIZE
    most = "prefill_len" if prefill_len is None else f"prefill_len={prefill_len}"
    room = None if capacity is None else capacity - 1
    new_tokens = (
        "an integer in [1, capacity - prompt bytes]"
        if capacity is None
        else f"an integer in [1, {room}] (capacity {capacity} minus the prompt's bytes)"
    )

    class PrefillRequest(Strict):
        model_config = pydantic.ConfigDict(  # the document says "exactly one" too
            json_schema_extra={"oneOf": [{"required": ["prompt"]}, {"required": ["tokens"]}]}
        )
        prompt: Annotated[
            str,
            pydantic.Field(
                min_length=1,
                max_length=prefill_len,
                description=f"a string (text) whose UTF-8 bytes are the prompt: 1 to {most} bytes",
                json_schema_extra=_may_be_left_out,
            ),
        ] = None
        tokens: Annotated[
            list[Token],
            pydantic.Field(
                min_length=1,
                max_length=prefill_len,
                description=f"a list of integers in [0, {vocab - 1}] (byte values): "
                f"1 to {most} of them",
                json_schema_extra=_may_be_left_out,
            ),
        ] = None
        cache: Annotated[Precision, pydantic.Field(description=f"one of {list(PRECISIONS)}")] = (
            "fp32"
        )

        @pydantic.model_validator(mode="after")
        def _one_source(self):
            if (self.prompt is None) == (self.tokens is None):
                raise pydantic_core.PydanticCustomError(
                    "prompt_source", 'give exactly one of "prompt" (text) or "tokens" (byte values)'
                )
            return self

    class GenerateRequest(PrefillRequest):
        max_new_tokens: Annotated[int, pydantic.Field(ge=1, le=room, description=new_tokens)]
        temperature: Annotated[
            float,
            pydantic.Field(
                ge=0,
                le=MAX_TEMPERATURE,
                allow_inf_nan=False,
                description=f"a number in [0, {MAX_TEMPERATURE:g}]: 0 is greedy, above 0 samples "
                "softmax(logits / temperature)",
            ),
        ] = 0.0
        top_k: Annotated[
            int,
            pydantic.Field(
                ge=1,
                le=vocab,
                description=f"an integer in [1, {vocab}]: sample among the top_k largest logits "
                "only (default: all)",
                json_schema_extra=_may_be_left_out,
            ),
        ] = None
        seed: Annotated[
            int,
            pydantic.Field(
                ge=0, le=MAX_SEED, description="an integer in [0, 2**32 - 1]: the sampler's seed"
            ),
        ] = 0

    class DecodeRequest(Strict):
        session: Annotated[
            str,
            pydantic.Field(
                pattern=SESSION_ID,
                description="a string: the id /prefill returned (32 lowercase hex digits)",
            ),
        ]
        token: Annotated[
            Token, pydantic.Field(description=f"an integer in [0, {vocab - 1}]: the next byte")
        ]

    return {"/prefill": PrefillRequest, "/decode": DecodeRequest, "/generate": GenerateRequest}


class Health(pydantic.BaseModel):
    status: Literal["alive"]


class Ready(pydantic.BaseModel):
    status: Literal["ready"]
    precisions: list[Precision]
    prefill_len: int
    capacity: int


class TopLogit(pydantic.BaseModel):
    token: Token
    logit: float
    text: str


class SessionState(pydantic.BaseModel):
    session: Annotated[str, pydantic.Field(pattern=SESSION_ID)]
    cache: Precision
    length: Annotated[int, pydantic.Field(ge=1)]
    next_token: Token
    next_token_logits_top: Annotated[
        list[TopLogit], pydantic.Field(min_length=TOP_K, max_length=TOP_K)
    ]


class Generated(pydantic.BaseModel):
    text: str
    tokens: Annotated[list[Token], pydantic.Field(min_length=1)]
    cache: Precision
    prompt_length: Annotated[int, pydantic.Field(ge=1)]


class ErrorBody(pydantic.BaseModel):
    error: str


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer"}


def _json_type(value) -> str:
    return _JSON_TYPES.get(type(value), "number" if isinstance(value, float) else "null")


def short(value) -> str:
    """``repr(value)``, cut to 60 characters for a message."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def describe_errors(errors, model: type[pydantic.BaseModel] | None) -> str:
    """One message for a request's validation errors (FastAPI's list), in the words of the
    fields' descriptions: unknown keys, missing keys, then each wrong value."""
    unknown, missing, wrong = [], [], []
    fields = model.model_fields if model is not None else {}
    for error in errors:
        kind, loc, value = error["type"], [str(x) for x in error["loc"][1:]], error.get("input")
        if kind == "json_invalid":
            wrong.append(f"body is not valid JSON: {error['ctx']['error']} (at character {loc[0]})")
        elif kind == "extra_forbidden":
            unknown.append(loc[-1])
        elif kind == "missing" and loc:
            missing.append(loc[-1])
        elif not loc:  # the body as a whole
            if kind == "prompt_source":
                wrong.append(error["msg"])
            elif kind == "missing":
                wrong.append("body must be a JSON object, got an empty body")
            else:
                wrong.append(f"body must be a JSON object, got {_json_type(value)}")
        elif loc[0] in ("prompt", "tokens") and kind in ("too_short", "string_too_short"):
            wrong.append("the prompt must hold at least one byte")
        elif loc[0] in ("prompt", "tokens") and kind in ("too_long", "string_too_long"):
            unit = "characters" if loc[0] == "prompt" else "tokens"
            most = error["ctx"]["max_length"]
            wrong.append(f"prompt has {len(value)} {unit}; at most prefill_len={most}")
        elif kind == "string_unicode":  # JSON allows lone surrogates ("\ud800")
            wrong.append(
                f"{loc[0]} must be valid Unicode text (a lone surrogate has no UTF-8 bytes), "
                f"got {short(value)}"
            )
        elif loc[0] == "tokens" and len(loc) == 2:
            top = tokenizer.VOCAB_SIZE - 1
            wrong.append(f"each token must be an integer in [0, {top}], got {short(value)}")
        elif loc[0] == "session" and kind == "string_pattern_mismatch":
            wrong.append(
                f"unknown session {short(value)} (/prefill returns 32 lowercase hex digits)"
            )
        elif loc[0] in fields and fields[loc[0]].description:
            wrong.append(f"{loc[0]} must be {fields[loc[0]].description}, got {short(value)}")
        else:
            wrong.append(f"{'.'.join(loc)}: {error['msg']}, got {short(value)}")
    parts = []
    if unknown:
        parts.append(f"unknown keys {sorted(unknown)}; allowed: {sorted(fields)}")
    if missing:
        parts.append(f"missing keys {sorted(missing)}")
    return "; ".join(parts + wrong) or "invalid request"
