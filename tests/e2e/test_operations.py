"""Running Tally as a service (issue 56): `/metrics` read by a real OpenMetrics parser while a
scripted load runs (every tool, a refusal, a cancel, a reload), the
counters moved by exactly what the script did; `/metrics` only for this machine or its own
token; `/ready` apart from `/health`; a drain on SIGTERM that lets the calls in flight finish,
answers new ones 503, ends the event streams and exits 0 with every call in the audit log; a
second signal exits at once; SIGHUP scans the datasets again."""

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import HttpServer, ROOT, datasets_dir, requests_in_flight, wait_for

pytestmark = pytest.mark.anyio

TIMEOUT = 120
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# A summary grouping the ten-fold table by a field with a value per record, on a server
# without the cache: its first call prepares 750k records, long enough to be cancelled, to
# pass a short deadline, or to be in flight when the server is told to stop.
SLOW = {"dataset_id": "big", "group_by": ["手続名"], "limit": 5}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The default datasets, a law and references to it (test_oauth.py's), and the default
    survey ten times over as `big`."""
    import duckdb

    from test_oauth import datasets_with_a_law

    root = datasets_with_a_law(tmp_path_factory.mktemp("operations") / "datasets")
    (root / "big").mkdir()
    source = root / "procedures"
    shutil.copyfile(source / "dataset.yaml", root / "big" / "dataset.yaml")
    duckdb.connect().execute(
        f"COPY (SELECT p.* FROM read_parquet('{source / 'data.parquet'}') p, range(10))"
        f" TO '{root / 'big' / 'data.parquet'}' (FORMAT parquet)"
    )
    return root


def scrape(server: HttpServer, **kwargs) -> dict:
    """`/metrics` parsed by prometheus_client's OpenMetrics parser: {(name, labels): value}."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    r = httpx2.get(server.base + "/metrics", timeout=30, **kwargs)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/openmetrics-text"), r.headers
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def client(server: HttpServer, mode: str = "legacy"):
    http = httpx2.AsyncClient(timeout=TIMEOUT)
    return Client(streamable_http_client(server.url, http_client=http), mode=mode, cache=None, read_timeout_seconds=TIMEOUT)


CALLS = {
    "list_datasets": {},
    "inspect_dataset": {"dataset_id": "guide"},
    "query_records": {"dataset_id": "procedures", "limit": 2},
    "summarize_records": {"dataset_id": "procedures", "group_by": ["手続類型"]},
    "cite_provisions": {"dataset_id": "refs"},
}


async def test_metrics_count_what_a_scripted_load_did(datasets, tmp_path):
    server = HttpServer(
        "--no-cache", "--watch", "poll", "--poll-interval-ms", "200",
        datasets=str(datasets),
    )
    try:
        before = scrape(server)
        with anyio.fail_after(TIMEOUT):
            async with client(server) as c:
                answered = {}
                for tool, arguments in CALLS.items():
                    r = await c.call_tool(tool, arguments)
                    answered[tool] = not r.is_error
                envelope = (await c.call_tool("summarize_records", CALLS["summarize_records"])).structured_content
                r = await c.call_tool("verify_answer", {"envelope": envelope})
                answered["verify_answer"] = not r.is_error
                refused = await c.call_tool("summarize_records", {"dataset_id": "no-such-dataset"})
                assert refused.is_error
                # A call its client gives up on (notifications/cancelled): the first call on
                # the 750k records, which prepares them.
                with anyio.move_on_after(0.3) as scope:
                    await c.call_tool("summarize_records", SLOW)
                assert scope.cancelled_caught, "the call ended before it could be cancelled"

                # Within the session: leaving it at once could end it before the client's
                # notifications/cancelled is sent.
                async def cancelled_counted():
                    return value(scrape(server), "tally_tool_calls_total", tool="summarize_records", outcome="cancelled") == 1

                await wait_for("the cancel counted", cancelled_counted)
        # A reload: the guide's title changed on disk.
        guide = datasets / "guide" / "dataset.yaml"
        guide.write_text(guide.read_text(encoding="utf-8").replace("title: Tally guide", "title: Tally guide (v2)"), encoding="utf-8")

        async def reloaded():
            return value(scrape(server), "tally_catalog_reloads_total") >= value(before, "tally_catalog_reloads_total") + 1

        await wait_for("the reload counted", reloaded)

        after = scrape(server)
        moved = lambda name, **labels: value(after, name, **labels) - value(before, name, **labels)
        assert answered == {t: True for t in [*CALLS, "verify_answer"]}, answered
        for tool in CALLS:
            expected = 2 if tool == "summarize_records" else 1
            assert moved("tally_tool_calls_total", tool=tool, outcome="answered") == expected, tool
            assert moved("tally_tool_call_duration_seconds_count", tool=tool) >= expected, tool
        assert moved("tally_tool_calls_total", tool="verify_answer", outcome="answered") == 1
        assert moved("tally_tool_calls_total", tool="summarize_records", outcome="refused", code="unknown_dataset") == 1
        assert moved("tally_tool_calls_total", tool="summarize_records", outcome="cancelled") == 1
        assert moved("tally_catalog_reloads_total") == 1
        assert value(after, "tally_datasets", state="served") == 5
        assert value(after, "tally_datasets", state="broken") == 0
        assert moved("tally_http_responses_total", path="mcp", status="2xx") >= 10
        assert moved("tally_http_response_bytes_total") > 0
        assert value(after, "tally_memory_budget_bytes") > 0
        assert value(after, "tally_draining") == 0
        for kind in ("memory", "deadline", "panic", "trap", "other"):
            assert ("tally_plugin_faults_total", (("kind", kind),)) in after, kind
        # No argument, value or caller ever becomes a label.
        text = httpx2.get(server.base + "/metrics").text
        for said in ("届出", "no-such-dataset", "手続名", "127.0.0.1"):
            assert said not in text, said
    finally:
        server.stop()


def test_metrics_need_their_own_token_when_one_is_set(datasets):
    token = "metrics-token-0123456789abcdef"
    server = HttpServer("--metrics-token-env", "TALLY_TEST_METRICS", datasets=str(datasets), env={"TALLY_TEST_METRICS": token})
    try:
        r = httpx2.get(server.base + "/metrics")
        assert r.status_code == 401 and "--metrics-token-env" in r.text, r.text
        assert httpx2.get(server.base + "/metrics", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
        assert scrape(server, headers={"Authorization": f"Bearer {token}"})
    finally:
        server.stop()


def post(server: HttpServer, message: dict, session: str | None = None, timeout: float = 60) -> httpx2.Response:
    headers = {**ACCEPT, "Mcp-Protocol-Version": "2025-11-25"}
    if session:
        headers["Mcp-Session-Id"] = session
    return httpx2.post(server.url, json={"jsonrpc": "2.0", **message}, headers=headers, timeout=timeout)


def open_session(server: HttpServer) -> str:
    r = post(server, {"id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "drain", "version": "1"}}})
    session = r.headers["mcp-session-id"]
    post(server, {"method": "notifications/initialized"}, session)
    return session


def answer_of(response: httpx2.Response) -> dict:
    for line in response.text.splitlines():
        if line.startswith("data:") and '"id"' in line:
            return json.loads(line[5:])
    return response.json()


def draining(server: HttpServer):
    """Waits until the server has taken its signal: `/ready` answers 503 while it drains."""
    deadline = time.monotonic() + 30
    while httpx2.get(server.base + "/ready", timeout=10).status_code != 503:
        assert time.monotonic() < deadline, "the server did not start draining"
        time.sleep(0.05)


def test_a_drain_lets_the_calls_in_flight_finish_and_exits_0(datasets, tmp_path):
    audit = tmp_path / "audit.jsonl"
    server = HttpServer("--no-cache", "--audit-log", str(audit), "--drain-grace-ms", "60000", datasets=str(datasets))
    assert httpx2.get(server.base + "/ready").json() == {"status": "ready"}
    session = open_session(server)
    # An open stream of server notifications (GET), which the drain must end cleanly.
    stream_ended = threading.Event()

    def listen():
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
        try:
            with httpx2.stream("GET", server.url, headers=headers, timeout=120) as r:
                for _ in r.iter_lines():
                    pass
        finally:
            stream_ended.set()

    threading.Thread(target=listen, daemon=True).start()
    answers: dict[int, dict] = {}

    def call(i: int):
        arguments = SLOW if i % 2 == 0 else {"dataset_id": "big", "q": "届出", "limit": 1}
        tool = "summarize_records" if i % 2 == 0 else "query_records"
        answers[i] = answer_of(post(server, {"id": i, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}, session, timeout=120))

    calls = [threading.Thread(target=call, args=(i,)) for i in range(1, 5)]
    for t in calls:
        t.start()
    # The four calls are in flight (the server counts them), so the drain has work to wait for.
    anyio.run(requests_in_flight, server, 4)
    assert all(t.is_alive() for t in calls), "a call ended before the signal; the drain would test nothing"
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    draining(server)
    refused = post(server, {"id": 9, "method": "tools/call", "params": {"name": "list_datasets", "arguments": {}}}, session)
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1, refused.text
    ready = httpx2.get(server.base + "/ready")
    assert ready.status_code == 503 and ready.json()["status"] == "not_ready", ready.text
    for t in calls:
        t.join(timeout=120)
    code = server.proc.wait(timeout=60)
    took = time.monotonic() - started
    assert code == 0, "".join(server.log)[-3000:]
    assert took < 60, took
    for i in range(1, 5):
        assert "result" in answers[i] and not answers[i]["result"].get("isError"), answers[i]
    assert stream_ended.wait(10), "the event stream was not ended"
    lines = [json.loads(line) for line in audit.read_text(encoding="utf-8").splitlines()]
    assert sorted(line["outcome"] for line in lines if line["tool"] in ("summarize_records", "query_records")) == ["ok"] * 4, lines
    print(f"drained 4 calls and exited 0 in {took:.1f} s")


def test_a_second_signal_exits_at_once(datasets):
    server = HttpServer("--no-cache", "--drain-grace-ms", "60000", datasets=str(datasets))
    session = open_session(server)
    def in_flight():
        # The server exits under it: the call's connection is cut, as a forced exit does.
        try:
            post(server, {"id": 1, "method": "tools/call", "params": {"name": "summarize_records", "arguments": SLOW}}, session, timeout=120)
        except httpx2.HTTPError:
            pass

    threading.Thread(target=in_flight, daemon=True).start()
    anyio.run(requests_in_flight, server, 1)
    server.proc.send_signal(signal.SIGTERM)
    draining(server)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(timeout=30)
    assert time.monotonic() - started < 5
    assert code != 0, "a forced exit is not a clean one"


def test_sighup_scans_the_datasets_again(datasets, tmp_path):
    root = tmp_path / "datasets"
    shutil.copytree(datasets_dir(), root)
    server = HttpServer("--watch", "off", datasets=str(root))
    try:
        guide = root / "guide" / "dataset.yaml"
        guide.write_text(guide.read_text(encoding="utf-8").replace("title: Tally guide", "title: Tally guide (hup)"), encoding="utf-8")
        time.sleep(0.5)
        titles = lambda: [d["title"] for d in json.loads(answer_of(post(server, {"id": 1, "method": "tools/call", "params": {"name": "list_datasets", "arguments": {}}}, open_session(server)))["result"]["content"][0]["text"])["data"]["datasets"]]
        assert "Tally guide (hup)" not in titles(), "--watch off saw the change by itself"
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "Tally guide (hup)" not in titles():
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.2)
    finally:
        server.stop()


async def test_json_logs_name_the_audit_logs_caller_and_request(datasets, tmp_path):
    """`--log-format json`: one JSON object a line, the tool call's line carrying the same
    `caller` and `request` as its audit line, so a log pipeline can join them."""
    audit = tmp_path / "audit.jsonl"
    server = HttpServer("--log-format", "json", "--audit-log", str(audit), datasets=str(datasets), env={"TALLY_LOG": "info"})
    try:
        with anyio.fail_after(TIMEOUT):
            async with client(server) as c:
                await c.call_tool("list_datasets", {})
        (line,) = [json.loads(l) for l in audit.read_text(encoding="utf-8").splitlines()]

        async def logged():
            calls = [json.loads(l) for l in list(server.log) if l.startswith("{") and '"tool call"' in l]
            return calls[0] if calls else None

        event = await wait_for("the tool call in the log", logged)
        assert event["caller"] == line["caller"] and event["request"] == line["request"], (event, line)
        assert event["tool"] == "list_datasets" and event["level"] == "INFO", event
        other = [l for l in list(server.log) if l.strip() and not l.startswith("{") and "serving MCP at" not in l]
        assert other == [], other[:5]
    finally:
        server.stop()


def serve_help_flags() -> set[str]:
    import re

    from conftest import tally_bin

    text = subprocess.run([tally_bin(), "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    return set(re.findall(r"^\s+(?:-\w, )?--([a-z][a-z0-9-]*)", text, re.MULTILINE)) - {"help", "config", "print-settings"}


def print_settings(*args: str, env: dict | None = None) -> dict[str, tuple[str, str]]:
    """`tally serve --print-settings`: {key: (value as written, where it came from)}."""
    from conftest import tally_bin

    r = subprocess.run(
        [tally_bin(), "serve", *args, "--print-settings"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines()[1:]:
        setting, _, comment = line.removeprefix("# ").partition("  # ")
        key, _, value = setting.partition(" = ")
        out[key] = (None if comment == "not set" else value, comment)
        # Only what was set is a setting of the printed file; defaults are commented out.
        assert line.startswith("# ") == (comment in ("default", "not set")), line
    return out


def test_every_flag_is_a_setting_and_the_printed_settings_are_a_settings_file(tmp_path):
    """Every flag of `tally serve --help` has a key; what --print-settings writes is a settings
    file that gives the same settings back."""
    first = print_settings("--datasets", datasets_dir(), "--rate-limit", "7", "--allow-host", "a.example", "--allow-host", "b.example", "--no-cache")
    assert serve_help_flags() <= set(first), serve_help_flags() - set(first)
    config = tmp_path / "tally.toml"
    from conftest import tally_bin

    printed = subprocess.run(
        [tally_bin(), "serve", "--datasets", datasets_dir(), "--rate-limit", "7", "--allow-host", "a.example", "--allow-host", "b.example", "--no-cache", "--print-settings"],
        capture_output=True, text=True, timeout=60,
    ).stdout
    config.write_text(printed, encoding="utf-8")
    again = print_settings("--config", str(config))
    for key, (value, _) in first.items():
        assert again[key][0] == value, (key, value, again[key])
    assert again["rate-limit"] == ("7", f"from {config}")
    assert again["allow-host"][0] == '["a.example", "b.example"]'
    assert again["no-cache"][0] == "true"


def test_the_file_then_the_environment_then_the_command_line(tmp_path):
    config = tmp_path / "tally.toml"
    config.write_text('rate-limit = 3\nrate-burst = 4\nmax-concurrent = 5\n[oauth]\nissuer = "https://id.example.org"\n', encoding="utf-8")
    got = print_settings("--config", str(config), "--max-concurrent", "9", env={"TALLY_RATE_BURST": "6", "TALLY_MAX_CONCURRENT": "8"})
    assert got["rate-limit"] == ("3", f"from {config}")
    assert got["rate-burst"] == ("6", "from $TALLY_RATE_BURST")
    assert got["max-concurrent"] == ("9", "from the command line")
    assert got["oauth-issuer"] == ('"https://id.example.org"', f"from {config}")
    # The file in TALLY_CONFIG is read as --config's.
    got = print_settings(env={"TALLY_CONFIG": str(config)})
    assert got["rate-limit"] == ("3", f"from {config}")


def test_a_mistyped_setting_is_refused_with_the_nearest_one(tmp_path):
    from conftest import tally_bin

    config = tmp_path / "tally.toml"
    for text, said in {
        "max-bdy-bytes = 4096\n": "did you mean `max-body-bytes`?",
        "[oauth]\nisuer = \"https://id.example\"\n": "did you mean `oauth-issuer`?",
        "allow-origin = \"https://a.example\"\nhttp = [1, 2]\n": "`http`: takes one value, not a list",
        "no-cache = \"yes\"\n": "`no-cache`: a switch: write `true` or `false`",
        "rate-limit = \n": "not valid TOML",
    }.items():
        config.write_text(text, encoding="utf-8")
        r = subprocess.run([tally_bin(), "serve", "--config", str(config)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 5 and said in r.stderr, (text, r.stderr)
    # A value the flag refuses is refused as the flag would be.
    config.write_text("max-body-bytes = \"lots\"\n", encoding="utf-8")
    r = subprocess.run([tally_bin(), "serve", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "max-body-bytes" in r.stderr and "lots" in r.stderr, r.stderr


def test_a_server_runs_with_its_settings_file(tmp_path):
    config = tmp_path / "tally.toml"
    config.write_text("max-body-bytes = 4096\nrate-limit = 100000\nrate-burst = 100000\n", encoding="utf-8")
    server = HttpServer("--config", str(config))
    try:
        big = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * 5000}}
        r = httpx2.post(server.url, json=big, headers=ACCEPT)
        assert r.status_code == 413 and "4096" in r.text, r.text
    finally:
        server.stop()


class Collector:
    """An OTLP/HTTP (JSON) receiver on 127.0.0.1: the spans it was sent."""

    def __init__(self):
        import http.server

        self.spans: list[dict] = []
        self.bodies: list[str] = []
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode("utf-8")
                if self.path == "/v1/traces":
                    collector.bodies.append(body)
                    for resource in json.loads(body)["resourceSpans"]:
                        for scope in resource["scopeSpans"]:
                            collector.spans.extend(scope["spans"])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.server.shutdown()


def attribute_values(span: dict) -> list[str]:
    return [json.dumps(a["value"], ensure_ascii=False) for a in span.get("attributes", [])]


def test_tool_calls_are_traced_under_the_clients_span(datasets):
    """A tool call whose request carries a client's `traceparent` (in its HTTP headers, or in
    its `_meta`) is a SERVER span of the client's trace, parented by the client's span, with
    child spans for resolve, plan, scan and envelope; no attribute holds an argument's text
    or a value of the data."""
    collector = Collector()
    server = HttpServer("--otlp-endpoint", collector.url, datasets=str(datasets))
    try:
        session = open_session(server)
        trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        needle = "ZZQ-NEEDLE-7741"
        arguments = {"dataset_id": "procedures", "group_by": ["所管府省庁"], "where": {"手続名": {"$contains": needle}}}
        headers = {**ACCEPT, "Mcp-Protocol-Version": "2025-11-25", "Mcp-Session-Id": session, "traceparent": f"00-{trace}-{parent}-01"}
        r = httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "summarize_records", "arguments": arguments}}, headers=headers, timeout=60)
        assert r.status_code == 200
        other_trace, other_parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
        answer = answer_of(post(server, {"id": 6, "method": "tools/call", "params": {
            "name": "summarize_records", "arguments": {"dataset_id": "procedures", "group_by": ["所管府省庁"]},
            "_meta": {"traceparent": f"00-{other_trace}-{other_parent}-01"},
        }}, session))
        ministries = [row[0] for row in json.loads(answer["result"]["content"][0]["text"])["data"]["rows"]]
        deadline = time.monotonic() + 30
        # Spans are sent in batches: wait until both roots and the first call's phases are in.
        def arrived():
            spans = [s for s in collector.spans if s["traceId"] == trace]
            roots = [s for s in spans if s.get("parentSpanId") == parent]
            phases = {s["name"] for s in spans if roots and s.get("parentSpanId") == roots[0]["spanId"]}
            return roots and {"resolve", "plan", "scan", "envelope"} <= phases and any(
                s["traceId"] == other_trace and s.get("parentSpanId") == other_parent for s in collector.spans)
        while not arrived():
            assert time.monotonic() < deadline, collector.spans
            time.sleep(0.2)
        spans = [s for s in collector.spans if s["traceId"] == trace]
        (root,) = [s for s in spans if s.get("parentSpanId") == parent]
        assert root["name"] == "tools/call summarize_records" and root["kind"] == 2, root
        attributes = {a["key"]: a["value"] for a in root["attributes"]}
        assert attributes["mcp.method.name"] == {"stringValue": "tools/call"}
        assert attributes["gen_ai.tool.name"] == {"stringValue": "summarize_records"}
        assert attributes["tally.outcome"] == {"stringValue": "answered"}, attributes
        children = {s["name"] for s in spans if s.get("parentSpanId") == root["spanId"]}
        assert {"resolve", "plan", "scan", "envelope"} <= children, children
        (other_root,) = [s for s in collector.spans if s["traceId"] == other_trace and s.get("parentSpanId") == other_parent]
        assert other_root["name"] == "tools/call summarize_records"
        everything = "\n".join(collector.bodies)
        assert needle not in everything and "手続名" not in everything
        for ministry in ministries:
            assert ministry not in everything, ministry
    finally:
        server.stop()
        collector.stop()


def test_sighup_reads_the_token_and_policy_files_again(tmp_path):
    """SIGHUP swaps in the token file and the policy file as they are now; files that do not
    hold leave the ones read before in force (said in the log)."""
    tokens = tmp_path / "tokens"
    old, new = "old-token-0123456789abcdef", "new-token-0123456789abcdef"
    tokens.write_text(f"old {old}\n", encoding="utf-8")
    policies = tmp_path / "policies.yaml"
    policies.write_text("policies:\n  all:\n    datasets: \"*\"\ngrants:\n  tokens: {old: [all]}\n", encoding="utf-8")
    server = HttpServer("--token-file", str(tokens), "--policy-file", str(policies), "--auth-failures-per-minute", "1000")
    status = lambda token: httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}, headers={**ACCEPT, "Authorization": f"Bearer {token}"}).status_code
    try:
        assert (status(old), status(new)) == (200, 401)
        tokens.write_text(f"new {new}\n", encoding="utf-8")
        policies.write_text("policies:\n  all:\n    datasets: \"*\"\ngrants:\n  tokens: {new: [all]}\n", encoding="utf-8")
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while status(new) != 200:
            assert time.monotonic() < deadline, "".join(server.log)[-2000:]
            time.sleep(0.2)
        assert status(old) == 401
        # A policy file that no longer holds (it grants a token there is not): kept as before.
        policies.write_text("policies:\n  all:\n    datasets: \"*\"\ngrants:\n  tokens: {nobody: [all]}\n", encoding="utf-8")
        tokens.write_text(f"other {old}\n", encoding="utf-8")
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while not any("stay in force" in line for line in list(server.log)):
            assert time.monotonic() < deadline, "".join(server.log)[-2000:]
            time.sleep(0.2)
        assert (status(new), status(old)) == (200, 401)
    finally:
        server.stop()


async def test_a_call_run_as_a_task_is_traced_too(datasets):
    """A call run as an MCP task (the client asked for one) is a span of the client's trace
    as a call answered at once is, with its phases under it."""
    from mcp.client import advertise

    from test_tasks import TASKS, call, settle

    collector = Collector()
    server = HttpServer("--otlp-endpoint", collector.url, datasets=str(datasets))
    trace, parent = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
    try:
        http = httpx2.AsyncClient(timeout=TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            async with Client(streamable_http_client(server.url, http_client=http), mode="2026-07-28", cache=None,
                              read_timeout_seconds=TIMEOUT, extensions=[advertise(TASKS)]) as c:
                created = await call(c, "summarize_records", {"dataset_id": "procedures", "group_by": ["所管府省庁"]},
                                     meta={"tally/task": True, "traceparent": f"00-{trace}-{parent}-01"})
                assert created.get("resultType") == "task", created
                done = await settle(c, created["taskId"])
                assert done["status"] == "completed", done
        deadline = time.monotonic() + 30
        def arrived():
            roots = [s for s in collector.spans if s["traceId"] == trace and s.get("parentSpanId") == parent]
            phases = {s["name"] for s in collector.spans if roots and s.get("parentSpanId") == roots[0]["spanId"]}
            return roots and {"resolve", "scan", "envelope"} <= phases
        while not arrived():
            assert time.monotonic() < deadline, collector.spans
            time.sleep(0.2)
        (root,) = [s for s in collector.spans if s["traceId"] == trace and s.get("parentSpanId") == parent]
        assert root["name"] == "tools/call summarize_records", root
        assert {"stringValue": "answered"} in [a["value"] for a in root["attributes"] if a["key"] == "tally.outcome"], root
        children = {s["name"] for s in collector.spans if s.get("parentSpanId") == root["spanId"]}
        assert {"resolve", "scan", "envelope"} <= children, children
    finally:
        server.stop()
        collector.stop()


def test_sighup_reads_the_settings_file_again(tmp_path):
    """SIGHUP reads the settings file again: a policy file it now names is taken (so is a token
    file), and a change of another setting is said in the log to take a restart."""
    tokens = tmp_path / "tokens"
    token = "team-token-0123456789abcdef"
    tokens.write_text(f"team {token}\n", encoding="utf-8")
    everything = tmp_path / "everything.yaml"
    everything.write_text("policies:\n  all:\n    datasets: \"*\"\ngrants:\n  tokens: {team: [all]}\n", encoding="utf-8")
    guide_only = tmp_path / "guide-only.yaml"
    guide_only.write_text("policies:\n  guide:\n    datasets: [guide]\ngrants:\n  tokens: {team: [guide]}\n", encoding="utf-8")
    config = tmp_path / "tally.toml"
    config.write_text(f'token-file = "{tokens}"\npolicy-file = "{everything}"\nrate-limit = 100000\nrate-burst = 100000\n', encoding="utf-8")
    server = HttpServer("--config", str(config))

    def seen() -> list[str]:
        session = httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}, headers={**ACCEPT, "Authorization": f"Bearer {token}"})
        headers = {**ACCEPT, "Authorization": f"Bearer {token}", "Mcp-Session-Id": session.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-11-25"}
        r = httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_datasets", "arguments": {}}}, headers=headers)
        return sorted(d["dataset_id"] for d in json.loads(answer_of(r)["result"]["content"][0]["text"])["data"]["datasets"])

    try:
        assert seen() == ["guide", "procedures"]
        config.write_text(f'token-file = "{tokens}"\npolicy-file = "{guide_only}"\nrate-limit = 5\nrate-burst = 100000\n', encoding="utf-8")
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while seen() != ["guide"]:
            assert time.monotonic() < deadline, "".join(server.log)[-2000:]
            time.sleep(0.2)
        assert any("take effect at a restart" in line for line in list(server.log)), "".join(server.log)[-2000:]
    finally:
        server.stop()
