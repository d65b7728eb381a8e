"""The first `inspect_dataset` of the survey read at every call from object storage, beside the
same data from local files (issue 43). Not a test: a script that prints figures
(docs/benchmarks.md keeps them).

    .venv/bin/python tests/e2e/bench_object_store.py [--bin target/debug/tally] [--runs 3]

moto's S3 server on 127.0.0.1 (as tests/e2e/test_object_store.py starts it) holds the survey
as one object and as the 25-object Hive tree by ministry; each figure is the first
`inspect_dataset` (detail "full") of one dataset on a server started for it alone
(`--streaming always --no-cache`), so nothing is warm: no stream, no footer read at a call
before. The requests the server made to the store during that call are counted from its log
(one `object request` line each, at debug level) and split into those that fetched less than
64 KiB (footers, page indexes, bloom filters, small chunks) and the rest.

`--call-memory-mb 18` shows the objects read scan by scan, as before a call kept what it read
(issue 43): a call keeps at most an eighth of its memory, 2.25 MiB then, less than the survey.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from mcp import Client  # noqa: E402

from conftest import HttpServer  # noqa: E402
from test_object_store import BUCKET, S3, SURVEY, datasets_with, partitioned_tree  # noqa: E402

DATASETS = ("s3_tree", "local_tree", "s3_one", "local_one")
SMALL = 64 << 10


def start_store(work: Path) -> S3:
    """moto with the survey as one object and as the Hive tree (the test module's fixture)."""
    s3 = S3()
    s3.client.create_bucket(Bucket=BUCKET)
    s3.put("one/procedures-survey-r6.parquet", SURVEY.read_bytes())
    tree = work / "tree"
    files = partitioned_tree(tree)
    for f in files:
        s3.put("tree/" + f.relative_to(tree).as_posix(), f.read_bytes())
    s3.tree, s3.tree_files = tree, files
    return s3


def requests_in(lines: list[str]) -> tuple[int, int]:
    """(requests, of which small) among the server's log lines."""
    total = small = 0
    for line in lines:
        if "object request" not in line:
            continue
        total += 1
        # `range=Some(123..456)`
        at = line.find("range=Some(")
        if at >= 0:
            bounds = line[at + len("range=Some(") :].split(")")[0].split("..")
            try:
                if int(bounds[1]) - int(bounds[0]) < SMALL:
                    small += 1
            except (ValueError, IndexError):
                pass
    return total, small


async def first_inspect(server: HttpServer, dataset: str) -> tuple[float, dict, int, int]:
    async with Client(server.url, mode="legacy", cache=None) as c:
        # Every dataset registered (footers read) before the clock starts.
        listed = await c.call_tool("list_datasets", {})
        assert not listed.is_error, listed.content[0].text
        before = len(server.log)
        started = time.perf_counter()
        r = await c.call_tool("inspect_dataset", {"dataset_id": dataset, "detail": "full"})
        took = time.perf_counter() - started
        if r.is_error:
            raise SystemExit(f"inspect_dataset of {dataset} failed: {r.content[0].text}")
        lines = list(server.log)[before:]
    if len(server.log) >= (server.log.maxlen or 0):
        print(f"warning: the server's log passed {server.log.maxlen} lines: counts are low", file=sys.stderr)
    total, small = requests_in(lines)
    return took, json.loads(r.content[0].text), total, small


def run(binary: str, datasets: Path, env: dict, dataset: str, extra: list[str]) -> tuple[float, dict, int, int]:
    server = HttpServer(
        "--streaming", "always", "--no-cache", "--call-timeout-ms", "300000", "--object-poll", "off",
        "--rate-limit", "100000", "--rate-burst", "100000", *extra,
        datasets=str(datasets), env={**env, "TALLY_LOG": "warn,tally_storage::object=debug"},
    )
    try:
        return anyio.run(first_inspect, server, dataset)
    finally:
        server.stop()


def described(answer: dict) -> str:
    """What an inspection says of the data (not where it was read from)."""
    data = answer["data"]
    return json.dumps([data["record_count"], data["fields"], data["quality_summary"]], ensure_ascii=False, sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(HERE.parents[1] / "target" / "debug" / "tally"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--call-memory-mb", type=int, help="passed to tally serve (default: its own)")
    args = ap.parse_args()
    extra = ["--call-memory-mb", str(args.call_memory_mb)] if args.call_memory_mb else []
    os.environ["TALLY_BIN"] = os.path.abspath(args.bin)
    work = Path(tempfile.mkdtemp(prefix="tally-bench-object-store-"))
    store = start_store(work)
    try:
        datasets = datasets_with(work, store)
        results = {}
        for dataset in DATASETS:
            runs = [run(args.bin, datasets, store.env(), dataset, extra) for _ in range(args.runs)]
            results[dataset] = runs
            print(
                f"{dataset}: " + ", ".join(f"{t:.2f} s ({n} requests)" for t, _, n, _ in runs),
                file=sys.stderr,
            )
        for remote, local in (("s3_tree", "local_tree"), ("s3_one", "local_one")):
            if described(results[remote][0][1]) != described(results[local][0][1]):
                raise SystemExit(f"{remote} and {local} are not described alike")
        print(f"First `inspect_dataset` (detail full), median of {args.runs} servers started for it; "
              f"`{' '.join(['--streaming always --no-cache', *extra])}`; {os.path.relpath(args.bin, HERE.parents[1])}")
        print()
        print("| dataset | objects | S3 (moto) | local files | ratio | requests to the store | of them < 64 KiB |")
        print("|---|---|---|---|---|---|---|")
        for remote, local, objects in (("s3_tree", "local_tree", len(store.tree_files)), ("s3_one", "local_one", 1)):
            r = statistics.median(t for t, *_ in results[remote])
            l = statistics.median(t for t, *_ in results[local])
            n = statistics.median(n for _, _, n, _ in results[remote])
            small = statistics.median(s for *_, s in results[remote])
            print(f"| survey, {'Hive tree' if objects > 1 else 'one object'} | {objects} | {r:.2f} s | {l:.2f} s "
                  f"| {r / l:.2f} | {n:.0f} | {small:.0f} |")
        print()
        print("Answers: the fields, fill rates, statistics and values described from the store equal those from local files.")
    finally:
        store.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
