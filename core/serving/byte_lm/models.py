"""The byte LM service's request and response models (strict pydantic, bounded by the exported
shapes) and its wording of the validation errors only it knows (lm_wording)."""

from typing import Annotated, Literal

import pydantic
import pydantic_core

from core.lm import tokenizer
from core.serving.http import Strict, short

TOP_K = 5
MAX_TEMPERATURE = 100.0
MAX_SEED = 2**32 - 1
SESSION_ID = r"^[0-9a-f]{32}$"  # secrets.token_hex(16)
PRECISIONS = ("fp32", "bf16", "int8")  # the KV cache precisions an artifact may export
Precision = Literal[PRECISIONS]
Token = Annotated[int, pydantic.Field(ge=0, le=tokenizer.VOCAB_SIZE - 1)]


# --- request and response models ------------------------------------------------------------


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


def lm_wording(kind: str, loc: list[str], value, error: dict) -> str | None:
    """The byte LM's own wording of a validation error (core.serving.http.describe_errors
    words the rest): the prompt's source and length, token values, session ids."""
    if not loc and kind == "prompt_source":
        return error["msg"]
    if not loc:
        return None
    if loc[0] in ("prompt", "tokens") and kind in ("too_short", "string_too_short"):
        return "the prompt must hold at least one byte"
    if loc[0] in ("prompt", "tokens") and kind in ("too_long", "string_too_long"):
        unit = "characters" if loc[0] == "prompt" else "tokens"
        return f"prompt has {len(value)} {unit}; at most prefill_len={error['ctx']['max_length']}"
    if loc[0] == "tokens" and len(loc) == 2 and kind != "string_unicode":
        top = tokenizer.VOCAB_SIZE - 1
        return f"each token must be an integer in [0, {top}], got {short(value)}"
    if loc[0] == "session" and kind == "string_pattern_mismatch":
        return f"unknown session {short(value)} (/prefill returns 32 lowercase hex digits)"
    return None
