"""What metrics and traces cost a small call (issue 56): figures, not assertions.

    python3 tests/e2e/ops_bench.py --bin target/release/tally [--baseline-bin OLD] \\
        [--datasets datasets] [--calls 300]

Serves the default datasets over HTTP on 127.0.0.1 from up to three processes at once:
`--bin` as it is (metrics are always kept), `--bin` sending every tool call's spans to an
OTLP collector this script runs on 127.0.0.1 (`--otlp-endpoint`), and, when given,
`--baseline-bin` (a build from before metrics, for their cost). A small summary
(`procedures` by 所管府省庁, 75k records, prepared) is asked of each in interleaved rounds,
each first in turn, so the machine's noise falls on all; the median and p90 latency and the
ratios to the plain server are printed, with how long a scrape of `/metrics` takes and how
many spans the collector received.
"""

import argparse
import http.server
import json
import statistics
import subprocess
import threading
import time

import httpx2

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
SUMMARY = {"dataset_id": "procedures", "metrics": ["count"], "group_by": ["所管府省庁"]}


class Collector:
    def __init__(self):
        self.spans = 0
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                for r in body["resourceSpans"]:
                    for s in r["scopeSpans"]:
                        collector.spans += len(s["spans"])
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


class Server:
    def __init__(self, binary: str, datasets: str, *extra: str):
        self.proc = subprocess.Popen(
            [binary, "serve", "--http", "127.0.0.1:0", "--datasets", datasets, "--watch", "off",
             "--rate-limit", "1000000", "--rate-burst", "1000000", *extra],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env={"TALLY_LOG": "warn", "PATH": "/usr/bin:/bin"},
        )
        for line in self.proc.stderr:
            if "serving MCP at http://127.0.0.1:" in line:
                self.base = "http://127.0.0.1:" + line.split("127.0.0.1:")[1].split("/")[0]
                break
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        self.http = httpx2.Client(timeout=120, headers=ACCEPT)
        r = self.http.post(self.base + "/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ops-bench", "version": "1"}}})
        self.http.headers["mcp-session-id"] = r.headers["mcp-session-id"]
        self.http.headers["mcp-protocol-version"] = "2025-11-25"
        self.http.post(self.base + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.next = 0

    def call(self):
        self.next += 1
        r = self.http.post(self.base + "/mcp", json={"jsonrpc": "2.0", "id": self.next, "method": "tools/call", "params": {"name": "summarize_records", "arguments": SUMMARY}})
        assert r.status_code == 200 and '"isError":true' not in r.text, r.text[:300]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="target/release/tally")
    parser.add_argument("--baseline-bin")
    parser.add_argument("--datasets", default="datasets")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    collector = Collector()
    servers = {"metrics": Server(args.bin, args.datasets), "metrics + traces": Server(args.bin, args.datasets, "--otlp-endpoint", collector.url)}
    if args.baseline_bin:
        servers = {"before metrics": Server(args.baseline_bin, args.datasets), **servers}
    for s in servers.values():
        for _ in range(20):
            s.call()
    times = {name: [] for name in servers}
    names = list(servers)
    for i in range(args.calls):
        for name in names[i % len(names):] + names[: i % len(names)]:
            t = time.perf_counter()
            servers[name].call()
            times[name].append((time.perf_counter() - t) * 1000)
    plain = statistics.median(times["metrics"])
    print(f"{args.calls} small summaries each (procedures by 所管府省庁), interleaved; milliseconds.\n")
    print("| server | median | p90 | median / metrics only |\n|---|---|---|---|")
    for name, ts in times.items():
        ts.sort()
        print(f"| {name} | {statistics.median(ts):.3f} | {ts[int(len(ts) * 0.9) - 1]:.3f} | {statistics.median(ts) / plain:.3f} |")
    scrapes = []
    scraper = httpx2.Client()
    for _ in range(50):
        t = time.perf_counter()
        scraper.get(servers["metrics"].base + "/metrics").raise_for_status()
        scrapes.append((time.perf_counter() - t) * 1000)
    time.sleep(2)
    print(f"\nA scrape of /metrics: {statistics.median(scrapes):.2f} ms median. Spans received by the collector: {collector.spans:,} ({collector.spans / (args.calls + 20):.1f} a call).")
    for s in servers.values():
        s.stop()


if __name__ == "__main__":
    main()
