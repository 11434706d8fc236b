"""How the suite's tests are ordered and grouped for pytest-xdist's `--dist loadscope`.

loadscope sends a worker whole scopes (one module each, by default), so a module's expensive
fixtures (a served gallery and a browser, a reference training run) are built once per worker.
Two modules are each a third of the suite or more: the browser tour of every app and every
app's headless run. As single scopes each one is a critical path no second worker can share.
Here such a module is split into PARTS scopes, its tests dealt round robin in sorted order (so
each part holds a share of the module's apps, in alphabetical order); a worker running a part
builds the module's fixtures for itself. The rest stays one scope per module.

Order: conftest.py sorts modules longest first (tests/module_seconds.json); the parts of the
split modules come first, taken in turns (browser part 0, headless part 0, browser part 1...),
so two workers start on different kinds of work rather than two browsers at once. xdist makes
its queue of scopes in the order the items arrive (Makefile: --no-loadscope-reorder).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# Module -> number of scopes, from the fresh-clone run of 2026-12-07 (2 workers): the browser
# tour 1,935 s of worker time, the headless runs 1,011 s; a part of either is then about the
# size of the next longest module (the refusals, 292 s) or a few of them.
PARTS = {
    "tests/test_browser.py": 4,
    "tests/test_app_contract.py": 3,
}


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def part_scope(module: str, part: int) -> str:
    return f"{module}::part-{part}"


def scopes(nodeids: Iterable[str]) -> dict[str, str]:
    """Each node id's scope: its module, or its module's part for a module in PARTS.

    A split module's tests are dealt to its parts by their rank in sorted node-id order, so
    the same test lands in the same part whatever order the ids arrive in (conftest.py deals
    the collection, xdist deals the reordered one: both must agree)."""
    nodeids = list(nodeids)
    by_module: dict[str, list[str]] = {}
    for nodeid in nodeids:
        by_module.setdefault(module_of(nodeid), []).append(nodeid)
    assigned = {}
    for module, members in by_module.items():
        for rank, nodeid in enumerate(sorted(members)):
            assigned[nodeid] = (
                part_scope(module, rank % PARTS[module]) if module in PARTS else module
            )
    return {nodeid: assigned[nodeid] for nodeid in nodeids}


def ordered(items: list, nodeid: Callable = lambda item: item.nodeid) -> list:
    """``items`` (already grouped by module, longest first) with the split modules' parts
    first, in turns; every other module keeps its place, after them."""
    scope_of = scopes(nodeid(item) for item in items)
    parts: dict[str, list] = {}
    rest = []
    for item in items:
        scope = scope_of[nodeid(item)]
        (parts.setdefault(scope, []) if module_of(scope) != scope else rest).append(item)
    turns = []
    for part in range(max(PARTS.values(), default=0)):
        for module in PARTS:
            turns.extend(parts.get(part_scope(module, part), []))
    return turns + rest


def make_scheduler(config, log):
    """A LoadScopeScheduling whose scope of a test is ``scopes``' (pytest_xdist_make_scheduler)."""
    from xdist.scheduler import LoadScopeScheduling

    class SplitLoadScopeScheduling(LoadScopeScheduling):
        def schedule(self) -> None:
            if self.collection is None and self.collection_is_completed:
                collection = next(iter(self.registered_collections.values()), [])
                self._scopes = scopes(collection)
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return getattr(self, "_scopes", {}).get(nodeid) or super()._split_scope(nodeid)

    return SplitLoadScopeScheduling(config, log)
