"""One server alone beside the same server sending its plans to a Ballista cluster of one and of
two executors, in one run, on the same Parquet file and the same machine. Prints a Markdown
table (docs/benchmarks.md keeps the figures).

    python3 tests/e2e/cluster_bench.py --bin target/release/tally \\
        --scheduler target/release/tally-scheduler --executor target/release/tally-executor \\
        --datasets DIR --dataset NAME [--runs 5]

Each column serves the dataset read from its file at every call (the path a cluster takes;
its executors open the files themselves): one server alone (`--streaming always`), then
`--cluster` with one executor and with two, every process on this machine. The five workloads
are those of tests/e2e/scale.py, each the median of `--runs` calls after a warm-up; the totals
must agree. Peak resident memory is read from /proc for the server and each executor.

On a machine with two cores this measures the cost of going through the cluster (planning
at the scheduler, the job's start, tasks, shuffles through the executors' disks, the answer
fetched over Arrow Flight), not a speed-up: the executors share the cores the server alone
would use.

With --pin (Linux, `taskset`), the cores are isolated instead, so a speed-up can be read: the
server alone runs on core 0; with the cluster, the server and the scheduler run on core 0 and
executor i on core i (one executor: core 1). The table then gives each workload's speed-up
(one server / cluster) and the fixed cost of a call through the cluster: the median of a
light call (a count of every record) through it, less the same call on one server.

--weed PATH reads the dataset from an S3 server on 127.0.0.1 instead of the file (SeaweedFS,
as tests/e2e/object_bench.py starts it; boto3 must be importable): its Parquet file is put
there, the server and the executors are given the store's address and key, and each reads
the object by ranges.
--workloads picks some of the workloads by number and --no-inspect leaves inspect_dataset
out (at 75M rows, `q` and the inspection take minutes a call on one core);
--max-explode-rows is passed to every server (exploding 75M records passes the default cap).
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import WORKLOADS, Server, mib, run_workloads, status  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(pin, core):
    """What runs a process on `core` when pinning (nothing otherwise)."""
    return ["taskset", "-c", str(core % os.cpu_count())] if pin else []


class Cluster:
    def __init__(self, scheduler, executor, executors, work, pin=False):
        self.port = free_port()
        env = {**os.environ, "RUST_LOG": "warn,ballista=info"}
        self.scheduler = subprocess.Popen(
            [*pinned(pin, 0), scheduler, "--bind-port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        )
        registered = threading.Semaphore(0)

        def read():
            for line in self.scheduler.stderr:
                if re.search("register executor request", line):
                    registered.release()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the scheduler did not start")
                time.sleep(0.1)
        self.executors = []
        for i in range(executors):
            folder = os.path.join(work, f"executor-{i}")
            os.makedirs(folder, exist_ok=True)
            # One executor: core 1 (the server and the scheduler are on core 0); two: 0 and 1.
            core = 1 if executors == 1 else i
            self.executors.append(subprocess.Popen(
                [*pinned(pin, core), executor, "--scheduler-port", str(self.port), "--bind-port", str(free_port()),
                 "--bind-grpc-port", str(free_port()), "--bind-health-port", str(free_port()),
                 "--work-dir", folder],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            ))
        for _ in range(executors):
            if not registered.acquire(timeout=60):
                raise SystemExit("the executors did not register")

    @property
    def address(self):
        return f"df://127.0.0.1:{self.port}"

    def stop(self):
        memory = [status(p.pid).get("VmHWM", 0) for p in self.executors]
        for p in [*self.executors, self.scheduler]:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        return memory


LIGHT = {"metrics": ["count"]}


def in_store(weed, datasets, dataset, work):
    """The dataset's Parquet file put in an S3 server on 127.0.0.1 (SeaweedFS, started as
    tests/e2e/object_bench.py starts it), and a datasets folder whose definition reads it from
    there. The environment of this process (so of the server and the executors it starts)
    points at the store."""
    from object_bench import BUCKET, KEY, SECRET, start_store  # noqa: E402

    folder = os.path.join(datasets, dataset)
    with open(os.path.join(folder, "dataset.yaml"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    data = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("data_file:")), "data.parquet")
    proc, endpoint, client = start_store(weed, work)
    client.upload_file(os.path.join(folder, data), BUCKET, f"bench/{dataset}.parquet")
    os.environ.update({
        "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_TIMEOUT": "120s",
    })
    root = os.path.join(work, "store")
    os.makedirs(os.path.join(root, dataset))
    with open(os.path.join(root, dataset, "dataset.yaml"), "w", encoding="utf-8") as f:
        f.write("\n".join([f"data: s3://{BUCKET}/bench/{dataset}.parquet"]
                          + [l for l in lines if not l.startswith("data_file:")]) + "\n")
    return proc, root


def measure(binary, datasets, dataset, runs, extra, path, prefix=(), inspected=True):
    """The workloads on one server, and the median of a light call (`LIGHT`); every answer's
    extract step must say `path` (the column's path: read from the files here, or by the
    cluster), else the run ends."""
    server = Server(binary, datasets, None, extra, prefix=prefix)
    out = run_workloads(server, dataset, runs, said=path)
    said = server.extract(dataset, WORKLOADS[0][1])
    light = sorted(server.answer(dataset, LIGHT)[0] for _ in range(runs + 1))[1:]
    inspected = inspect(server, dataset) if inspected else None
    return out, said, server.stop().get("VmHWM", 0), light[len(light) // 2], inspected


def inspect(server, dataset):
    """The first `inspect_dataset` of this server (computed then, kept for the version): its
    time and its fields, which must be the same whatever computed them."""
    start = time.perf_counter()
    answer = server.request("tools/call", {"name": "inspect_dataset", "arguments": {"dataset_id": dataset, "detail": "full"}})
    elapsed = time.perf_counter() - start
    result = answer.get("result", {})
    if result.get("isError") or "error" in answer:
        raise SystemExit(f"inspect_dataset failed: {json.dumps(answer, ensure_ascii=False)[:600]}")
    return elapsed, result.get("structuredContent", {}).get("fields")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--scheduler", required=True)
    ap.add_argument("--executor", required=True)
    ap.add_argument("--datasets", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pin", action="store_true", help="isolate cores with taskset (see above)")
    ap.add_argument("--workloads", help="the workloads to run, by number (1-6, comma-separated; default all)")
    ap.add_argument("--no-inspect", action="store_true", help="leave out inspect_dataset (minutes at 75M rows)")
    ap.add_argument("--cluster-partitions", help="passed to the servers that send to the cluster (the cluster's task slots; default: with --pin, one per executor, each on one core; without, the server's default, 4)")
    ap.add_argument("--max-explode-rows", help="passed to tally serve (exploding one field of 75M records passes the default cap)")
    ap.add_argument("--weed", help="SeaweedFS's `weed`: the dataset read from its S3 server on 127.0.0.1 by the server and by the executors (needs boto3)")
    args = ap.parse_args()
    if args.pin and not shutil.which("taskset"):
        raise SystemExit("--pin needs taskset (util-linux)")
    if args.workloads:
        chosen = [WORKLOADS[int(n) - 1] for n in args.workloads.split(",")]
        WORKLOADS[:] = chosen
    extra = ["--max-explode-rows", args.max_explode_rows] if args.max_explode_rows else []
    work = tempfile.mkdtemp(prefix="tally-cluster-bench-")
    store = None
    try:
        if args.weed:
            store, args.datasets = in_store(args.weed, args.datasets, args.dataset, work)
            print(f"read from the object store (SeaweedFS on 127.0.0.1): {os.environ['AWS_ENDPOINT_URL']}")
        alone = measure(args.bin, args.datasets, args.dataset, args.runs, ["--streaming", "always", *extra], "read from the files",
                        prefix=pinned(args.pin, 0), inspected=not args.no_inspect)
        columns = [("one server" + (", core 0" if args.pin else ""), alone, [])]
        for executors in (1, 2):
            cluster = Cluster(args.scheduler, args.executor, executors, os.path.join(work, str(executors)), pin=args.pin)
            try:
                # Pinned, each executor has one core, so one task slot.
                slots = args.cluster_partitions or (str(executors) if args.pin else None)
                partitions = ["--cluster-partitions", slots] if slots else []
                figures = measure(args.bin, args.datasets, args.dataset, args.runs, ["--cluster", cluster.address, *partitions, *extra],
                                  f"by the cluster at {cluster.address}", prefix=pinned(args.pin, 0),
                                  inspected=not args.no_inspect)
            finally:
                memory = cluster.stop()
            cores = (" (core 1)" if executors == 1 else " (cores 0, 1)") if args.pin else ""
            columns.append((f"cluster, {executors} executor{'s' if executors > 1 else ''}{cores}", figures, memory))
        print(f"runs: {args.runs} after one warm-up; every figure the median"
              + ("; cores isolated with taskset" if args.pin else "; every process on every core"))
        print()
        # Pinned, a ratio is a speed-up (one server / cluster); unpinned, the cost of the
        # cluster (cluster / one server).
        what = "speed-up" if args.pin else "ratio"
        print("| workload | " + " | ".join(name for name, _, _ in columns) + f" | {what} 1 ex. | {what} 2 ex. |")
        print("|---|" + "---|" * (len(columns) + 2))
        base = columns[0][1][0]
        for i, (label, _, _) in enumerate(WORKLOADS):
            totals = [(c[0], c[1][0][i][1]) for c in columns]
            if len({total for _, total in totals}) != 1:
                raise SystemExit(f"{label}: the totals differ: " + ", ".join(f"{name} {total}" for name, total in totals))
            cells = [f"{c[1][0][i][0] * 1000:,.0f} ms" for c in columns]
            if args.pin:
                ratios = [f"{base[i][0] / c[1][0][i][0]:.2f}×" for c in columns[1:]]
            else:
                ratios = [f"{c[1][0][i][0] / base[i][0]:.2f}" for c in columns[1:]]
            print(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
        light = [c[1][3] for c in columns]
        print("| a count of every record | " + " | ".join(f"{t * 1000:,.0f} ms" for t in light)
              + " | " + " | ".join(f"+{(t - light[0]) * 1000:,.0f} ms" for t in light[1:]) + " |")
        inspected = [c[1][4] for c in columns]
        if not args.no_inspect:
            for name, (_, fields) in zip((c[0] for c in columns), inspected):
                if fields != inspected[0][1]:
                    raise SystemExit(f"inspect_dataset: the fields {name} gives differ from {columns[0][0]}'s")
            print("| inspect_dataset (computed) | " + " | ".join(f"{t * 1000:,.0f} ms" for t, _ in inspected) + " | "
                  + " | ".join((f"{inspected[0][0] / t:.2f}×" if args.pin else f"{t / inspected[0][0]:.2f}") for t, _ in inspected[1:]) + " |")
        print("| peak RSS, server | " + " | ".join(mib(c[1][2]) for c in columns) + " | | |")
        print("| peak RSS, executors | – | " + " | ".join(" + ".join(mib(m) for m in c[2]) for c in columns[1:]) + " | | |")
        print()
        for name, figures, _ in columns:
            print(f"Extract step, {name}: {figures[1]}")
    finally:
        if store is not None:
            store.terminate()
            store.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
