"""The same source plugin in Rust and in Python: figures, not assertions.

    python3 tests/e2e/plugin_bench.py --bin target/release/tally [--rows 10000] [--runs 5]

Both projects come from `tally plugin new` (Rust) and `tally plugin new --lang python`, each
the template that reads the `.txt` files of its dataset folder, one row per non-empty line,
citing file and line, so the two do the same work. Each is built as its author builds it
(`tally plugin build`: cargo in release for wasm32-wasip2; componentize-py), then measured on
one dataset folder of `--rows` lines in 10 files:

- the component's size;
- its first load: `tally query --limit 1` with an empty compiled-code cache (compiling the
  component, `describe`, the probe read of the whole data, the query), and a cached load (the
  same command again: the compiled code taken from the cache), medians of `--runs`; the same
  command on a Parquet dataset of as many rows is the floor (the binary's own start);
- a scan of all rows through the sandbox (`tally plugin test`: a fresh instance, the call,
  the Arrow stream checked), its time and the instance's peak memory, medians of `--runs`.

Each load's peak RSS is the `tally query` process's own (its rusage). There is no DuckDB
column: no other engine reads these plugins; the Parquet dataset of as many rows is the
yardstick. The Rust build compiles the plugin API crate's dependencies once (into
target/plugin-bench, offline from the crates the workspace fetched), about a minute on two
cores. componentize-py
comes from the environment this runs in (`pip install -r tests/e2e/requirements.txt`).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

YAML = """\
title: Text lines
source: {{url: "https://example.org/texts"}}
backend: {{kind: wasm, component: {component}, config: {{publisher: "Example Org"}}}}
fields:
- {{name: path, role: dim}}
- {{name: line, role: attr, data_type: integer}}
- {{name: text, role: attr}}
"""


def run(cmd, env=None, cwd=None, timeout=1800) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def environment(cache: Path | None = None) -> dict:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "CARGO_TARGET_DIR": str(ROOT / "target" / "plugin-bench"),
        "CARGO_NET_OFFLINE": "true",
        "TALLY_LOG": "error",
    }
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    return env


def build(tally: str, work: Path, lang: str) -> Path:
    project = work / f"bench-{lang}"
    run([tally, "plugin", "new", *(["--lang", "python"] if lang == "python" else []), f"bench-{lang}", "--path", str(project)], env=environment())
    built = run([tally, "plugin", "build", str(project)], env=environment())
    [wasm] = re.findall(r"^built (.+\.wasm)$", built.stdout, re.M)
    return Path(wasm)


def write_folder(folder: Path, rows: int, component: Path | None):
    folder.mkdir(parents=True)
    per_file = rows // 10
    for f in range(10):
        lines = [f"file {f} line {i}: the quick brown fox jumps over the lazy dog" for i in range(per_file)]
        (folder / f"part{f:02}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if component is not None:
        shutil.copyfile(component, folder / component.name)
        (folder / "dataset.yaml").write_text(YAML.format(component=component.name), encoding="utf-8")


def parquet_folder(folder: Path, rows: int):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    table = pa.table({
        "path": [f"part{i // (rows // 10):02}.txt" for i in range(rows)],
        "line": list(range(rows)),
        "text": ["the quick brown fox jumps over the lazy dog"] * rows,
    })
    pq.write_table(table, folder / "data.parquet")
    (folder / "dataset.yaml").write_text(
        "title: Text lines (Parquet)\nfields:\n- {name: path, role: dim}\n- {name: line, role: attr, data_type: integer}\n- {name: text, role: attr}\n",
        encoding="utf-8",
    )


def timed(cmd, env) -> tuple[float, float]:
    """The wall time of a command and its peak RSS in MiB (from its own rusage)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - started
    if status != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({status}): {proc.stderr.read().decode()[-3000:]}")
    return took, usage.ru_maxrss / 1024


def loads(tally: str, datasets: Path, runs: int) -> dict:
    """Medians of the first load (an empty code cache each time) and of the cached load, with
    the process's peak RSS."""
    first, cached = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            env = environment(Path(cache))
            command = [tally, "query", "--datasets", str(datasets), "texts", "--limit", "1", "--compact"]
            first.append(timed(command, env))
            cached.append(timed(command, env))
    return {
        "first": statistics.median(t for t, _ in first),
        "first_rss": max(m for _, m in first),
        "cached": statistics.median(t for t, _ in cached),
        "cached_rss": max(m for _, m in cached),
    }


SCAN = re.compile(r"scan: (\d+) rows, \d+ sources, (\d+) KiB of output in ([\d.]+) (ms|s), (\d+) MiB of memory")
DESCRIBE = re.compile(r"describe: ([\d.]+) (ms|s), (\d+) MiB of memory")


def seconds(value: str, unit: str) -> float:
    return float(value) / (1000 if unit == "ms" else 1)


def scans(tally: str, wasm: Path, folder: Path, runs: int) -> dict:
    times, describe, memory, rows, output = [], [], 0, 0, 0
    for _ in range(runs):
        out = run([tally, "plugin", "test", str(wasm), "--dataset", str(folder), "--rows", "0"], env=environment()).stdout
        m = SCAN.search(out)
        d = DESCRIBE.search(out)
        if not m or not d:
            sys.exit(f"no scan figures in:\n{out}")
        rows, output, memory = int(m.group(1)), int(m.group(2)), int(m.group(5))
        times.append(seconds(m.group(3), m.group(4)))
        describe.append(seconds(d.group(1), d.group(2)))
    return {"rows": rows, "scan": statistics.median(times), "describe": statistics.median(describe), "memory": memory, "output": output}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=str(ROOT / "target" / "release" / "tally"))
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tally = str(Path(args.bin).resolve())

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results = {}
        parquet = work / "parquet"
        parquet_folder(parquet / "texts", args.rows)
        floors = [
            timed([tally, "query", "--datasets", str(parquet), "texts", "--limit", "1", "--compact"], environment(work / "pq-cache"))
            for _ in range(args.runs)
        ]
        floor = statistics.median(t for t, _ in floors)
        floor_rss = max(m for _, m in floors)
        for lang in ("rust", "python"):
            started = time.perf_counter()
            wasm = build(tally, work, lang)
            build_time = time.perf_counter() - started
            datasets = work / f"datasets-{lang}"
            write_folder(datasets / "texts", args.rows, wasm)
            results[lang] = {
                "size": wasm.stat().st_size,
                "build": build_time,
                **loads(tally, datasets, args.runs),
                **scans(tally, wasm, datasets / "texts", args.runs),
            }

    print(
        f"{args.rows:,} rows in 10 files; medians of {args.runs}; `tally query --limit 1` on a Parquet dataset "
        f"of as many rows: {floor * 1000:.0f} ms, {floor_rss:.0f} MiB peak RSS"
    )
    print()
    print("| | Rust | Python | Python ÷ Rust |")
    print("|---|---|---|---|")
    r, p = results["rust"], results["python"]

    def row(label, key, fmt, scale=1.0):
        ratio = p[key] / r[key] if r[key] else float("nan")
        print(f"| {label} | {fmt(r[key] * scale)} | {fmt(p[key] * scale)} | {ratio:.1f}× |")

    row("component size", "size", lambda v: f"{v / 1e6:.2f} MB")
    row("`tally plugin build` (Rust: the plugin API's dependencies compiled before)", "build", lambda v: f"{v:.1f} s")
    row("first load: compile, describe, probe read, one query", "first", lambda v: f"{v * 1000:,.0f} ms")
    row("peak RSS of that `tally query`", "first_rss", lambda v: f"{v:.0f} MiB")
    row("cached load: the compiled code from the cache", "cached", lambda v: f"{v * 1000:,.0f} ms")
    row("peak RSS of that `tally query`", "cached_rss", lambda v: f"{v:.0f} MiB")
    row("`describe` (a fresh instance)", "describe", lambda v: f"{v * 1000:.1f} ms")
    row(f"one scan of {r['rows']:,} rows (a fresh instance)", "scan", lambda v: f"{v * 1000:.1f} ms")
    row("peak memory of the instance", "memory", lambda v: f"{v:.0f} MiB")
    row("output of the scan (Arrow stream)", "output", lambda v: f"{v:,.0f} KiB")


if __name__ == "__main__":
    main()
