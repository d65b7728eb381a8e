"""What one request costs the others (issue 54): figures, not assertions.

    python3 tests/e2e/governor_bench.py --bin target/release/tally --datasets DIR --big ID \\
        [--heavy 8] [--samples 200]

DIR holds a large dataset `ID` of the survey's shape (`tally-synth --rows 7500000`) and the
default `procedures` (75k records, copied beside it). Prints Markdown tables:

1. A `ping` and a small summary (`procedures` by ministry) one after another, their p50/p99,
   on an idle server, then while `--heavy` heavy calls (summaries and searches of the large
   dataset, from as many requests in flight) run without pause.
2. CPU after a cancel: calls reading the large dataset from its files (`--streaming always`)
   cancelled by their client after 0.5 s (`notifications/cancelled`); the server's
   CPU-seconds in the 1.5 s after (the target is 0.2 s).
3. `inspect_dataset` of the large dataset: its first answer once the table is prepared
   (prepared/warm), a second one, and read from its files (`--streaming always`) asked as an
   MCP task, polled to its answer.

Talks JSON-RPC over stdio to one `tally serve` (one caller), several requests in flight.
"""

import argparse
import json
import os
import queue
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def duckdb_summarize(parquet: Path) -> float | None:
    """DuckDB's `SUMMARIZE` of the same Parquet file (every column's min, max, distinct
    estimate, nulls): the yardstick for describing a table, in seconds."""
    try:
        import duckdb
    except ImportError:
        return None
    con = duckdb.connect()
    t = time.perf_counter()
    con.execute(f"SUMMARIZE SELECT * FROM read_parquet('{parquet}')").fetchall()
    return time.perf_counter() - t


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """One `tally serve` over stdio; requests from many threads, answers matched by id."""

    def __init__(self, binary, datasets, extra=(), capabilities=None):
        self.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
        self.proc = subprocess.Popen(
            [binary, "serve", "--datasets", datasets, "--watch", "off", *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, encoding="utf-8",
        )
        self.lock = threading.Lock()
        self.next_id = 0
        self.waiting: dict[int, queue.Queue] = {}
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities or {}, "clientInfo": {"name": "governor-bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self):
        for line in self.proc.stdout:
            message = json.loads(line)
            with self.lock:
                box = self.waiting.pop(message.get("id"), None)
            if box is not None:
                box.put(message)

    def send(self, message):
        with self.lock:
            self.proc.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
            self.proc.stdin.flush()

    def start(self, method, params):
        """Sends a request; its id and the box its answer arrives in."""
        box: queue.Queue = queue.Queue()
        with self.lock:
            self.next_id += 1
            id_ = self.next_id
            self.waiting[id_] = box
        self.send({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
        return id_, box

    def request(self, method, params, timeout=1200):
        _, box = self.start(method, params)
        return box.get(timeout=timeout)

    def call(self, tool, arguments, meta=None):
        params = {"name": tool, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        return self.request("tools/call", params)

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def percentiles(times):
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return statistics.median(ordered) * 1000, p99 * 1000


SMALL = {"dataset_id": "procedures", "group_by": ["所管府省庁"], "limit": 5}


def probe(server, samples):
    """p50/p99 (ms) of a ping and of a small summary, asked one after another."""
    pings, summaries = [], []
    for _ in range(samples):
        t = time.perf_counter()
        server.request("ping", {})
        pings.append(time.perf_counter() - t)
        t = time.perf_counter()
        answer = server.call("summarize_records", SMALL)
        summaries.append(time.perf_counter() - t)
        if answer.get("result", {}).get("isError"):
            raise SystemExit(f"the small summary failed: {json.dumps(answer, ensure_ascii=False)[:400]}")
    return percentiles(pings), percentiles(summaries)


def heavy_calls(big):
    return [
        ("summarize_records", {"dataset_id": big, "group_by": ["所管府省庁", "手続類型"], "metrics": ["count", "avg:オンライン率"], "limit": 3}),
        ("query_records", {"dataset_id": big, "q": "電子", "limit": 3}),
        ("summarize_records", {"dataset_id": big, "group_by": ["所管府省庁", "手続類型"], "where": {"手続名": {"$contains": "届出"}}, "limit": 3}),
    ]


def refusal(answer) -> str:
    """What a refused call was told, the message up to its first parenthesis."""
    try:
        message = json.loads(answer["result"]["content"][0]["text"])["error"]["message"]
    except (KeyError, IndexError, TypeError, ValueError):
        return json.dumps(answer, ensure_ascii=False)[:160]
    return message.split(" (")[0]


def under_load(server, big, heavy, samples):
    stop = threading.Event()
    done = {"answered": 0, "refused": 0}
    reasons: dict[str, int] = {}
    calls = heavy_calls(big)

    def loop(k):
        i = k
        while not stop.is_set():
            tool, arguments = calls[i % len(calls)]
            i += 1
            answer = server.call(tool, arguments)
            refused = answer.get("result", {}).get("isError") or "error" in answer
            done["refused" if refused else "answered"] += 1
            if refused:
                reason = refusal(answer)
                reasons[reason] = reasons.get(reason, 0) + 1

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(heavy)]
    for t in threads:
        t.start()
    time.sleep(2)  # the heavy calls running and queued
    pid = server.proc.pid
    before, began = cpu_seconds(pid), time.perf_counter()
    figures = probe(server, samples)
    busy = (cpu_seconds(pid) - before) / (time.perf_counter() - began)
    stop.set()
    for t in threads:
        t.join(timeout=600)
    return figures, busy, done, reasons


def cancel_cost(server, tool, arguments):
    """CPU-seconds the server used in the 1.5 s after a call was cancelled at 0.5 s."""
    id_, box = server.start("tools/call", {"name": tool, "arguments": arguments})
    time.sleep(0.5)
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id_, "reason": "benchmark"}})
    finished_before = not box.empty()
    before = cpu_seconds(server.proc.pid)
    time.sleep(1.5)
    return cpu_seconds(server.proc.pid) - before, finished_before


def prepared(server, big):
    answer = server.call("summarize_records", {"dataset_id": big})
    steps = answer.get("result", {}).get("structuredContent", {}).get("provenance", {}).get("transformations", [])
    return any(s["type"] == "extract" and "prepared" in s["description"] and "from the files" not in s["description"] for s in steps)


def timed(server, tool, arguments, meta=None):
    t = time.perf_counter()
    answer = server.call(tool, arguments, meta)
    return time.perf_counter() - t, answer


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--datasets", required=True)
    parser.add_argument("--big", required=True, help="the id of the large dataset")
    parser.add_argument("--heavy", type=int, default=8)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as cache:
        server = Server(args.bin, args.datasets, ["--cache-dir", cache])
        try:
            server.call("summarize_records", SMALL)
            began = time.perf_counter()
            while not prepared(server, args.big):
                time.sleep(1)
            print(f"the large table prepared in {time.perf_counter() - began:.1f} s (after its first call)\n")
            first, _ = timed(server, "inspect_dataset", {"dataset_id": args.big})
            again, _ = timed(server, "inspect_dataset", {"dataset_id": args.big})

            peak_prepared = peak_rss_mib(server.proc.pid)
            (idle_ping, idle_small) = probe(server, args.samples)
            (load_ping, load_small), busy, done, reasons = under_load(server, args.big, args.heavy, args.samples)
            print("| while | ping p50 | ping p99 | small summary p50 | small summary p99 |")
            print("|---|---|---|---|---|")
            print(f"| idle | {idle_ping[0]:.1f} ms | {idle_ping[1]:.1f} ms | {idle_small[0]:.1f} ms | {idle_small[1]:.1f} ms |")
            print(f"| {args.heavy} heavy calls in flight | {load_ping[0]:.1f} ms | {load_ping[1]:.1f} ms | {load_small[0]:.1f} ms | {load_small[1]:.1f} ms |")
            print(f"\nthe server used {busy:.2f} cores meanwhile; heavy calls: {done['answered']} answered, {done['refused']} refused")
            for reason, n in sorted(reasons.items(), key=lambda r: -r[1]):
                print(f"- {n} refused: {reason}")
            print(f"\npeak resident memory of the server: {peak_rss_mib(server.proc.pid):.0f} MiB"
                  f" ({peak_prepared:.0f} MiB once the large table was prepared and inspected)\n")
        finally:
            server.stop()

    # Calls that read every record from the files (seconds each), cancelled at 0.5 s by a
    # client without tasks (a task would go on: tasks/cancel stops it).
    plain = Server(args.bin, args.datasets, ["--streaming", "always", "--no-cache"])
    try:
        print("| read from the files, cancelled after 0.5 s | CPU-seconds in the 1.5 s after |")
        print("|---|---|")
        for tool, arguments in heavy_calls(args.big) + [("inspect_dataset", {"dataset_id": args.big, "detail": "full"})]:
            used, finished = cancel_cost(plain, tool, arguments)
            label = f"{tool} {json.dumps({k: v for k, v in arguments.items() if k != 'dataset_id'}, ensure_ascii=False)}"
            print(f"| {label}{' (had already answered)' if finished else ''} | {used:.2f} |")
        print()
    finally:
        plain.stop()

    # Read from its files at every call: the inspection, not asked as a task, becomes one.
    streaming = Server(args.bin, args.datasets, ["--streaming", "always", "--no-cache"],
                       capabilities={"extensions": {"io.modelcontextprotocol/tasks": {}}})
    try:
        t = time.perf_counter()
        # Not asked as a task: the estimate must make it one (its 8 passes over the files).
        answer = streaming.call("inspect_dataset", {"dataset_id": args.big})
        result = answer.get("result", {})
        task = result.get("task") or result
        task_id = task.get("taskId")
        said = task.get("statusMessage", "")
        status = task.get("status")
        while task_id and status not in ("completed", "failed", "cancelled"):
            time.sleep(0.5)
            got = streaming.request("tasks/get", {"taskId": task_id}).get("result", {})
            status = got.get("status")
        files = time.perf_counter() - t
    finally:
        streaming.stop()
    print("\n| inspect_dataset of the large dataset | time |")
    print("|---|---|")
    print(f"| prepared, first answer | {first:.2f} s |")
    duck = duckdb_summarize(Path(args.datasets) / args.big / "data.parquet")
    if duck is not None:
        print(f"| DuckDB `SUMMARIZE` of the same Parquet file (the yardstick) | {duck:.2f} s |")
    print(f"| prepared, again (kept) | {again:.3f} s |")
    how = f"a task: {said}; {status}" if task_id else "answered at once, not as a task"
    print(f"| read from its files ({how}) | {files:.1f} s |")


if __name__ == "__main__":
    main()
