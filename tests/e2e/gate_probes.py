"""The probes of issue 36 ("one gate for scope, size and time"), run against a `tally` binary
and printed as figures: time, server CPU and peak memory for each, and what a scoped token
was told. Run it against two builds side by side to compare (figures, not assertions):

    .venv/bin/python tests/e2e/gate_probes.py --bin target/debug/tally [--bin OTHER]

Probes: completions of a 300,000-character value (twice, with /health timed meanwhile);
four sessions subscribing 1,000 URIs of 500 KB each; a scoped token's session told of
catalog changes of a dataset outside its scope (logging and list-changed); tools/list
examples for that token; a stdio line nested 5,000 deep; 1,000 idle sessions."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from conftest import HttpServer, stop_process  # noqa: E402

MIB = 1024 * 1024
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
SCOPED = "scoped-token-0123456789abcdef"


def status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Peak:
    def __init__(self, pid):
        self.pid, self.peak, self.stop_ = pid, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_.is_set():
            try:
                self.peak = max(self.peak, status(self.pid, "VmRSS"))
            except OSError:
                return
            time.sleep(0.05)

    def stop(self):
        self.stop_.set()
        self.t.join()
        return self.peak


class Session:
    def __init__(self, url, token=None, timeout=600):
        self.url = url
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx2.Client(timeout=timeout)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
        r = self.http.post(url, json=init, headers={**ACCEPT, **auth})
        self.headers = {**ACCEPT, **auth, "Mcp-Session-Id": r.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-11-25"}
        self.http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        self.n = 1

    def ask(self, method, params):
        self.n += 1
        r = self.http.post(self.url, json={"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}, headers=self.headers)
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            for line in r.text.splitlines():
                if line.startswith("data:") and line[5:].strip():
                    m = json.loads(line[5:])
                    if m.get("id") == self.n:
                        return m
            return {}
        return r.json() if r.status_code == 200 else {"http": r.status_code}

    def stream(self, into: list, stop: threading.Event):
        """Reads the session's notification stream (GET) into `into` until `stop`."""
        def run():
            try:
                with self.http.stream("GET", self.url, headers={**self.headers, "Accept": "text/event-stream"}) as r:
                    for line in r.iter_lines():
                        if stop.is_set():
                            return
                        if line.startswith("data:") and line[5:].strip():
                            into.append(line[5:].strip())
            except Exception:
                return
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t


def datasets_with_hidden(tmp: Path) -> Path:
    datasets = tmp / "datasets"
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    shutil.copytree(ROOT / "datasets" / "procedures", datasets / "procedures")
    return datasets


def probe_completions(bin_path: str, tmp: Path):
    os.environ["TALLY_BIN"] = bin_path
    server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000", datasets=str(datasets_with_hidden(tmp)))
    try:
        s = Session(server.url)
        # The names of 手続名 are known values once the data is prepared.
        s.ask("tools/call", {"name": "summarize_records", "arguments": {"dataset_id": "procedures", "group_by": ["所管府省庁"]}})
        cpu0, t0 = cpu_seconds(server.proc.pid), time.monotonic()
        health = []

        def poll():
            while not done.is_set():
                h0 = time.monotonic()
                try:
                    httpx2.get(server.base + "/health", timeout=600)
                except Exception:
                    pass
                health.append(time.monotonic() - h0)
                time.sleep(0.2)

        done = threading.Event()
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        answers = []
        threads = []
        for _ in range(2):
            def one():
                other = Session(server.url)
                answers.append(other.ask("completion/complete", {
                    "ref": {"type": "ref/prompt", "name": "compare_groups"},
                    "argument": {"name": "where_value", "value": "x" * 300_000},
                    "context": {"arguments": {"dataset_id": "procedures", "where_field": "手続名"}},
                }))
            th = threading.Thread(target=one)
            th.start()
            threads.append(th)
        for th in threads:
            th.join(timeout=900)
        done.set()
        poller.join()
        took, cpu = time.monotonic() - t0, cpu_seconds(server.proc.pid) - cpu0
        outcome = [("refused: " + a["error"]["message"][:60]) if "error" in a else f"{len(a.get('result', {}).get('completion', {}).get('values', []))} values" for a in answers]
        print(f"completions of 300,000 characters x2: {took:.1f} s wall, {cpu:.1f} s server CPU, /health slowest {max(health, default=0):.2f} s; {outcome}")
    finally:
        stop_process(server.proc)


def probe_subscriptions(bin_path: str, tmp: Path):
    os.environ["TALLY_BIN"] = bin_path
    server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000", datasets=str(datasets_with_hidden(tmp)))
    peak = Peak(server.proc.pid)
    try:
        base = status(server.proc.pid, "VmRSS")
        t0 = time.monotonic()
        sessions = [Session(server.url) for _ in range(4)]
        accepted = refused = 0
        for k, s in enumerate(sessions):
            for i in range(1000):
                uri = f"tally://datasets/procedures/fields/{k}-{i}-" + "x" * 500_000
                a = s.ask("resources/subscribe", {"uri": uri})
                if "error" in a or "http" in a:
                    refused += 1
                else:
                    accepted += 1
        took = time.monotonic() - t0
        time.sleep(1)
        held = status(server.proc.pid, "VmRSS")
        print(f"4 sessions x 1,000 subscriptions of 500 KB: {accepted} accepted, {refused} refused in {took:.1f} s; "
              f"RSS {base / MIB:.0f} MiB before, peak {peak.stop() / MIB:.0f} MiB, {held / MIB:.0f} MiB after")
    finally:
        stop_process(server.proc)


def probe_scope(bin_path: str, tmp: Path):
    os.environ["TALLY_BIN"] = bin_path
    datasets = tmp / "datasets"
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    (tmp / "tokens").write_text(f"scoped {SCOPED} guide\n", encoding="utf-8")
    server = HttpServer("--token-file", str(tmp / "tokens"), "--watch", "poll", "--poll-interval-ms", "200", datasets=str(datasets))
    try:
        s = Session(server.url, SCOPED)
        s.ask("logging/setLevel", {"level": "debug"})
        s.ask("resources/subscribe", {"uri": "tally://datasets/procedures"})
        told, stop = [], threading.Event()
        s.stream(told, stop)
        time.sleep(0.5)
        shutil.copytree(ROOT / "datasets" / "procedures", datasets / "procedures")
        time.sleep(4)
        stop.set()
        naming = [t for t in told if "procedures" in t]
        tools = json.dumps(s.ask("tools/list", {}), ensure_ascii=False)
        health = httpx2.get(server.base + "/health", headers={"Authorization": f"Bearer {SCOPED}"}).json()
        print(f"scoped session, a hidden dataset added: {len(told)} notifications, {len(naming)} naming it; "
              f"tools/list names it {tools.count('procedures')} times; /health says {health}")
    finally:
        stop_process(server.proc)


def probe_deep_stdio(bin_path: str):
    proc = subprocess.Popen([bin_path, "serve", "--datasets", str(ROOT / "datasets")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = '{"jsonrpc":"2.0","id":"deep-7","method":"ping","params":{"x":' + "[" * 5000 + "]" * 5000 + "}}"
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        print(f"stdio line nested 5,000 deep: answered id={answer.get('id')!r}, code {answer.get('error', {}).get('code')}")
    finally:
        proc.kill()
        proc.wait()


def probe_idle_sessions(bin_path: str, tmp: Path):
    os.environ["TALLY_BIN"] = bin_path
    server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000", datasets=str(tmp))
    try:
        time.sleep(0.5)
        base = status(server.proc.pid, "VmRSS")
        t0 = time.monotonic()
        held = [Session(server.url) for _ in range(1000)]
        took = time.monotonic() - t0
        time.sleep(1)
        after = status(server.proc.pid, "VmRSS")
        print(f"1,000 idle sessions opened in {took:.1f} s: RSS {base / MIB:.0f} -> {after / MIB:.0f} MiB "
              f"({(after - base) / 1000 / 1024:.0f} KiB a session)")
        for s in held:
            s.http.close()
    finally:
        stop_process(server.proc)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", action="append", required=True)
    args = parser.parse_args()
    for bin_path in args.bin:
        print(f"== {bin_path}")
        for probe in (probe_completions, probe_subscriptions, probe_scope, probe_idle_sessions):
            with tempfile.TemporaryDirectory() as tmp:
                probe(bin_path, Path(tmp))
        probe_deep_stdio(bin_path)


if __name__ == "__main__":
    main()
