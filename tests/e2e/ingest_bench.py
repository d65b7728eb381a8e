"""Benchmark of `tally add` on the survey as its publisher ships it (not a test: it prints
figures). Wall time and peak memory (the child's own high-water mark, VmHWM, polled from /proc
while it runs) of:

- the 10 MB XLSX and the 30 MB cp932 CSV with the published definition in place;
- the same CSV with its data rows repeated ten times (300 MB), to show that memory does not
  grow with a CSV's size;
- the CSV and the XLSX without a definition (two reads: statistics, then the conversion).

    python3 tests/e2e/ingest_bench.py --bin target/release/tally --runs 3
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REFERENCE = Path(os.environ.get("TALLY_REFERENCE", Path(__file__).resolve().parents[3] / "shared" / "reference"))
XLSX = REFERENCE / "source" / "20250729_procedures-survey-results_outline_02.xlsx"
CSV = REFERENCE / "source" / "procedures-survey-r6.cp932.csv"
DEFINITION = REFERENCE / "procedures-survey-r6.dataset.yaml"


def repeated_csv(target: Path, times: int):
    """The CSV's two header rows, then its data rows `times` times (records are cut at the
    CRLF that follows a complete record: quoted fields hold bare LF only)."""
    data = CSV.read_bytes()
    first = data.index(b"\r\n") + 2
    second = data.index(b"\r\n", first) + 2
    with target.open("wb") as f:
        f.write(data[:second])
        for _ in range(times):
            f.write(data[second:])


def high_water(pid: int) -> float | None:
    """VmHWM of a running process in MiB (the peak of its own address space: the rusage of
    a child also counts the parent's pages it inherited when forked)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def run(binary: str, args: list[str]) -> tuple[float, float]:
    started = time.perf_counter()
    proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0.0
    while True:
        # The process stays a zombie until waited for, but its memory is gone by then:
        # read VmHWM while it runs.
        hwm = high_water(proc.pid)
        if hwm:
            peak = max(peak, hwm)
        _, status = os.waitpid(proc.pid, os.WNOHANG)
        if _:
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{binary} {' '.join(args)} failed")
    return elapsed, peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/tally")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--times", type=int, default=10, help="repetitions of the CSV's rows for the large CSV")
    ap.add_argument(
        "--duckdb-python",
        help="a Python with the duckdb package: converts the same CSV (transcoded to UTF-8, which DuckDB needs) to zstd Parquet beside Tally, as a yardstick; its types are inferred from every row (sample_size=-1: from the first 20,480 it takes 手続ID for an integer and fails at row 59,468)",
    )
    args = ap.parse_args()
    for p in (XLSX, CSV, DEFINITION):
        if not p.is_file():
            raise SystemExit(f"missing reference file {p}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        big = tmp / f"procedures-x{args.times}.cp932.csv"
        repeated_csv(big, args.times)
        cases = [
            ("xlsx, definition kept", XLSX, True),
            ("csv (cp932), definition kept", CSV, True),
            (f"csv ×{args.times} ({big.stat().st_size / 1e6:.0f} MB), definition kept", big, True),
            ("csv (cp932), skeleton", CSV, False),
            ("xlsx, skeleton", XLSX, False),
        ]
        print(f"{'case':<44} {'input MB':>8} {'wall s (median)':>16} {'min':>6} {'peak RSS MiB':>13}")
        for name, file, keep in cases:
            times, peaks = [], []
            for _ in range(args.runs):
                datasets = tmp / "datasets"
                shutil.rmtree(datasets, ignore_errors=True)
                (datasets / "procedures").mkdir(parents=True)
                if keep:
                    shutil.copy(DEFINITION, datasets / "procedures" / "dataset.yaml")
                t, peak = run(args.bin, ["add", "procedures", str(file), "--datasets", str(datasets), "--compact"])
                times.append(t)
                peaks.append(peak)
            print(
                f"{name:<44} {file.stat().st_size / 1e6:>8.1f} {statistics.median(times):>16.2f} {min(times):>6.2f} {max(peaks):>13.1f}"
            )
        if args.duckdb_python:
            script = (
                "import duckdb, sys\n"
                "duckdb.sql(f\"COPY (SELECT * FROM read_csv('{sys.argv[1]}', header=true, sample_size=-1)) "
                "TO '{sys.argv[2]}' (FORMAT parquet, COMPRESSION zstd)\")\n"
            )
            for label, source in [("csv", CSV), (f"csv ×{args.times}", big)]:
                utf8 = tmp / f"{source.stem}.utf8.csv"
                with source.open("rb") as src, utf8.open("w", encoding="utf-8", newline="") as dst:
                    src.readline()  # the title row
                    for line in src:
                        dst.write(line.decode("cp932", errors="replace"))
                times, peaks = [], []
                for _ in range(args.runs):
                    out = tmp / "duck.parquet"
                    out.unlink(missing_ok=True)
                    t, peak = run(args.duckdb_python, ["-c", script, str(utf8), str(out)])
                    times.append(t)
                    peaks.append(peak)
                name = f"DuckDB: {label} (UTF-8) → zstd Parquet"
                print(
                    f"{name:<44} {utf8.stat().st_size / 1e6:>8.1f} {statistics.median(times):>16.2f} {min(times):>6.2f} {max(peaks):>13.1f}"
                )
                utf8.unlink()


if __name__ == "__main__":
    main()
