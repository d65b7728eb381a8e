"""Benchmark of charts (not a test: it prints figures). Wall time and peak memory (the
child's maximum resident set, from wait4) of `tally summarize` without a chart, with
`--chart .svg` and with `--chart .png`, and of DuckDB grouping the same Parquet file the same
way (the yardstick for the grouping; DuckDB draws nothing), on:

- the real survey (75,071 rows), by 所管府省庁 (25 groups) and by 手続名 (every name: a
  summary of 10,000 groups, the most a chart is asked to bound);
- a synthetic table ten times its size (`tally-synth --rows 750710`), the same groupings (手続名
  has some 300,000 names there: `--max-groups` and `--call-memory-mb` are raised so the summary runs; the chart still
  draws the 100 largest).

    python3 tests/e2e/chart_bench.py --bin target/release/tally --synth target/release/tally-synth --runs 3

DuckDB is the `duckdb` Python package (`pip install duckdb`); without it its rows are left out.
Each tally run is a fresh process with the cache of prepared data warm (one run first).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFERENCE = Path(os.environ.get("TALLY_REFERENCE") or Path(__file__).resolve().parents[3] / "shared" / "reference")


def timed(argv: list[str]) -> tuple[float, float]:
    """Seconds and peak resident MiB of one child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(argv)}")
    return elapsed, usage.ru_maxrss / 1024.0


DUCKDB = """
import duckdb, sys
con = duckdb.connect()
con.execute("SET threads TO 2")
rows = con.execute('SELECT "{field}", count(*) AS n FROM read_parquet(?) GROUP BY 1 ORDER BY n DESC LIMIT 10000', [sys.argv[1]]).fetchall()
assert rows
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/tally")
    ap.add_argument("--synth", default="target/release/tally-synth")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    try:
        import duckdb  # noqa: F401

        has_duckdb = True
    except ImportError:
        has_duckdb = False
        print("(duckdb is not installed: its rows are left out)")
    work = Path(tempfile.mkdtemp(prefix="tally-chart-bench-"))
    try:
        datasets = work / "datasets"
        (datasets / "survey").mkdir(parents=True)
        shutil.copyfile(REFERENCE / "procedures" / "procedures-survey-r6.parquet", datasets / "survey" / "data.parquet")
        shutil.copyfile(REFERENCE / "procedures-survey-r6.dataset.yaml", datasets / "survey" / "dataset.yaml")
        subprocess.run(
            [a.synth, "--stats", str(REFERENCE / "procedures-survey-r6.stats.json"), "--out", str(datasets / "x10"), "--rows", "750710"],
            check=True, stdout=subprocess.DEVNULL,
        )
        cache = ["--cache-dir", str(work / "cache")]
        print(f"{'data':<8} {'grouping':<12} {'what':<14} {'median s':>9} {'peak MiB':>9}")
        for dataset, rows in (("survey", "75k"), ("x10", "751k")):
            for field in ("所管府省庁", "手続名"):
                base = [a.bin, "summarize", dataset, "--datasets", str(datasets), "--group-by", field, "--limit", "10000", "--compact", "--max-groups", "1000000", "--call-memory-mb", "4096", *cache]
                subprocess.run(base, check=True, stdout=subprocess.DEVNULL)  # prepare and cache
                cases = [("no chart", base), ("--chart .svg", [*base, "--chart", str(work / "c.svg")]), ("--chart .png", [*base, "--chart", str(work / "c.png")])]
                if has_duckdb:
                    cases.append(("DuckDB", [sys.executable, "-c", DUCKDB.format(field=field), str(datasets / dataset / "data.parquet")]))
                for what, argv in cases:
                    runs = [timed(argv) for _ in range(a.runs)]
                    t = statistics.median(r[0] for r in runs)
                    m = max(r[1] for r in runs)
                    print(f"{rows:<8} {field:<12} {what:<14} {t:>9.3f} {m:>9.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
