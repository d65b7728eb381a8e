"""How long a client waits for its first answer after starting Tally, and what the server
holds in memory then: with an empty cache directory (the data is prepared and kept), then
again with the kept entry (mapped), then without a cache. Prints a Markdown table
(docs/benchmarks.md keeps the figures).

    python3 tests/e2e/first_answer.py --bin target/release/tally --datasets DIR --dataset ID \\
        [--group 所管府省庁] [--runs 3]

Talks JSON-RPC to `tally serve` over stdio directly (no SDK); reads the server's memory from
/proc (Linux): peak resident, and resident anonymous and file-backed memory after the answer.
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time


def status(pid):
    fields = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) * 1024
    return fields


def first_answer(binary, datasets, dataset, group, cache, expect=None):
    """Seconds from spawning the server to the answer, and its memory then. `expect`: what the
    answer's extract step must say of how the data was read (the row "kept entry (mapped)"
    says it was mapped from the cache); anything else ends the run."""
    args = [binary, "serve", "--datasets", datasets, "--call-timeout-ms", "600000", "--watch", "off"]
    args += ["--cache-dir", cache] if cache else ["--no-cache"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
    )

    def send(message):
        proc.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
        proc.stdin.flush()

    def reply(id_):
        while True:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("the server ended without answering")
            message = json.loads(line)
            if message.get("id") == id_:
                return message

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "first-answer", "version": "1"}}})
    reply(1)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "summarize_records", "arguments": {"dataset_id": dataset, "group_by": [group], "metrics": ["count"]}}})
    answer = reply(2)
    elapsed = time.perf_counter() - start
    if answer.get("result", {}).get("isError") or "error" in answer:
        raise SystemExit(f"the call failed: {answer}")
    steps = answer["result"].get("structuredContent", {}).get("provenance", {}).get("transformations", [])
    said = " ".join(t.get("description", "") for t in steps if t.get("type") == "extract")
    if expect is not None and expect not in said:
        raise SystemExit(f"cache {cache or 'none'}: expected the extract step to say {expect!r}, it says: {said or '(no extract step)'}")
    memory = status(proc.pid)
    proc.stdin.close()
    proc.wait(timeout=600)
    return elapsed, memory


def mib(n):
    return f"{n / (1 << 20):,.0f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/tally")
    ap.add_argument("--datasets", default="datasets")
    ap.add_argument("--dataset", default="procedures")
    ap.add_argument("--group", default="所管府省庁")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    rows = []
    for run in range(args.runs):
        cache = tempfile.mkdtemp(prefix="tally-cache-")
        try:
            cold = first_answer(args.bin, args.datasets, args.dataset, args.group, cache)
            # The entry is written in the background after the answer; the server keeps
            # running until it is, so by now it is there.
            warm = first_answer(args.bin, args.datasets, args.dataset, args.group, cache, "mapped from the cache")
            none = first_answer(args.bin, args.datasets, args.dataset, args.group, None)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        for label, (elapsed, memory) in (("no cache", none), ("empty cache (prepare, keep)", cold), ("kept entry (mapped)", warm)):
            rows.append((run + 1, label, elapsed, memory))

    print("| run | start | first answer | peak RSS | anonymous after | file-backed after |")
    print("|---|---|---|---|---|---|")
    for run, label, elapsed, memory in rows:
        print(f"| {run} | {label} | {elapsed:.3f} s | {mib(memory.get('VmHWM', 0))} | {mib(memory.get('RssAnon', 0))} | {mib(memory.get('RssFile', 0))} |")


if __name__ == "__main__":
    main()
