"""Exercises of the phase "Performance diagnosis"."""

from __future__ import annotations

from core.assessment.items import Item

PHASE = "Performance diagnosis"

ITEMS: tuple[Item, ...] = ()
