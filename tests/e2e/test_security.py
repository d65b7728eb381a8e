"""HTTP serving that can face a network, end to end against `tally serve` on 127.0.0.1: bearer
tokens (from a file and from the environment, never the command line), dataset scopes, Origin
and Host checks, body size, rate and concurrency limits, and the audit log. Requests come from
the test (httpx2) and from the official Python SDK client, with and without a token."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import HttpServer, datasets_dir, requests_in_flight, tally_bin

pytestmark = pytest.mark.anyio

TIMEOUT = 60
ADMIN = "admin-token-0123456789abcdef"
GUIDE_ONLY = "guide-only-token-0123456789"
ENV_TOKEN = "env-token-abcdefghijklmnop"
WASM = Path(os.environ.get("TALLY_WASM_DIR", ""))

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(
        f"# id token [datasets]\nadmin {ADMIN}\nguide {GUIDE_ONLY} guide\n",
        encoding="utf-8",
    )
    return path


def client(server, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=TIMEOUT)
    return Client(streamable_http_client(server.url, http_client=http), mode="legacy", cache=None, read_timeout_seconds=TIMEOUT)


def body(result) -> dict:
    return json.loads(result.content[0].text)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secured")
    audit = tmp / "audit.jsonl"
    server = HttpServer("--token-file", str(token_file(tmp)), "--audit-log", str(audit), "--max-body-bytes", "4096")
    server.audit = audit
    yield server
    server.stop()


def test_requests_without_a_valid_token_get_401(secured):
    r = httpx2.post(secured.url, json=INIT, headers=ACCEPT)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "needs a bearer token" in r.json()["error"]["message"]
    r = httpx2.post(secured.url, json=INIT, headers={**ACCEPT, "Authorization": "Bearer not-the-token-at-all"})
    assert r.status_code == 401
    assert 'error="invalid_token"' in r.headers["www-authenticate"]
    r = httpx2.post(secured.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200
    # Health stays open (it says how many datasets there are, nothing more).
    assert httpx2.get(secured.base + "/health").status_code == 200


async def test_the_sdk_client_with_and_without_a_token(secured):
    with anyio.fail_after(TIMEOUT):
        async with client(secured, ADMIN) as c:
            data = body(await c.call_tool("list_datasets", {}))["data"]
            assert {"guide", "procedures"} <= {d["dataset_id"] for d in data["datasets"]}
        with pytest.raises(Exception) as refused:
            async with client(secured) as c:
                await c.list_tools()
        print("without a token the SDK says:", repr(refused.value)[:200])


async def test_a_scoped_token_sees_only_its_datasets(secured):
    with anyio.fail_after(TIMEOUT):
        async with client(secured, GUIDE_ONLY) as c:
            data = body(await c.call_tool("list_datasets", {}))["data"]
            assert [d["dataset_id"] for d in data["datasets"]] == ["guide"]
            hidden = await c.call_tool("summarize_records", {"dataset_id": "procedures"})
            missing = await c.call_tool("summarize_records", {"dataset_id": "nonexistent"})
            assert hidden.is_error and missing.is_error
            h, m = body(hidden)["error"], body(missing)["error"]
            assert h["code"] == m["code"] == "unknown_dataset"
            assert h["message"] == m["message"].replace("nonexistent", "procedures")
            assert "procedures" not in json.dumps(h, ensure_ascii=False).replace("`procedures`", "")
            resources = (await c.list_resources()).resources
            assert [r.name for r in resources] == ["guide"]


def test_origin_and_host_are_checked(secured):
    auth = {**ACCEPT, "Authorization": f"Bearer {ADMIN}"}
    r = httpx2.post(secured.url, json=INIT, headers={**auth, "Origin": "https://evil.example"})
    assert r.status_code == 403 and "origin" in r.json()["error"]["message"]
    r = httpx2.post(secured.url, json=INIT, headers={**auth, "Origin": f"http://127.0.0.1:{secured.port}"})
    assert r.status_code == 200
    r = httpx2.post(secured.url, json=INIT, headers={**auth, "Host": "evil.example"})
    assert r.status_code == 403 and "Host" in r.json()["error"]["message"]


def test_a_large_body_is_refused(secured):
    big = {**INIT, "params": {**INIT["params"], "padding": "x" * 10_000}}
    r = httpx2.post(secured.url, json=big, headers={**ACCEPT, "Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 413


def test_the_audit_log_has_one_line_per_call_and_no_token(secured):
    async def calls():
        async with client(secured, ADMIN) as c:
            await c.call_tool("list_datasets", {})
            await c.call_tool("summarize_records", {"dataset_id": "procedures", "group_by": ["手続類型"]})
            await c.call_tool("query_records", {"dataset_id": "no-such-dataset"})

    before = secured.audit.read_text(encoding="utf-8").splitlines() if secured.audit.exists() else []
    anyio.run(calls)
    lines = [json.loads(line) for line in secured.audit.read_text(encoding="utf-8").splitlines()[len(before):]]
    print(json.dumps(lines, ensure_ascii=False, indent=1))
    assert [(l["tool"], l["outcome"]) for l in lines] == [
        ("list_datasets", "ok"),
        ("summarize_records", "ok"),
        ("query_records", "unknown_dataset"),
    ]
    for l in lines:
        assert set(l) == {"time", "caller", "request", "tool", "dataset", "arguments_sha256", "outcome", "duration_ms", "rows"}
        assert l["caller"] == "admin" and len(l["arguments_sha256"]) == 64
    assert lines[1]["dataset"] == "procedures" and lines[1]["rows"] >= 6
    text = secured.audit.read_text(encoding="utf-8")
    assert ADMIN not in text and GUIDE_ONLY not in text


def test_rate_limit_answers_429_with_retry_after(tmp_path):
    server = HttpServer("--token-file", str(token_file(tmp_path)), "--rate-limit", "0.5", "--rate-burst", "2")
    try:
        auth = {**ACCEPT, "Authorization": f"Bearer {ADMIN}"}
        codes = [httpx2.post(server.url, json=INIT, headers=auth) for _ in range(3)]
        assert [r.status_code for r in codes] == [200, 200, 429]
        assert int(codes[2].headers["retry-after"]) >= 1
        # Another token has a bucket of its own.
        r = httpx2.post(server.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {GUIDE_ONLY}"})
        assert r.status_code == 200
    finally:
        server.stop()


async def test_concurrent_calls_per_token_are_capped(tmp_path):
    hostile = WASM / "tally_test_plugin_hostile.wasm"
    if not hostile.is_file():
        pytest.skip("TALLY_WASM_DIR has no hostile plugin (the cargo test wrapper sets it)")
    slow = tmp_path / "datasets" / "slow"
    slow.mkdir(parents=True)
    shutil.copyfile(hostile, slow / "plugin.wasm")
    (slow / "dataset.yaml").write_text(
        "title: slow\nbackend: {kind: wasm, component: plugin.wasm, config: {mode: slow, millis: 2000}}\n"
        # Two of the plugin's three columns: its reads scan (2 s) instead of taking the rows of
        # the registration's probe read, so the call is in flight.
        "fields:\n- {name: name, role: dim}\n- {name: n, role: attr, data_type: integer}\n",
        encoding="utf-8",
    )
    server = HttpServer("--token-file", str(token_file(tmp_path)), "--max-concurrent", "1", datasets=str(tmp_path / "datasets"))
    try:
        with anyio.fail_after(TIMEOUT):
            async with client(server, ADMIN) as c:
                done = {}

                async def slow_call():
                    done["r"] = await c.call_tool("query_records", {"dataset_id": "slow"})

                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow_call)
                    await requests_in_flight(server)
                    async with httpx2.AsyncClient() as h:
                        r = await h.post(server.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {ADMIN}"})
                    assert r.status_code == 429 and r.headers["retry-after"] == "1"
                    assert "in flight" in r.json()["error"]["message"]
                assert not done["r"].is_error
                r = httpx2.post(server.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {ADMIN}"})
                assert r.status_code == 200
    finally:
        server.stop()


async def test_without_tokens_one_session_cannot_take_every_slot():
    """Regression (issue 54, "first come holds the slots"): without tokens every local client
    is one address, and all of them shared `--max-concurrent` requests in flight: one client
    whose calls wait (here for its user's answer) locked every other local client out. Each
    session now has its own share, within the server-wide `--max-in-flight`, and a message
    that only answers the server (the user's answer those calls wait for) still gets through
    when they hold every place."""
    import mcp.types as types

    server = HttpServer("--max-concurrent", "2")
    release = anyio.Event()
    asked = []

    async def slow_user(context, params):
        asked.append(params)
        await release.wait()
        return types.ElicitResult(action="decline")

    ambiguous = {"dataset_id": "procedures", "group_by": ["手続が行われるイベント"], "limit": 3}
    try:
        with anyio.fail_after(TIMEOUT):
            sessions = []

            async def remember_session(response):
                if response.headers.get("mcp-session-id"):
                    sessions.append(response.headers["mcp-session-id"])

            http = httpx2.AsyncClient(timeout=TIMEOUT, event_hooks={"response": [remember_session]})
            holder = Client(streamable_http_client(server.url, http_client=http), mode="legacy", cache=None,
                            read_timeout_seconds=TIMEOUT, elicitation_callback=slow_user)
            async with holder as a:
                async with anyio.create_task_group() as tg:
                    for _ in range(2):
                        tg.start_soon(a.call_tool, "summarize_records", ambiguous)
                    while len(asked) < 2:
                        await anyio.sleep(0.05)
                    # Both of the first session's slots are held; another local client's session
                    # starts and calls.
                    async with client(server) as b:
                        listed = await b.call_tool("list_datasets", {})
                        assert not listed.is_error, listed
                    # The first session's own third request is past its share, and says which.
                    async with httpx2.AsyncClient(timeout=TIMEOUT) as h:
                        r = await h.post(server.url, json={"jsonrpc": "2.0", "id": 99, "method": "ping"},
                                         headers={**ACCEPT, "Mcp-Session-Id": sessions[0], "Mcp-Protocol-Version": "2025-11-25"})
                    assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
                    message = r.json()["error"]["message"]
                    assert "this session already has 2 requests in flight" in message and "--max-concurrent" in message, message
                    assert "frees when one of them is answered" in message, message
                    # The user's answers get through although the calls waiting for them hold
                    # every place of the session, and the calls end.
                    release.set()
    finally:
        server.stop()


def test_a_token_from_the_environment_and_a_non_loopback_bind(tmp_path):
    r = subprocess.run([tally_bin(), "serve", "--http", "0.0.0.0:0", "--datasets", datasets_dir()], capture_output=True, text=True, timeout=30)
    # Exit code 5: the setup is refused (see README, exit codes).
    assert r.returncode == 5 and "--token-file" in r.stderr
    r = subprocess.run(
        [tally_bin(), "serve", "--http", "127.0.0.1:0", "--token-env", "TALLY_TEST_TOKEN_UNSET", "--datasets", datasets_dir()],
        capture_output=True, text=True, timeout=30,
    )
    assert r.returncode == 5 and "TALLY_TEST_TOKEN_UNSET is not set" in r.stderr
    os.environ["TALLY_TEST_TOKEN"] = ENV_TOKEN
    try:
        server = HttpServer("--token-env", "TALLY_TEST_TOKEN")
    finally:
        del os.environ["TALLY_TEST_TOKEN"]
    try:
        r = httpx2.post(server.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {ENV_TOKEN}"})
        assert r.status_code == 200
        r = httpx2.post(server.url, json=INIT, headers=ACCEPT)
        assert r.status_code == 401
    finally:
        server.stop()
