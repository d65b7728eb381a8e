"""What answering a panel without silent gaps costs (issue 57): figures, not assertions.

    python3 tests/e2e/panel_bench.py --bin target/release/tally [--rows 750000 7500000] [--calls 15]

For each size it writes an area × year panel (20 years, 47 regions, one area in 97 blank in
its last year, one region without a record in the last year, nulls in both measures) to
Parquet with DuckDB, serves it with `tally serve --http` on 127.0.0.1, and times, interleaved
round after round, the summaries whose new passes issue 57 added, each beside DuckDB on the
same file (the totals compared):

- `range`: a flow by region over a year range (the periods are read to hold the range);
- `latest`: a stock by region with no condition on the year (the latest year, and the regions
  it leaves out read in one more pass);
- `last`: `last:` of the stock by region (each region's latest year with a value);
- `pooled`: a per-1,000 ratio by region over a range (its span read to say it pools);
- `plain`: a flow by year (none of those passes), the server's own overhead beside DuckDB.

It prints the median and p90 of each, DuckDB's median, the ratio, and the server's and
DuckDB's peak memory.
"""

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from policy_bench import Session, interleaved, peak_rss_mib, timed  # noqa: E402

TOKEN = "panel-bench-token-0123456789abcdef"
YEARS = 20
DEFINITION = """title: 地域別パネル（ベンチマーク）
retrieved_at: "2026-12-06"
fields:
- {name: 地域, role: dim}
- {name: 地方, role: dim}
- {name: 年, role: time, grain: year}
- {name: 件数, role: measure, data_type: integer, aggregation: flow}
- {name: 人口, role: measure, data_type: integer, aggregation: stock}
computed_measures:
- {name: 千人当たり件数, mode: sum_ratio, numerator: 件数, denominator: 人口, scale: 1000}
"""

WORKLOADS = {
    "range": (
        {"metrics": ["sum:件数"], "group_by": ["地方"], "where": {"年": "2011..2020"}},
        "SELECT 地方, sum(件数) FROM t WHERE 年 BETWEEN 2011 AND 2020 GROUP BY 1",
    ),
    "latest": (
        {"metrics": ["sum:人口"], "group_by": ["地方"]},
        "SELECT 地方, sum(人口) FROM t WHERE 年 = (SELECT max(年) FROM t) GROUP BY 1",
    ),
    "last": (
        {"metrics": ["last:人口"], "group_by": ["地方"]},
        "SELECT t.地方, sum(人口) FROM t JOIN (SELECT 地方, max(年) AS y FROM t WHERE 人口 IS NOT NULL GROUP BY 1) m"
        " ON t.地方 = m.地方 AND t.年 = m.y GROUP BY 1",
    ),
    "pooled": (
        {"metrics": ["avg:千人当たり件数"], "group_by": ["地方"], "where": {"年": "2011..2020"}},
        "SELECT 地方, round(sum(件数) * 1000.0 / sum(人口), 4) FROM t WHERE 年 BETWEEN 2011 AND 2020 GROUP BY 1",
    ),
    "plain": (
        {"metrics": ["sum:件数"], "group_by": ["年"]},
        "SELECT 年, sum(件数) FROM t GROUP BY 1",
    ),
}


def write_panel(folder: Path, rows: int) -> Path:
    import duckdb

    folder.mkdir(parents=True)
    (folder / "dataset.yaml").write_text(DEFINITION, encoding="utf-8")
    areas = rows // YEARS
    parquet = folder / "data.parquet"
    duckdb.connect().execute(f"""
        COPY (
          SELECT 'A' || a AS 地域, 'R' || (a % 47) AS 地方, y AS 年,
                 CASE WHEN a % 7 = 0 THEN NULL ELSE (a * 31 + y) % 100 END AS 件数,
                 CASE WHEN y = 2020 AND a % 97 = 0 THEN NULL ELSE 1000 + (a * 17 + y) % 5000 END AS 人口
          FROM range({areas}) r(a), range(2001, 2001 + {YEARS}) s(y)
          WHERE NOT (a % 47 = 46 AND y = 2020)
        ) TO '{parquet}' (FORMAT parquet, ROW_GROUP_SIZE 122880)""")
    return parquet


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="target/release/tally")
    parser.add_argument("--rows", type=int, nargs="+", default=[750_000, 7_500_000])
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args()
    import duckdb

    print(f"{args.calls} calls each after a warm-up, interleaved; milliseconds, median / p90; HTTP on 127.0.0.1.\n")
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            parquet = write_panel(tmp / "datasets" / "panel", rows)
            (tmp / "tokens").write_text(f"bench {TOKEN}\n", encoding="utf-8")
            proc = subprocess.Popen(
                [args.bin, "serve", "--http", "127.0.0.1:0", "--datasets", str(tmp / "datasets"), "--watch", "off",
                 "--token-file", str(tmp / "tokens"), "--rate-limit", "100000", "--rate-burst", "100000"],
                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                env={"TALLY_LOG": "warn", "PATH": "/usr/bin:/bin"},
            )
            port = None
            for line in proc.stderr:
                if "serving MCP at http://127.0.0.1:" in line:
                    port = int(line.split("127.0.0.1:")[1].split("/")[0])
                    break
            assert port, "the server did not start"
            session = Session(f"http://127.0.0.1:{port}/mcp", TOKEN)
            con = duckdb.connect()
            con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{parquet}')")
            t = time.perf_counter()
            session.call("summarize_records", {"dataset_id": "panel", "metrics": ["count"]})
            first = (time.perf_counter() - t) * 1000
            calls = {}
            for name, (arguments, sql) in WORKLOADS.items():
                got = session.call("summarize_records", {"dataset_id": "panel", "limit": 100, **arguments})
                want = dict(con.execute(sql).fetchall())
                have = {r[0]: r[1] for r in got["rows"]}
                assert set(have) == set(want) and all(
                    (a is None and b is None) or abs(float(a) - float(b)) < 1e-6 for a, b in ((have[k], want[k]) for k in want)
                ), (name, list(have.items())[:3], list(want.items())[:3])
                calls[name] = lambda a=arguments: session.call("summarize_records", {"dataset_id": "panel", "limit": 100, **a})
            figures = interleaved(calls, args.calls)
            print(f"### {rows:,} rows (first call, preparing the table: {first:,.0f} ms)\n")
            print("| workload | Tally | DuckDB | Tally / DuckDB |\n|---|---|---|---|")
            for name, (_, sql) in WORKLOADS.items():
                duck = timed(lambda s=sql: con.execute(s).fetchall(), args.calls)[0]
                median, p90 = figures[name]
                print(f"| {name} | {median:.1f} / {p90:.1f} | {duck:.1f} | {median / duck:.2f} |")
            duck_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"\nTotals equal DuckDB's for every workload. Peak RSS: server {peak_rss_mib(proc.pid):,.0f} MiB; "
                  f"this process with DuckDB {duck_rss:,.0f} MiB.\n")
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
