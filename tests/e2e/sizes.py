"""How much of a model's context Tally's answers take: the characters of `tools/list` and of
typical results, as a client receives them over stdio. Prints a Markdown table
(docs/benchmarks.md keeps the figures).

    python3 tests/e2e/sizes.py [--bin target/release/tally] [--datasets DIR] [--dataset ID]

Talks JSON-RPC to `tally serve` directly (no SDK), so it runs on any Python 3.
"""

import argparse
import json
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/debug/tally")
    ap.add_argument("--datasets", default="datasets")
    ap.add_argument("--dataset", default="procedures")
    ap.add_argument("--group", default="所管府省庁")
    ap.add_argument("--metric", default="avg:オンライン率")
    args = ap.parse_args()

    proc = subprocess.Popen(
        [args.bin, "serve", "--datasets", args.datasets, "--call-timeout-ms", "120000"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
    )
    next_id = [0]

    def request(method, params=None):
        next_id[0] += 1
        message = {"jsonrpc": "2.0", "id": next_id[0], "method": method}
        if params is not None:
            message["params"] = params
        proc.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            reply = json.loads(line)
            if reply.get("id") == next_id[0]:
                return reply

    request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "sizes", "version": "1"}})
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    proc.stdin.flush()

    rows = []
    failed = []
    tools = request("tools/list")
    rows.append(("tools/list", len(json.dumps(tools["result"], ensure_ascii=False))))

    def call(label, name, arguments):
        reply = request("tools/call", {"name": name, "arguments": arguments})
        # An error's text is not the size of an answer: such a row says the call failed (and
        # the run exits non-zero after the table) instead of printing the error's length.
        if "error" in reply or reply["result"].get("isError"):
            failed.append(f"{label}: {json.dumps(reply, ensure_ascii=False)[:600]}")
            rows.append((label, None))
            return
        text = reply["result"]["content"][0]["text"]
        rows.append((label, len(text)))

    ds = args.dataset
    call("inspect_dataset (default)", "inspect_dataset", {"dataset_id": ds})
    call("inspect_dataset, detail full", "inspect_dataset", {"dataset_id": ds, "detail": "full"})
    call("query_records, default (no select, 50 rows)", "query_records", {"dataset_id": ds})
    call("query_records, limit 5000", "query_records", {"dataset_id": ds, "limit": 5000})
    call(
        f"summarize_records by {args.group}, count + {args.metric}",
        "summarize_records",
        {"dataset_id": ds, "group_by": [args.group], "metrics": ["count", args.metric]},
    )
    proc.stdin.close()
    proc.wait(timeout=30)

    print("| what | characters |")
    print("|---|---|")
    for label, n in rows:
        print(f"| {label} | {'the call failed' if n is None else f'{n:,}'} |")
    if failed:
        raise SystemExit("calls that failed (their rows are not sizes of answers):\n" + "\n".join(failed))


if __name__ == "__main__":
    main()
