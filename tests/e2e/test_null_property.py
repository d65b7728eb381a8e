"""No aggregate over no non-null value is 0 (issue 57): generated area × year tables with nulls
(whole groups without a value, blanked latest periods, missing area-years, a weight missing
where its rate is not), each metric kind computed by the server and by DuckDB on the same
Parquet file, compared value by value. Seeded, so a failure names the table it came from and
repeats."""

import json
import random

import anyio
import duckdb
import pytest
from mcp import Client

from conftest import HttpServer

pytestmark = pytest.mark.anyio

TIMEOUT = 120
TABLES = 8

DEFINITION = """title: 生成した表 {i}
retrieved_at: "2026-12-01"
fields:
- {{name: 地域, role: dim}}
- {{name: 年, role: time, grain: year}}
- {{name: 件数, role: measure, data_type: integer, aggregation: flow}}
- {{name: 金額, role: measure, data_type: number}}
- {{name: 人口, role: measure, data_type: integer, aggregation: stock}}
- {{name: 率, role: measure, data_type: number, aggregation: rate, weight: 人口}}
computed_measures:
- {{name: 千人当たり件数, mode: sum_ratio, numerator: 件数, denominator: 人口, scale: 1000}}
"""

METRICS = ["count", "sum:件数", "avg:金額", "min:金額", "max:件数", "last:人口", "avg:率", "avg:千人当たり件数"]


def generate(rng: random.Random) -> list[tuple]:
    """Rows (area, year, count, amount, population, rate) with nulls of every kind."""
    areas = [f"地域{k}" for k in range(rng.randint(2, 6))]
    years = list(range(2015, 2015 + rng.randint(2, 5)))
    no_counts = rng.choice(areas)  # an area whose 件数 is never known
    rows = []
    for a in areas:
        for y in years:
            if rng.random() < 0.15 and y != years[0]:
                continue  # a missing area-year
            def maybe(v, p):
                return None if rng.random() < p else v
            count = None if a == no_counts else maybe(rng.randint(0, 50), 0.3)
            amount = maybe(round(rng.uniform(-5, 100), 3), 0.4)
            population = maybe(rng.randint(1, 1000), 0.25 if y == years[-1] else 0.1)
            rate = maybe(round(rng.uniform(0, 10), 2), 0.2)
            rows.append((a, y, count, amount, population, rate))
    return rows


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("nulls") / "datasets"
    con = duckdb.connect()
    made = {}
    for i in range(TABLES):
        rows = generate(random.Random(57_000 + i))
        folder = root / f"t{i}"
        folder.mkdir(parents=True)
        (folder / "dataset.yaml").write_text(DEFINITION.format(i=i), encoding="utf-8")
        con.execute("CREATE OR REPLACE TABLE t (地域 VARCHAR, 年 BIGINT, 件数 BIGINT, 金額 DOUBLE, 人口 BIGINT, 率 DOUBLE)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", rows)
        con.execute(f"COPY t TO '{folder / 'data.parquet'}' (FORMAT parquet)")
        made[f"t{i}"] = folder / "data.parquet"
    return root, made


def expected(path) -> dict:
    """Each metric per area, as SQL computes it over the same file."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
    out = {}
    for area, count, s, avg, mn, mx, weighted, ratio in con.execute("""
        SELECT 地域, count(*), sum(件数), avg(金額), min(金額), max(件数),
               sum(率 * 人口) FILTER (WHERE 率 IS NOT NULL AND 人口 IS NOT NULL)
                     / nullif(sum(人口) FILTER (WHERE 率 IS NOT NULL AND 人口 IS NOT NULL), 0),
               sum(件数) * 1000.0 / nullif(sum(人口), 0)
        FROM t GROUP BY 地域""").fetchall():
        out[area] = {"count": count, "sum:件数": s, "avg:金額": avg, "min:金額": mn, "max:件数": mx,
                     "avg:率": weighted, "avg:千人当たり件数": ratio, "last:人口": None}
    for area, value in con.execute("""
        SELECT 地域, sum(人口) FROM t
        WHERE (地域, 年) IN (SELECT 地域, max(年) FROM t WHERE 人口 IS NOT NULL GROUP BY 地域)
        GROUP BY 地域""").fetchall():
        out[area]["last:人口"] = value
    return out


async def test_every_metric_kind_over_nulls_equals_duckdb(tables):
    root, made = tables
    server = HttpServer(datasets=str(root))
    try:
        with anyio.fail_after(TIMEOUT * 2):
            async with Client(server.url, mode="2026-07-28", cache=None, read_timeout_seconds=TIMEOUT) as c:
                nulls_seen = 0
                for dataset, path in made.items():
                    r = await c.call_tool("summarize_records", {
                        "dataset_id": dataset, "metrics": METRICS, "group_by": ["地域"],
                        "where": {"年": "2015..2019"}, "limit": 100,
                    })
                    answer = json.loads(r.content[0].text)
                    assert not r.is_error, (dataset, answer)
                    columns = answer["data"]["columns"]
                    want = expected(path)
                    got = {row[0]: {m: row[columns.index(m)] for m in METRICS} for row in answer["data"]["rows"]}
                    assert set(got) == set(want), dataset
                    for area, metrics in want.items():
                        for m, value in metrics.items():
                            actual = got[area][m]
                            if value is None:
                                nulls_seen += 1
                                assert actual is None, (dataset, area, m, actual)
                            else:
                                # Averages are rounded to 2 decimals, ratios to 4 (half a unit of
                                # the last place apart at most); everything else is exact.
                                places = {"avg:金額": 2, "avg:率": 2, "avg:千人当たり件数": 4}.get(m)
                                tolerance = 0.5 * 10 ** -places + 1e-9 if places else 1e-9
                                assert actual is not None and abs(actual - value) <= tolerance, (dataset, area, m, actual, value)
                    # Every null is said.
                    said = " ".join(answer["provenance"]["warnings"])
                    for area, metrics in got.items():
                        for m, value in metrics.items():
                            if value is None:
                                assert f"`{m}` is null" in said and area in said, (dataset, m, area, said)
                # The generated tables do hold groups without a value, so the property was tested.
                assert nulls_seen >= TABLES, nulls_seen
    finally:
        server.stop()
