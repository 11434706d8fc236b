"""TPU prices as dated, editable inputs with their source, and cost per million tokens.

The prices live in ``core/tpu/prices.json`` (a document validated by :class:`PriceTable`): each
figure carries its generation, tier (on-demand, spot, committed-1y, committed-3y), region, unit
(USD per chip-hour), the date it was read and the URL it was read at. A figure no source gave
is absent, never guessed: the cost table says "no cited price" there.

Cost per million tokens on one chip, from the chip's peak (core/tpu/specs.py) and a stated
model FLOP utilization (MFU):

    tokens/s per chip = MFU * peak FLOP/s / FLOPs per token
    FLOPs per token   = 6 * parameters (training: forward 2N + backward 4N)
    USD per Mtok      = USD per chip-hour / (tokens/s * 3600 s/h) * 1e6

A slice of n chips runs n times the tokens for n times the price, so the cost per token does
not depend on the slice size (at the same MFU); the hourly bill does.
"""

from __future__ import annotations

import datetime
import pathlib
from typing import Literal

import pydantic

from core import documents
from core.tpu import specs

PRICES_JSON = pathlib.Path(__file__).with_name("prices.json")
TIERS = ("on-demand", "spot", "committed-1y", "committed-3y")
Tier = Literal["on-demand", "spot", "committed-1y", "committed-3y"]
TRAINING_FLOPS_PER_PARAM = 6.0  # forward 2 FLOPs per parameter per token, backward 4
SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MTOK = 1e6


def _date(value: str) -> str:
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"is not a date (YYYY-MM-DD): {value!r}") from None
    return value


class Price(documents.Document):
    """One price: USD per chip-hour of ``generation`` at ``tier`` in ``region``, with its source."""

    generation: Literal["v5e", "v5p", "v6e", "tpu7x"]
    tier: Tier
    region: str = pydantic.Field(pattern=r"^[a-z]+-[a-z]+[0-9]+$")
    usd_per_chip_hour: float = pydantic.Field(gt=0)
    retrieved: str
    source: str = pydantic.Field(pattern=r"^https://\S+$")
    note: str = ""

    @pydantic.field_validator("retrieved")
    @classmethod
    def _retrieved(cls, value: str) -> str:
        return _date(value)


class PriceTable(documents.Document):
    """The prices file: currency, unit, a note on what is missing, the prices."""

    currency: Literal["USD"]
    unit: Literal["USD per chip-hour"]
    note: str = ""
    prices: list[Price]

    @pydantic.model_validator(mode="after")
    def _unique(self) -> PriceTable:
        seen = set()
        for p in self.prices:
            key = (p.generation, p.tier, p.region)
            if key in seen:
                raise ValueError(f"two prices for {key}")
            seen.add(key)
        return self


def load(path: str | pathlib.Path = PRICES_JSON) -> PriceTable:
    """The validated price table (ValueError naming the bad field)."""
    document = documents.load(path, PriceTable, "TPU price table")
    return PriceTable.model_validate(document)


def lookup(table: PriceTable, generation: str, tier: str) -> Price | None:
    """The price of ``generation`` at ``tier`` (the first region listed), or None."""
    for price in table.prices:
        if price.generation == generation and price.tier == tier:
            return price
    return None


def with_price(table: PriceTable, price: Price) -> PriceTable:
    """A copy of ``table`` where ``price`` replaces the one of its generation and tier."""
    kept = [p for p in table.prices if (p.generation, p.tier) != (price.generation, price.tier)]
    return table.model_copy(update={"prices": [*kept, price]})


def training_flops_per_token(parameters: float) -> float:
    """6 N: the FLOPs a training step spends per token of a dense N-parameter model."""
    if parameters <= 0:
        raise ValueError(f"parameters must be positive, got {parameters}")
    return TRAINING_FLOPS_PER_PARAM * parameters


def tokens_per_second(peak_flops: float, mfu: float, flops_per_token: float) -> float:
    """Tokens per second per chip at model FLOP utilization ``mfu`` (0 < mfu <= 1)."""
    if not 0 < mfu <= 1:
        raise ValueError(f"MFU must be in (0, 1], got {mfu}")
    if peak_flops <= 0 or flops_per_token <= 0:
        raise ValueError("peak FLOP/s and FLOPs per token must be positive")
    return mfu * peak_flops / flops_per_token


def usd_per_mtok(usd_per_chip_hour: float, tokens_per_s: float) -> float:
    """USD per million tokens on one chip: price / (tokens/s * 3600) * 1e6."""
    if usd_per_chip_hour <= 0 or tokens_per_s <= 0:
        raise ValueError("price and tokens/s must be positive")
    return usd_per_chip_hour / (tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_MTOK


def cost_rows(table: PriceTable, mfu: float, parameters: float, chips: int = 1) -> list[dict]:
    """One row per generation and tier: tokens/s per chip, USD per Mtok, USD per slice-hour.

    A tier without a cited price reads None in the cost columns and says so in "source".
    """
    if chips < 1:
        raise ValueError(f"chips must be >= 1, got {chips}")
    if chips > max(specs.chip(g).max_slice_chips for g in specs.GENERATIONS):
        raise ValueError(f"chips must be at most the largest slice of any generation, got {chips}")
    per_token = training_flops_per_token(parameters)
    rows = []
    for generation in specs.GENERATIONS:
        peak = specs.chip(generation).bf16_flops.value
        # a slice larger than the generation's largest has no hourly bill (specs.py's limit)
        too_big = chips > specs.chip(generation).max_slice_chips
        rate = tokens_per_second(peak, mfu, per_token)
        for tier in TIERS:
            price = lookup(table, generation, tier)
            rows.append(
                {
                    "generation": generation,
                    "tier": tier,
                    "tokens/s per chip": rate,
                    "USD per chip-hour": price.usd_per_chip_hour if price else None,
                    "USD per Mtok": usd_per_mtok(price.usd_per_chip_hour, rate) if price else None,
                    f"USD per hour, {chips} chips": (
                        price.usd_per_chip_hour * chips if price and not too_big else None
                    ),
                    "slice": (
                        f"over {generation}'s largest slice "
                        f"({specs.chip(generation).max_slice_chips} chips)"
                        if too_big
                        else "fits"
                    ),
                    "region": price.region if price else "",
                    "retrieved": price.retrieved if price else "",
                    "source": price.source if price else "no cited price (left out)",
                }
            )
    return rows
