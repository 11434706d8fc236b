"""The suite's xdist scheduling (tests/tools/scheduling.py): the two longest modules are split
into parts that different workers run, the parts come first and in turns, and every test is
sent exactly once. Driven through pytest-xdist's own LoadScopeScheduling with stand-in nodes."""

from __future__ import annotations

import importlib.util
import pathlib
import types

TOOL = pathlib.Path(__file__).parent / "tools" / "scheduling.py"
_spec = importlib.util.spec_from_file_location("scheduling", TOOL)
scheduling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scheduling)

BROWSER, HEADLESS = "tests/test_browser.py", "tests/test_app_contract.py"
OTHER = "core/lm/attention_test.py"


def collection() -> list[str]:
    """Modules grouped, longest first, as conftest.py hands them to the scheduler."""
    browser = [f"{BROWSER}::test_home"]
    browser += [f"{BROWSER}::test_tour[app{i:02d}.py]" for i in range(10)]
    headless = [f"{HEADLESS}::test_headless[app{i:02d}.py]" for i in range(7)]
    return browser + headless + [f"{OTHER}::test_a", f"{OTHER}::test_b"]


def test_split_modules_are_dealt_round_robin_and_the_rest_stays_whole():
    scope_of = scheduling.scopes(collection())
    parts = scheduling.PARTS
    browser_scopes = [scope_of[n] for n in collection() if n.startswith(BROWSER)]
    assert browser_scopes[:5] == [f"{BROWSER}::part-{i % parts[BROWSER]}" for i in range(5)]
    assert len(set(browser_scopes)) == parts[BROWSER]
    sizes = [browser_scopes.count(scope) for scope in set(browser_scopes)]
    assert max(sizes) - min(sizes) <= 1, sizes
    assert {scope_of[f"{OTHER}::test_a"], scope_of[f"{OTHER}::test_b"]} == {OTHER}


def test_parts_come_first_in_turns_and_nothing_is_lost():
    items = [types.SimpleNamespace(nodeid=n) for n in collection()]
    order = [item.nodeid for item in scheduling.ordered(items)]
    assert sorted(order) == sorted(collection())
    scope_of = scheduling.scopes(collection())
    first_scopes = list(dict.fromkeys(scope_of[n] for n in order))
    assert first_scopes[:4] == [
        f"{BROWSER}::part-0",
        f"{HEADLESS}::part-0",
        f"{BROWSER}::part-1",
        f"{HEADLESS}::part-1",
    ]
    assert first_scopes[-1] == OTHER
    # Within a part, the module's own order is kept.
    part0 = [n for n in order if scope_of[n] == f"{BROWSER}::part-0"]
    assert part0 == [n for n in collection() if scope_of[n] == f"{BROWSER}::part-0"]


class StandInNode:
    """What the scheduler asks of a worker: run these test indexes, or shut down."""

    def __init__(self, name: str):
        self.name, self.sent, self.done, self.shutting_down = name, [], 0, False
        self.gateway = types.SimpleNamespace(id=name)

    def send_runtest_some(self, indexes):
        self.sent.extend(indexes)

    def shutdown(self):
        self.shutting_down = True


def test_xdist_sends_each_worker_whole_parts_and_every_test_once():
    config = types.SimpleNamespace(
        getvalue=lambda name: ["2*popen"] if name == "tx" else None,
        option=types.SimpleNamespace(loadscopereorder=False),
    )
    scheduler = scheduling.make_scheduler(config, None)
    nodes = [StandInNode("gw0"), StandInNode("gw1")]
    order = [item.nodeid for item in scheduling.ordered(
        [types.SimpleNamespace(nodeid=n) for n in collection()]
    )]  # fmt: skip
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, order)
    scheduler.schedule()
    first = {node.name: order[node.sent[0]] for node in nodes}
    assert first["gw0"].startswith(BROWSER) and first["gw1"].startswith(HEADLESS), first
    while any(node.done < len(node.sent) for node in nodes):  # each worker runs its tests
        for node in nodes:
            if node.done < len(node.sent):
                scheduler.mark_test_complete(node, node.sent[node.done])
                node.done += 1
    assert not scheduler.workqueue and all(node.shutting_down for node in nodes)
    sent = [order[i] for node in nodes for i in node.sent]
    assert sorted(sent) == sorted(order), "every test sent to exactly one worker, once"
    scope_of = scheduling.scopes(order)
    held = [{scope_of[order[i]] for i in node.sent} for node in nodes]
    assert not held[0] & held[1], "a part is never divided between workers"
    assert any(scope.endswith("part-1") for scope in held[0] | held[1])
