"""A job's structured event log: one JSON object per line, appended and flushed as it happens.

Every event has ``ts`` (wall clock, seconds since the epoch, float), ``job`` (the job id) and
``event`` (its kind: "queued", "running", "step", "heartbeat", "save", "committed",
"preempted", "failed", "succeeded", ... ); the rest are the kind's own fields (``step``,
``loss``, ``step_time_s``, ``tokens``, ``cause``). A parent can tail the file while the job
runs: a line cut short by a kill is skipped on read, never an error.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
from collections.abc import Iterator
from typing import IO, Any

REQUIRED = ("ts", "job", "event")


def _json_value(value: Any) -> Any:
    """JSON has no NaN/inf: a non-finite float is written as its name ("nan", "inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _ends_mid_line(path: pathlib.Path) -> bool:
    """Whether the file's last byte is not a newline (a write cut short by a kill)."""
    with open(path, "rb") as file:
        if file.seek(0, os.SEEK_END) == 0:
            return False
        file.seek(-1, os.SEEK_END)
        return file.read(1) != b"\n"


class EventLog:
    """Appends events to ``path`` (and echoes them to ``echo``, e.g. sys.stdout, if given).

    Each line is written with one ``write`` and flushed, so a reader never sees half an event
    unless the process was killed inside that write (the reader skips such a line). Opening a
    log whose last line was cut that way ends that line first, so the next event starts a line
    of its own (a resumed job appends to the log of the run it resumes).
    """

    def __init__(self, path: str | os.PathLike, job: str, echo: IO[str] | None = None):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.job = job
        self.echo = echo
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        if _ends_mid_line(self.path):
            self._file.write("\n")
            self._file.flush()

    def emit(self, event: str, **fields: Any) -> dict:
        """Write one event now; returns it as written."""
        record = {"ts": time.time(), "job": self.job, "event": event}
        record.update({key: _json_value(value) for key, value in fields.items()})
        line = json.dumps(record, allow_nan=False) + "\n"
        self._file.write(line)
        self._file.flush()
        if self.echo is not None:
            self.echo.write(line)
            self.echo.flush()
        return record

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parse_line(line: str) -> dict | None:
    """The event on one line, or None for a line that is not a complete event."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None  # cut short by a kill
    if not isinstance(record, dict) or any(key not in record for key in REQUIRED):
        return None
    return record


def read_events(path: str | os.PathLike) -> list[dict]:
    """Every complete event in the file, in order ([] if the file does not exist yet)."""
    path = pathlib.Path(path)
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as file:
        return [record for line in file if (record := parse_line(line)) is not None]


class Tail:
    """Reads the events appended to a log since the last call (for a parent watching a job)."""

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        self._offset = 0
        self._partial = ""

    def new_events(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as file:
            file.seek(self._offset)
            chunk = file.read()
            self._offset = file.tell()
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()  # an unfinished last line waits for its newline
        return [record for line in lines if (record := parse_line(line)) is not None]

    def __iter__(self) -> Iterator[dict]:
        return iter(self.new_events())
