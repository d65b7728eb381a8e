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
"""

import argparse
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


class Cluster:
    def __init__(self, scheduler, executor, executors, work):
        self.port = free_port()
        env = {**os.environ, "RUST_LOG": "warn,ballista=info"}
        self.scheduler = subprocess.Popen(
            [scheduler, "--bind-port", str(self.port)],
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
            self.executors.append(subprocess.Popen(
                [executor, "--scheduler-port", str(self.port), "--bind-port", str(free_port()),
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


def measure(binary, datasets, dataset, runs, extra, path):
    """The workloads on one server; every answer's extract step must say `path` (the column's
    path: read from the files here, or by the cluster), else the run ends."""
    server = Server(binary, datasets, None, extra)
    out = run_workloads(server, dataset, runs, said=path)
    said = server.extract(dataset, WORKLOADS[0][1])
    return out, said, server.stop().get("VmHWM", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--scheduler", required=True)
    ap.add_argument("--executor", required=True)
    ap.add_argument("--datasets", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tally-cluster-bench-")
    try:
        columns = [("one server", measure(args.bin, args.datasets, args.dataset, args.runs, ["--streaming", "always"], "read from the files"), [])]
        for executors in (1, 2):
            cluster = Cluster(args.scheduler, args.executor, executors, os.path.join(work, str(executors)))
            try:
                figures = measure(args.bin, args.datasets, args.dataset, args.runs, ["--cluster", cluster.address],
                                  f"by the cluster at {cluster.address}")
            finally:
                memory = cluster.stop()
            columns.append((f"cluster, {executors} executor{'s' if executors > 1 else ''}", figures, memory))
        print(f"runs: {args.runs} after one warm-up; every figure the median")
        print()
        print("| workload | " + " | ".join(name for name, _, _ in columns) + " | ratio 1 ex. | ratio 2 ex. |")
        print("|---|" + "---|" * (len(columns) + 2))
        base = columns[0][1][0]
        for i, (label, _, _) in enumerate(WORKLOADS):
            totals = [(c[0], c[1][0][i][1]) for c in columns]
            if len({total for _, total in totals}) != 1:
                raise SystemExit(f"{label}: the totals differ: " + ", ".join(f"{name} {total}" for name, total in totals))
            cells = [f"{c[1][0][i][0] * 1000:,.0f} ms" for c in columns]
            ratios = [f"{c[1][0][i][0] / base[i][0]:.2f}" for c in columns[1:]]
            print(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
        print("| peak RSS, server | " + " | ".join(mib(c[1][2]) for c in columns) + " | | |")
        print("| peak RSS, executors | – | " + " | ".join(" + ".join(mib(m) for m in c[2]) for c in columns[1:]) + " | | |")
        print()
        for name, figures, _ in columns:
            print(f"Extract step, {name}: {figures[1]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
