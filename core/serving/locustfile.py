"""The locust load for the predict service (run by core.serving.load in its own process).

Each simulated user POSTs /predict in a closed loop (no think time: a user sends its next
request when the last one returned), ``LAB_LOAD_ROWS`` rows of 64 pixel intensities drawn in
[0, 16] from a per-user seeded generator. A response other than 200 with one label per row is
a failure. Every request's exact response time (ms) and HTTP status (0: no response) are kept
and written, when locust quits, as JSON to ``LAB_LOAD_RECORD`` (locust's own summary rounds
response times into buckets). Only locust and the standard library are imported here.
"""

import json
import os
import random

from locust import FastHttpUser, constant, events, task

ROWS = int(os.environ.get("LAB_LOAD_ROWS", "1"))
SEED = int(os.environ.get("LAB_LOAD_SEED", "0"))
RECORD = os.environ.get("LAB_LOAD_RECORD", "")
FEATURES, LOW, HIGH = 64, 0.0, 16.0
TIMES_MS: list[float] = []
STATUSES: list[int] = []
USERS = [0]


@events.request.add_listener
def _record(response_time, response=None, exception=None, **_):
    TIMES_MS.append(float(response_time))
    STATUSES.append(int(getattr(response, "status_code", 0) or 0))


@events.quitting.add_listener
def _write(environment, **_):
    if RECORD:
        with open(RECORD, "w", encoding="utf-8") as f:
            json.dump({"times_ms": TIMES_MS, "statuses": STATUSES, "rows": ROWS}, f)


class PredictUser(FastHttpUser):
    wait_time = constant(0)

    def on_start(self):
        USERS[0] += 1
        self.rng = random.Random(SEED * 100_003 + USERS[0])

    @task
    def predict(self):
        inputs = [[self.rng.uniform(LOW, HIGH) for _ in range(FEATURES)] for _ in range(ROWS)]
        with self.client.post(
            "/predict", json={"inputs": inputs}, catch_response=True, name="/predict"
        ) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}")
                return
            try:
                labels = response.json()["labels"]
            except (ValueError, KeyError, TypeError):
                response.failure("not a prediction")
                return
            if len(labels) != ROWS:
                response.failure(f"{len(labels)} labels for {ROWS} rows")
