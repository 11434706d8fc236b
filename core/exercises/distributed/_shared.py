"""What the lessons of the phase "Distributed training" share: the phase title and the size
of a float32."""

from __future__ import annotations

PHASE = "Distributed training"
FLOAT32_BYTES = 4
