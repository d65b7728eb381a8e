"""Hostile input on every surface (issue 36): a corpus generated from the server's own method
table (`methods.json`, see test_gate.py) — each string of each probe replaced by a
300,000-character one, by 100,000 kanji, by an argument list of thousands — and the probes of
the attacker's report (completions, subscriptions by bytes, long URIs, deep nesting). Each
case must be refused by the bound that stops it (the answer names the bound) or answered
normally, the server must keep answering others meanwhile, and its memory stays bounded.
Times and peak memory are printed, never asserted."""

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import pytest

from conftest import HttpServer, datasets_dir, tally_bin

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}},
}
MIB = 1024 * 1024


def method_table() -> list[dict]:
    path = Path(os.environ.get("TALLY_VARIANTS", "")) / "methods.json"
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail("TALLY_VARIANTS has no methods.json; the cargo test wrapper writes it")
        pytest.skip("no methods.json (run through `cargo test`)")
    return json.loads(path.read_text(encoding="utf-8"))


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Peak:
    """The largest resident set of a process, sampled every 50 ms."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss(self.pid))
            except OSError:
                return
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


class Session:
    """A 2025-era MCP session over plain HTTP: every answer read whole (JSON or SSE)."""

    def __init__(self, server: HttpServer):
        self.url = server.url
        self.http = httpx2.Client(timeout=120)
        r = self.http.post(self.url, json=INIT, headers=ACCEPT)
        assert r.status_code == 200, r.text
        self.headers = {**ACCEPT, "Mcp-Session-Id": r.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-11-25"}
        self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        self.next_id = 10

    def ask(self, method: str, params) -> tuple[dict, float]:
        self.next_id += 1
        started = time.monotonic()
        r = self.http.post(self.url, json={"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}, headers=self.headers)
        took = time.monotonic() - started
        if r.status_code != 200:
            return {"http": r.status_code, "body": r.text[:500]}, took
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            answers = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
            answer = next((a for a in answers if a.get("id") == self.next_id), {"none": answers})
        else:
            answer = r.json()
        return answer, took

    def close(self):
        self.http.delete(self.url, headers=self.headers)
        self.http.close()


@pytest.fixture(scope="module")
def server():
    s = HttpServer("--rate-limit", "100000", "--rate-burst", "100000")
    yield s
    s.stop()


def bound_of(answer: dict) -> str | None:
    """The bound a refusal names: a JSON-RPC error's data, a tool error's text, or HTTP 413."""
    if answer.get("http") == 413:
        return "max_body_bytes"
    error = answer.get("error")
    if error:
        data = error.get("data") or {}
        return data.get("bound") or error.get("message")
    result = answer.get("result", {})
    if result.get("isError"):
        return result["content"][0]["text"]
    return None


def variants_of(params, giant: str):
    """Every way of putting `giant` in place of one string of `params`."""
    if isinstance(params, str):
        yield giant
    elif isinstance(params, dict):
        for key, value in params.items():
            for v in variants_of(value, giant):
                yield {**params, key: v}
    elif isinstance(params, list):
        for i, value in enumerate(params):
            for v in variants_of(value, giant):
                yield params[:i] + [v] + params[i + 1:]


def fill(probe) -> dict:
    text = json.dumps(probe).replace("@DATASET@", "procedures").replace("@FIELD@", "所管府省庁").replace("@VALUE@", "デジタル庁").replace("@PREFIX@", "proc")
    return json.loads(text)


def test_every_string_of_every_probe_is_bounded(server):
    """The generated corpus: 300,000 ASCII characters and 100,000 kanji in each string of each
    probe of each 2025 method; each answered (mostly refused by a named bound) in bounded
    time while another session keeps answering pings."""
    watch = Peak(server.proc.pid)
    base = rss(server.proc.pid)
    hostile, bystander = Session(server), Session(server)
    slowest, cases, refused, answered = (0.0, ""), 0, 0, []
    try:
        for method in method_table():
            if "2025-11-25" not in method["eras"]:
                continue
            for probe in method["probes"]:
                params = fill(probe)
                for giant in ("x" * 300_000, "名" * 100_000):
                    for variant in variants_of(params, giant):
                        answer, took = hostile.ask(method["name"], variant)
                        cases += 1
                        if bound_of(answer):
                            refused += 1
                        else:
                            # Within every bound (the body's included): answered as usual.
                            assert "result" in answer, (method["name"], answer)
                            answered.append(f"{method['name']} {json.dumps(variant)[:100]}")
                        if took > slowest[0]:
                            slowest = (took, f"{method['name']} {json.dumps(variant)[:120]}")
                        pong, _ = bystander.ask("ping", {})
                        assert pong.get("result") == {}, pong
    finally:
        hostile.close()
        bystander.close()
        peak = watch.stop()
    print(f"{cases} hostile cases, {refused} refused by a bound; slowest {slowest[0]:.2f} s ({slowest[1]}); "
          f"RSS {base / MIB:.0f} MiB before, peak {peak / MIB:.0f} MiB")
    print("answered within every bound:", answered)
    assert cases >= 60 and refused >= cases * 0.9, (cases, refused)
    assert peak - base < 512 * MIB


def test_completions_of_a_huge_value_are_refused_at_once(server):
    """Regression (issue 36, "completions cost unbounded CPU"): two 300,000-character values
    took ~200 s of CPU and stalled /health for 78 s. Now refused before any scoring."""
    s = Session(server)
    try:
        times = []
        for _ in range(2):
            answer, took = s.ask("completion/complete", {
                "ref": {"type": "ref/prompt", "name": "compare_groups"},
                "argument": {"name": "where_value", "value": "x" * 300_000},
                "context": {"arguments": {"dataset_id": "procedures", "where_field": "手続名"}},
            })
            times.append(took)
            assert answer["error"]["data"]["bound"] == "MAX_COMPLETION_CHARS", answer
        started = time.monotonic()
        assert httpx2.get(server.base + "/health").status_code == 200
        health = time.monotonic() - started
        # The longest value a completion takes, against the 10,000 most frequent names.
        answer, longest = s.ask("completion/complete", {
            "ref": {"type": "ref/prompt", "name": "compare_groups"},
            "argument": {"name": "where_value", "value": "申" * 1000},
            "context": {"arguments": {"dataset_id": "procedures", "where_field": "手続名"}},
        })
        assert "result" in answer, answer
        print(f"refused in {times[0]:.3f} s and {times[1]:.3f} s; /health meanwhile {health:.3f} s; "
              f"a 1,000-character value completed in {longest:.3f} s")
    finally:
        s.close()


def test_subscriptions_are_bounded_in_bytes(server):
    """Regression (issue 36, "subscriptions bounded by count, not bytes"): four sessions each
    subscribing 1,000 URIs of 500 KB took the server from 135 MB to 2.1 GB, and the memory
    stayed. A URI is at most 4 KiB, a session's URIs 256 KiB, all sessions' 16 MiB."""
    watch = Peak(server.proc.pid)
    base = rss(server.proc.pid)
    sessions = [Session(server) for _ in range(4)]
    try:
        big = "tally://datasets/procedures/fields/" + "x" * 500_000
        for s in sessions:
            answer, _ = s.ask("resources/subscribe", {"uri": big})
            assert answer["error"]["data"]["bound"] == "MAX_URI_BYTES", answer
        held, refusal = 0, None
        for i in range(1_000):
            answer, _ = sessions[0].ask("resources/subscribe", {"uri": f"tally://datasets/procedures/fields/{i:0>4000}"})
            if "error" in answer:
                refusal = answer["error"]["data"]["bound"]
                break
            held += 1
        assert refusal == "MAX_SUBSCRIPTION_BYTES" and held * 4035 <= 256 * 1024, (held, refusal)
    finally:
        for s in sessions:
            s.close()
        peak = watch.stop()
    print(f"{held} URIs of 4 KB held by one session; RSS {base / MIB:.0f} MiB before, peak {peak / MIB:.0f} MiB")
    assert peak - base < 256 * MIB


def test_sessions_past_the_bound_are_closed_oldest_first(tmp_path):
    """Regression (issue 36, "~63 KB kept per idle session for 5 minutes"): idle sessions are
    bounded per caller; past the bound the oldest is closed (404, and its client starts anew)."""
    s = HttpServer("--max-sessions-per-caller", "3", "--rate-limit", "100000", "--rate-burst", "100000")
    try:
        sessions = [Session(s) for _ in range(5)]
        time.sleep(0.5)
        alive = []
        for session in sessions:
            answer, _ = session.ask("ping", {})
            alive.append(answer.get("result") == {})
        assert alive == [False, False, True, True, True], alive
        sample = rss(s.proc.pid)
        more = [Session(s) for _ in range(200)]
        after = rss(s.proc.pid)
        print(f"RSS with 3 live sessions {sample / MIB:.1f} MiB; after opening 200 more (3 kept) {after / MIB:.1f} MiB")
        for session in more + sessions:
            session.http.close()
    finally:
        s.stop()


def test_a_deep_stdio_line_is_answered_with_its_id():
    """Regression (issue 36): a line nested past serde's 128 levels got −32700 with id null,
    and the client waited forever for its answer."""
    proc = subprocess.Popen(
        [tally_bin(), "serve", "--datasets", datasets_dir()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**os.environ, "TALLY_LOG": "warn"},
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        line = '{"jsonrpc":"2.0","id":"deep-7","method":"ping","params":{"x":' + "[" * 5000 + "]" * 5000 + "}}"
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["id"] == "deep-7" and answer["error"]["code"] == -32600, answer
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
    finally:
        proc.kill()
        proc.wait()


def test_serve_removes_what_a_killed_add_left(tmp_path):
    """Regression (issue 36): a killed `tally add` left its staging folder until the next add.
    `tally serve` sweeps such folders as it starts (never one whose add still runs)."""
    import shutil

    datasets = tmp_path / "datasets"
    shutil.copytree(Path(datasets_dir()) / "guide", datasets / "guide")
    # The process id in the name is past any the kernel gives, so no such add runs.
    left = datasets / ".tally-add-survey-4194305999"
    left.mkdir()
    (left / "data.parquet").write_bytes(b"half written")
    s = HttpServer(datasets=str(datasets))
    try:
        assert not left.exists(), "the staging folder of a killed add is removed at start"
        assert (datasets / "guide" / "dataset.yaml").is_file()
    finally:
        s.stop()
