"""Statistical tables (issue 41) on the real SSDSE files, served with the definitions written
for them (tests/data/ssdse: SSDSE-B, 47 prefectures × 2009–2020 with a time field, stocks,
flows, rates and per-1,000 measures; SSDSE-E, 47 prefectures with a rate weighted by its
declared weight), driven through the official Python MCP client and checked value by value
against DuckDB on the same Parquet files.

The mistakes a model makes with such tables are refused or said: the population of a
prefecture is of the latest year (with a warning), never twelve years added together; a stock
summed over years, a rate summed and a rate averaged without a weight are refused with the
reason and what would work. The data files are read from the reference folder beside the
repository (skipped when absent, failed under CI=true)."""

import json
import os
import shutil

import anyio
import pytest
from mcp import Client

from conftest import REFERENCE, ROOT, HttpServer, tally_bin

pytestmark = pytest.mark.anyio

TIMEOUT = 120
SSDSE = REFERENCE / "ssdse"
FILES = {"ssdse-b": "ssdse_b_2023_prefecture_year.parquet", "ssdse-e": "ssdse_e_2023_prefectures.parquet"}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    if not all((SSDSE / f).is_file() for f in FILES.values()):
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the SSDSE reference files are missing")
        pytest.skip("the SSDSE reference files are absent")
    root = tmp_path_factory.mktemp("ssdse") / "datasets"
    for dataset, parquet in FILES.items():
        (root / dataset).mkdir(parents=True)
        shutil.copyfile(ROOT / "tests/data/ssdse" / dataset / "dataset.yaml", root / dataset / "dataset.yaml")
        shutil.copyfile(SSDSE / parquet, root / dataset / "data.parquet")
    # The prefecture table SSDSE-B is related to (地域コード → 地方), written from
    # tests/data/ssdse/prefectures/prefectures.csv.
    write_prefectures(root / "prefectures", PREFECTURES_CSV.read_text(encoding="utf-8"))
    # The same relation to a table whose key repeats: refused, naming the key.
    doubled = PREFECTURES_CSV.read_text(encoding="utf-8") + "R13000,東京都,中部\n"
    write_prefectures(root / "prefectures-doubled", doubled)
    # A relation to a dataset that is not served: said in the log when the datasets are read.
    (root / "ssdse-b-nowhere").mkdir()
    (root / "ssdse-b-nowhere" / "dataset.yaml").write_text(
        (ROOT / "tests/data/ssdse/ssdse-b/dataset.yaml").read_text(encoding="utf-8").replace(
            "- dataset: prefectures", "- dataset: prefectures-nowhere"), encoding="utf-8")
    shutil.copyfile(SSDSE / FILES["ssdse-b"], root / "ssdse-b-nowhere" / "data.parquet")
    (root / "ssdse-b-doubled").mkdir()
    definition = (ROOT / "tests/data/ssdse/ssdse-b/dataset.yaml").read_text(encoding="utf-8")
    (root / "ssdse-b-doubled" / "dataset.yaml").write_text(
        definition.replace("- dataset: prefectures", "- dataset: prefectures-doubled"), encoding="utf-8")
    shutil.copyfile(SSDSE / FILES["ssdse-b"], root / "ssdse-b-doubled" / "data.parquet")
    # A related table past the rows a lookup may read (100,000): refused, saying so.
    import duckdb as _duckdb

    (root / "keys-too-many").mkdir()
    (root / "keys-too-many" / "dataset.yaml").write_text(
        "title: 多すぎる鍵\nretrieved_at: \"2026-12-01\"\nfields:\n- {name: 地域コード, role: id}\n- {name: 地方, role: dim}\n",
        encoding="utf-8")
    _duckdb.connect().execute(
        "COPY (SELECT 'K' || i AS 地域コード, '地方' || (i % 8) AS 地方 FROM range(100001) t(i))"
        f" TO '{root / 'keys-too-many' / 'data.parquet'}' (FORMAT parquet)"
    )
    (root / "ssdse-b-too-many").mkdir()
    (root / "ssdse-b-too-many" / "dataset.yaml").write_text(
        (ROOT / "tests/data/ssdse/ssdse-b/dataset.yaml").read_text(encoding="utf-8").replace(
            "- dataset: prefectures", "- dataset: keys-too-many"), encoding="utf-8")
    shutil.copyfile(SSDSE / FILES["ssdse-b"], root / "ssdse-b-too-many" / "data.parquet")
    import duckdb

    # SSDSE-B with gaps (issue 57): 沖縄県 has no 2020 record, 青森県's 2020 population is
    # blanked, 岩手県's births are blanked in every year.
    (root / "ssdse-b-gaps").mkdir()
    shutil.copyfile(ROOT / "tests/data/ssdse/ssdse-b/dataset.yaml", root / "ssdse-b-gaps" / "dataset.yaml")
    duckdb.connect().execute(
        f"COPY (SELECT * REPLACE ("
        f"  CASE WHEN 都道府県 = '青森県' AND 年度 = 2020 THEN NULL ELSE 総人口 END AS 総人口,"
        f"  CASE WHEN 都道府県 = '岩手県' THEN NULL ELSE 出生数 END AS 出生数)"
        f" FROM read_parquet('{SSDSE / FILES['ssdse-b']}') WHERE NOT (都道府県 = '沖縄県' AND 年度 = 2020))"
        f" TO '{root / 'ssdse-b-gaps' / 'data.parquet'}' (FORMAT parquet)"
    )
    # Periods with gaps: 東 has 2018–2020, 西 only 2018–2019, so each area's latest differs.

    (root / "gaps").mkdir()
    (root / "gaps" / "dataset.yaml").write_text(GAPS_YAML, encoding="utf-8")
    duckdb.connect().execute(
        "COPY (SELECT * FROM (VALUES ('東', 2018, 100), ('東', 2019, 110), ('東', 2020, 120),"
        " ('西', 2018, 50), ('西', 2019, NULL), ('西', 2019, 55)) t(地域, 年, 人口))"
        f" TO '{root / 'gaps' / 'data.parquet'}' (FORMAT parquet)"
    )
    return root


GAPS_YAML = """title: 欠けた年のある人口
retrieved_at: "2026-12-01"
fields:
- {name: 地域, role: dim}
- {name: 年, role: time, grain: year}
- {name: 人口, role: measure, data_type: integer, aggregation: stock, unit: 人}
"""

PREFECTURES_CSV = ROOT / "tests/data/ssdse/prefectures/prefectures.csv"


def write_prefectures(folder, csv_text: str):
    import duckdb

    folder.mkdir(parents=True)
    shutil.copyfile(ROOT / "tests/data/ssdse/prefectures/dataset.yaml", folder / "dataset.yaml")
    (folder / "prefectures.csv").write_text(csv_text, encoding="utf-8")
    duckdb.connect().execute(
        f"COPY (SELECT * FROM read_csv('{folder / 'prefectures.csv'}', header = true, all_varchar = true))"
        f" TO '{folder / 'data.parquet'}' (FORMAT parquet)"
    )
    (folder / "prefectures.csv").unlink()


@pytest.fixture(scope="module")
def server(datasets):
    s = HttpServer(datasets=str(datasets))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def duck():
    import duckdb

    con = duckdb.connect()
    for dataset, parquet in FILES.items():
        con.execute(f"CREATE VIEW \"{dataset}\" AS SELECT * FROM read_parquet('{SSDSE / parquet}')")
    con.execute(
        f"CREATE VIEW \"ssdse-b-gaps\" AS SELECT * REPLACE ("
        f"  CASE WHEN 都道府県 = '青森県' AND 年度 = 2020 THEN NULL ELSE 総人口 END AS 総人口,"
        f"  CASE WHEN 都道府県 = '岩手県' THEN NULL ELSE 出生数 END AS 出生数)"
        f" FROM read_parquet('{SSDSE / FILES['ssdse-b']}') WHERE NOT (都道府県 = '沖縄県' AND 年度 = 2020)"
    )
    con.execute(f"CREATE VIEW prefectures AS SELECT * FROM read_csv('{PREFECTURES_CSV}', header = true, all_varchar = true)")
    return con


async def call(server: HttpServer, tool: str, arguments: dict) -> tuple[bool, dict]:
    with anyio.fail_after(TIMEOUT):
        async with Client(server.url, mode="2026-07-28", cache=None, read_timeout_seconds=TIMEOUT) as c:
            r = await c.call_tool(tool, arguments)
            return bool(r.is_error), json.loads(r.content[0].text)


def warnings(envelope: dict) -> list[str]:
    return [w for w in envelope["provenance"].get("warnings", []) if "retrieval date" not in w]


async def test_the_population_of_a_prefecture_is_of_the_latest_year_and_said(server, duck):
    error, answer = await call(server, "summarize_records", {"dataset_id": "ssdse-b", "metrics": ["sum:総人口"], "where": {"都道府県": ["北海道"]}})
    assert not error, answer
    ((value, _nulls),) = answer["data"]["rows"]
    (expected,) = duck.execute(
        'SELECT 総人口 FROM "ssdse-b" WHERE 都道府県 = \'北海道\' AND 年度 = (SELECT max(年度) FROM "ssdse-b")'
    ).fetchone()
    assert value == expected == 5224614
    (said,) = [w for w in warnings(answer) if "latest period" in w]
    assert "年度" in said and "2020" in said, said
    # The call as answered names the year, so asked again it asks for that year.
    assert answer["provenance"]["query"]["arguments"]["where"]["年度"] == {"$eq": 2020}
    metric = answer["data"]["metrics"][0]
    assert metric["unit"] == "人" and metric["aggregation"] == "stock", metric


async def test_the_mistakes_a_model_makes_are_refused_with_what_works(server):
    cases = [
        # The population summed over twelve years.
        ({"metrics": ["sum:総人口"], "where": {"年度": "2009..2020"}, "group_by": ["都道府県"]}, "stock", "group_by `年度`"),
        # A rate summed.
        ({"metrics": ["sum:合計特殊出生率"], "group_by": ["年度"]}, "is a rate", "min:合計特殊出生率"),
        # A rate averaged over prefectures with no weight to average it by.
        ({"metrics": ["avg:合計特殊出生率"], "where": {"年度": 2020}}, "unweighted average", "weight"),
    ]
    for arguments, reason, fix in cases:
        error, answer = await call(server, "summarize_records", {"dataset_id": "ssdse-b", **arguments})
        assert error, (arguments, answer)
        refusal = answer["error"]
        assert refusal["code"] == "not_additive", refusal
        assert reason in refusal["message"] and fix in refusal["hint"], refusal


async def test_a_stock_by_year_and_a_flow_over_years_equal_duckdb(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["sum:総人口", "sum:出生数"], "group_by": ["年度"],
        "where": {"年度": "2010..2020"}, "order_by": ["年度"], "limit": 20,
    })
    assert not error, answer
    columns = answer["data"]["columns"]
    got = {int(r[columns.index("年度")]): (r[columns.index("sum:総人口")], r[columns.index("sum:出生数")]) for r in answer["data"]["rows"]}
    expected = {y: (p, b) for y, p, b in duck.execute(
        'SELECT 年度, sum(総人口), sum(出生数) FROM "ssdse-b" WHERE 年度 BETWEEN 2010 AND 2020 GROUP BY 年度'
    ).fetchall()}
    assert got == expected and len(got) == 11
    # Births over all twelve years by prefecture: a flow adds up over years.
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["sum:出生数"], "group_by": ["都道府県"], "where": {"年度": "2009..2020"}, "limit": 47,
    })
    assert not error, answer
    got = {r[0]: r[1] for r in answer["data"]["rows"]}
    expected = dict(duck.execute('SELECT 都道府県, sum(出生数) FROM "ssdse-b" GROUP BY 都道府県').fetchall())
    assert got == expected and len(got) == 47


async def test_births_per_1000_by_prefecture_equal_duckdb(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["avg:人口千人当たり出生数"], "group_by": ["都道府県"],
        "where": {"年度": "2020年"}, "limit": 47,
    })
    assert not error, answer
    got = {r[0]: r[1] for r in answer["data"]["rows"]}
    expected = dict(duck.execute(
        'SELECT 都道府県, round(sum(出生数) * 1000.0 / sum(総人口), 4) FROM "ssdse-b" WHERE 年度 = 2020 GROUP BY 都道府県'
    ).fetchall())
    assert got == pytest.approx(expected, abs=1e-9) and len(got) == 47
    metric = answer["data"]["metrics"][0]
    assert metric["unit"] == "‰" and "× 1000" in metric["description"], metric
    assert {"parameter": "where.年度", "input": "2020年", "canonical": "2020"} in answer["data"]["resolved_fields"]


async def test_a_rate_is_averaged_by_its_weight_as_duckdb_computes_it(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-e", "metrics": ["avg:ごみのリサイクル率", "avg:1人1日当たりの排出量"],
    })
    assert not error, answer
    row = dict(zip(answer["data"]["columns"], answer["data"]["rows"][0]))
    recycling, per_person = duck.execute(
        'SELECT round(sum(ごみのリサイクル率 * "ごみ総排出量（総量）") / sum("ごみ総排出量（総量）"), 2),'
        ' round(sum("1人1日当たりの排出量" * 総人口) / sum(総人口), 2) FROM "ssdse-e"'
    ).fetchone()
    assert row["avg:ごみのリサイクル率"] == pytest.approx(recycling, abs=1e-9)
    assert row["avg:1人1日当たりの排出量"] == pytest.approx(per_person, abs=1e-9)
    # Not the plain mean of the prefectures' rates, which a model would compute.
    (plain,) = duck.execute('SELECT round(avg(ごみのリサイクル率), 2) FROM "ssdse-e"').fetchone()
    assert row["avg:ごみのリサイクル率"] != plain
    described = {m["column"]: m for m in answer["data"]["metrics"]}["avg:ごみのリサイクル率"]
    assert "weighted by ごみ総排出量（総量）" in described["description"] and described["unit"] == "%", described


async def test_the_latest_period_asked_for_in_a_query(server, duck):
    error, answer = await call(server, "query_records", {
        "dataset_id": "ssdse-b", "where": {"年度": "latest", "都道府県": ["東京都"]}, "select": ["年度", "総人口"],
    })
    assert not error, answer
    (expected,) = duck.execute('SELECT 総人口 FROM "ssdse-b" WHERE 年度 = 2020 AND 都道府県 = \'東京都\'').fetchone()
    assert answer["data"]["rows"] == [[2020, expected]]
    assert {"parameter": "where.年度", "input": "latest", "canonical": "2020"} in answer["data"]["resolved_fields"]


async def test_inspect_shows_periods_units_and_how_measures_add_up(server):
    error, answer = await call(server, "inspect_dataset", {"dataset_id": "ssdse-b"})
    assert not error, answer
    fields = {f["name"]: f for f in answer["data"]["fields"]}
    periods = fields["年度"]["periods"]
    assert (periods["grain"], periods["first"], periods["latest"], periods["count"]) == ("fiscal_year", 2009, 2020, 12), periods
    assert all(p["count"] == 47 for p in periods["records"]), periods
    assert (fields["総人口"]["aggregation"], fields["総人口"]["unit"]) == ("stock", "人")
    assert (fields["出生数"]["aggregation"], fields["合計特殊出生率"]["aggregation"]) == ("flow", "rate")
    error, answer = await call(server, "inspect_dataset", {"dataset_id": "ssdse-e"})
    fields = {f["name"]: f for f in answer["data"]["fields"]}
    assert fields["ごみのリサイクル率"]["weight"] == "ごみ総排出量（総量）", fields["ごみのリサイクル率"]


async def test_the_2010_to_2020_change_by_region_equals_duckdb(server, duck):
    """The population of each region (地方, from the prefecture table related by 地域コード)
    in 2010 and 2020, its change and percent change: computed by the server, equal to DuckDB
    joining the same tables."""
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["sum:総人口"], "group_by": ["地方"],
        "compare": {"from": 2010, "to": 2020}, "rank": True,
    })
    assert not error, answer
    data = answer["data"]
    columns = data["columns"]
    assert columns[:5] == ["地方", "sum:総人口 (2010)", "sum:総人口 (2020)", "sum:総人口 change", "sum:総人口 change %"], columns
    got = {r[0]: tuple(r[1:5]) + (r[columns.index("rank (2020)")],) for r in data["rows"]}
    expected = {}
    for region, before, after in duck.execute(
        'SELECT p.地方, sum(b.総人口) FILTER (WHERE b.年度 = 2010), sum(b.総人口) FILTER (WHERE b.年度 = 2020)'
        ' FROM "ssdse-b" b JOIN prefectures p ON b.地域コード = p.地域コード GROUP BY p.地方'
    ).fetchall():
        expected[region] = (before, after, after - before, round((after - before) / before * 100, 2))
    ranked = sorted(expected, key=lambda r: -expected[r][1])
    expected = {r: v + (ranked.index(r) + 1,) for r, v in expected.items()}
    assert got == expected and len(got) == 8, (got, expected)
    # Ordered by the later period, largest first.
    assert [r[0] for r in data["rows"]] == ranked
    kinds = {m["column"]: m["kind"] for m in data["metrics"]}
    assert (kinds["sum:総人口 change"], kinds["sum:総人口 change %"], kinds["rank (2020)"]) == ("change", "percent_change", "rank")
    # Both datasets are cited, and the lookup is a step.
    sources = {s["id"] for s in answer["provenance"]["sources"]}
    assert {"dataset:ssdse-b", "dataset:prefectures"} <= sources, sources
    assert any("`prefectures`" in t["description"] for t in answer["provenance"]["transformations"])
    # The call as answered asks the same again.
    arguments = answer["provenance"]["query"]["arguments"]
    assert arguments["compare"] == {"from": 2010, "to": 2020} and arguments["group_by"] == ["地方"], arguments
    error, checked = await call(server, "verify_answer", {"envelope": answer})
    assert not error and checked["data"]["status"] == "identical", checked


async def test_year_over_year_by_prefecture_equals_duckdb(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["sum:出生数"], "group_by": ["都道府県"],
        "where": {"年度": "2018..2020", "地方": "東北"}, "compare": "previous", "order_by": ["都道府県", "年度"], "limit": 100,
    })
    assert not error, answer
    columns = answer["data"]["columns"]
    got = {(r[0], int(r[1])): (r[2], r[columns.index("sum:出生数 change")]) for r in answer["data"]["rows"]}
    expected = {}
    for pref, year, births, before in duck.execute(
        'SELECT 都道府県, 年度, 出生数, lag(出生数) OVER (PARTITION BY 都道府県 ORDER BY 年度) FROM "ssdse-b" b'
        ' JOIN prefectures p USING (地域コード) WHERE 年度 BETWEEN 2018 AND 2020 AND p.地方 = \'東北\''
    ).fetchall():
        expected[(pref, year)] = (births, None if before is None else births - before)
    assert got == expected and len(got) == 18, (got, expected)


async def test_a_hierarchy_rolls_prefectures_up_to_regions_as_duckdb(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-e", "metrics": ["sum:総人口"], "group_by": ["地方"], "where": {"地方": ["東北", "九州"]},
    })
    assert not error, answer
    got = {r[0]: r[1] for r in answer["data"]["rows"]}
    expected = dict(duck.execute(
        'SELECT p.地方, sum(e.総人口) FROM "ssdse-e" e JOIN prefectures p ON e.都道府県 = p.都道府県名'
        ' WHERE p.地方 IN (\'東北\', \'九州\') GROUP BY p.地方'
    ).fetchall())
    assert got == expected and len(got) == 2, (got, expected)
    # An unknown region is refused with the regions there are.
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-e", "metrics": ["sum:総人口"], "where": {"地方": "東海"},
    })
    assert error and answer["error"]["code"] == "invalid_code", answer
    assert "中部" in [c["name"] for c in answer["error"]["candidates"]], answer
    error, answer = await call(server, "inspect_dataset", {"dataset_id": "ssdse-e"})
    assert not error, answer
    (region,) = [f for f in answer["data"]["fields"] if f["name"] == "地方"]
    assert region["looked_up"]["from"] == "都道府県" and region["looked_up"]["values"][0] == "北海道", region


async def test_a_relation_whose_key_repeats_is_refused_naming_the_key(server):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b-doubled", "metrics": ["sum:総人口"], "group_by": ["地方"], "where": {"年度": 2020},
    })
    assert error, answer
    message = answer["error"]["message"]
    assert "many-to-one" in message and "`R13000`" in message, answer
    # Without the related field, the dataset answers.
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b-doubled", "metrics": ["sum:総人口"], "where": {"年度": 2020},
    })
    assert not error, answer


async def test_a_relation_to_a_dataset_not_served_is_said_on_load_and_refused_when_used(server):
    said = [line for line in list(server.log) if "relation cannot be followed" in line]
    assert any("ssdse-b-nowhere" in line and "prefectures-nowhere" in line for line in said), said
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b-nowhere", "metrics": ["sum:総人口"], "group_by": ["地方"], "where": {"年度": 2020},
    })
    assert error and "prefectures-nowhere" in answer["error"]["message"], answer


def test_tally_check_follows_each_relation_and_refuses_repeated_keys(datasets):
    import subprocess

    run = subprocess.run([tally_bin(), "check", str(datasets)], capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    (doubled,) = [line for line in out.splitlines() if "ssdse-b-doubled" in line]
    assert "many-to-one" in doubled and "`R13000`" in doubled, out
    (nowhere,) = [line for line in out.splitlines() if "ssdse-b-nowhere" in line]
    assert "`prefectures-nowhere`" in nowhere and "not served" in nowhere, out
    assert any(line.endswith("ssdse-b/dataset.yaml: ok") for line in out.splitlines()), out


async def test_a_ratio_by_region_is_of_the_sums_not_the_mean_of_the_prefectures_ratios(server, duck):
    """The mistake of a ratio computed from other ratios (or averages): births per 1,000 of a
    region is its births over its population, not the mean of its prefectures' rates."""
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["avg:人口千人当たり出生数"], "group_by": ["地方"], "where": {"年度": 2020},
    })
    assert not error, answer
    got = {r[0]: r[1] for r in answer["data"]["rows"]}
    expected = dict(duck.execute(
        'SELECT p.地方, round(sum(b.出生数) * 1000.0 / sum(b.総人口), 4) FROM "ssdse-b" b'
        ' JOIN prefectures p USING (地域コード) WHERE b.年度 = 2020 GROUP BY p.地方'
    ).fetchall())
    assert got == pytest.approx(expected, abs=1e-9) and len(got) == 8
    means = dict(duck.execute(
        'SELECT p.地方, round(avg(b.出生数 * 1000.0 / b.総人口), 4) FROM "ssdse-b" b'
        ' JOIN prefectures p USING (地域コード) WHERE b.年度 = 2020 GROUP BY p.地方'
    ).fetchall())
    assert any(abs(got[r] - means[r]) > 1e-3 for r in got), (got, means)


async def test_last_of_a_stock_is_each_groups_own_latest_period(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "gaps", "metrics": ["last:人口", "count"], "group_by": ["地域"], "order_by": ["地域"],
    })
    assert not error, answer
    columns = answer["data"]["columns"]
    got = {r[0]: (r[columns.index("last:人口")], r[columns.index("人口:null_excluded")], r[columns.index("count")]) for r in answer["data"]["rows"]}
    # 東 at 2020; 西 at 2019, its record without a value left out and counted; count over all years.
    assert got == {"東": (120, 0, 3), "西": (55, 1, 3)}, got
    # No default to the dataset's latest period, which 西 does not have.
    assert not [w for w in warnings(answer) if "latest period" in w], answer["provenance"]["warnings"]
    # Over all groups: the whole's latest period.
    error, answer = await call(server, "summarize_records", {"dataset_id": "gaps", "metrics": ["last:人口"]})
    assert not error and answer["data"]["rows"][0][0] == 120, answer
    # On SSDSE-B without gaps, each prefecture's last of 2010–2020 is its 2020 value.
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["last:総人口"], "group_by": ["都道府県"], "where": {"年度": "2010..2020"}, "limit": 47,
    })
    assert not error, answer
    got = {r[0]: r[1] for r in answer["data"]["rows"]}
    expected = dict(duck.execute('SELECT 都道府県, 総人口 FROM "ssdse-b" WHERE 年度 = 2020').fetchall())
    assert got == expected and len(got) == 47


async def test_a_related_table_past_the_lookup_bound_is_refused(server):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b-too-many", "metrics": ["sum:総人口"], "group_by": ["地方"], "where": {"年度": 2020},
    })
    assert error, answer
    assert "more than 100000 records" in answer["error"]["message"], answer


async def test_a_related_dataset_outside_the_callers_scope_is_not_read(datasets, tmp_path):
    """A token that may read SSDSE-B but not the prefecture table gets no region: the lookup
    goes through the caller's scope, and the refusal reads as for a dataset not served."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    tokens = tmp_path / "tokens"
    tokens.write_text("# id token [datasets]\nanalyst scoped-token-ssdse-b-only-0123456789 ssdse-b\n", encoding="utf-8")
    scoped = HttpServer("--token-file", str(tokens), datasets=str(datasets))
    try:
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer scoped-token-ssdse-b-only-0123456789"}, timeout=TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            async with Client(streamable_http_client(scoped.url, http_client=http), mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                grouped = await c.call_tool("summarize_records", {
                    "dataset_id": "ssdse-b", "metrics": ["sum:総人口"], "group_by": ["地方"], "where": {"年度": 2020},
                })
                assert grouped.is_error, grouped
                refusal = json.loads(grouped.content[0].text)["error"]
                assert "`prefectures` is not served" in refusal["message"], refusal
                # The rest of the dataset answers; nothing of the prefecture table is cited.
                plain = await c.call_tool("summarize_records", {"dataset_id": "ssdse-b", "metrics": ["sum:総人口"], "where": {"年度": 2020}})
                assert not plain.is_error, plain
                cited = {s["id"] for s in json.loads(plain.content[0].text)["provenance"]["sources"]}
                assert cited == {"dataset:ssdse-b"}, cited
    finally:
        scoped.stop()


async def test_the_pass_that_finds_each_groups_latest_period_stops_at_the_group_cap(datasets):
    capped = HttpServer("--max-groups", "5", datasets=str(datasets))
    try:
        error, answer = await call(capped, "summarize_records", {
            "dataset_id": "ssdse-b", "metrics": ["last:総人口"], "group_by": ["都道府県"],
        })
        assert error and answer["error"]["code"] == "limit_exceeded", answer
        assert "more than 5 groups" in answer["error"]["message"], answer
    finally:
        capped.stop()


# Issue 57: statistical answers without silent gaps. Each case is checked against DuckDB on the
# same files and fails on the code before it (0 for a sum of nothing, text years, "latest"
# refused in compare, eras read as text, a missing year answered as an empty table).


async def test_a_sum_over_no_value_is_null_and_said(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b-gaps", "metrics": ["sum:出生数"], "group_by": ["都道府県"], "where": {"年度": "2009..2020"}, "limit": 47,
    })
    assert not error, answer
    columns = answer["data"]["columns"]
    got = {r[0]: r[columns.index("sum:出生数")] for r in answer["data"]["rows"]}
    expected = dict(duck.execute('SELECT 都道府県, sum(出生数) FROM "ssdse-b-gaps" GROUP BY 都道府県').fetchall())
    assert got == expected and got["岩手県"] is None, got["岩手県"]
    excluded = {r[0]: r[columns.index("出生数:null_excluded")] for r in answer["data"]["rows"]}
    assert excluded["岩手県"] == 12, excluded
    (said,) = [w for w in warnings(answer) if "`sum:出生数` is null" in w]
    assert "岩手県" in said and "not 0" in said, said


async def test_last_of_a_stock_blanked_at_the_latest_period_is_its_last_value_and_its_period(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b-gaps", "metrics": ["last:総人口"], "group_by": ["都道府県"], "where": {"地方": "東北"},
    })
    assert not error, answer
    columns = answer["data"]["columns"]
    got = {r[0]: (r[columns.index("last:総人口")], r[columns.index("last:総人口 period")]) for r in answer["data"]["rows"]}
    expected = {p: (v, y) for p, v, y in duck.execute(
        'SELECT 都道府県, arg_max(総人口, 年度), max(年度) FROM "ssdse-b-gaps" b JOIN prefectures p USING (地域コード)'
        " WHERE 総人口 IS NOT NULL AND p.地方 = '東北' GROUP BY 都道府県"
    ).fetchall()}
    assert got == expected and got["青森県"][1] == 2019 and got["青森県"][0] > 0, got
    (said,) = [w for w in warnings(answer) if "`last:総人口` is not of 2020" in w]
    assert "青森県 2019" in said, said


async def test_compare_to_latest_equals_the_latest_year(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["sum:総人口"], "group_by": ["地方"], "compare": {"from": 2010, "to": "latest"},
    })
    assert not error, answer
    assert {"parameter": "compare.to", "input": "latest", "canonical": "2020"} in answer["data"]["resolved_fields"]
    columns = answer["data"]["columns"]
    assert "sum:総人口 (2020)" in columns, columns
    got = {r[0]: r[columns.index("sum:総人口 (2020)")] for r in answer["data"]["rows"]}
    expected = dict(duck.execute(
        'SELECT p.地方, sum(b.総人口) FROM "ssdse-b" b JOIN prefectures p USING (地域コード) WHERE b.年度 = 2020 GROUP BY p.地方'
    ).fetchall())
    assert got == expected
    # Asked again as answered, the period is named.
    assert answer["provenance"]["query"]["arguments"]["compare"] == {"from": 2010, "to": 2020}


async def test_a_period_not_in_the_data_is_refused_with_the_periods_there_are(server):
    for arguments in ({"where": {"年度": 2023}}, {"where": {"年度": "2021..2025"}}, {"compare": {"from": 2005, "to": 2020}, "group_by": ["都道府県"]}):
        error, answer = await call(server, "summarize_records", {"dataset_id": "ssdse-b", "metrics": ["sum:出生数"], **arguments})
        assert error, (arguments, answer)
        refusal = answer["error"]
        assert "2009–2020 (12 periods, none missing)" in refusal["message"], refusal
    # With gaps, the missing periods are named.
    error, answer = await call(server, "summarize_records", {"dataset_id": "gaps", "metrics": ["sum:人口"], "where": {"年": 2017}})
    assert error and "2018–2020" in answer["error"]["message"], answer


async def test_periods_as_people_write_them_are_read_and_disclosed(server, duck):
    for written, year in [("令和2年度", 2020), ("平成22年度", 2010), ("FY2020", 2020), ("2020年度", 2020), ("令和元年", 2019), ("２０１５年度", 2015), ("平成二十二年度", 2010)]:
        error, answer = await call(server, "summarize_records", {"dataset_id": "ssdse-b", "metrics": ["sum:総人口"], "where": {"年度": written}})
        assert not error, (written, answer)
        (expected,) = duck.execute('SELECT sum(総人口) FROM "ssdse-b" WHERE 年度 = ?', [year]).fetchone()
        assert answer["data"]["rows"][0][0] == expected, written
        assert {"parameter": "where.年度", "input": written, "canonical": str(year)} in answer["data"]["resolved_fields"], written
    # A range in eras, with 〜.
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["sum:出生数"], "where": {"年度": "平成30年度〜令和2年度"},
    })
    assert not error, answer
    (expected,) = duck.execute('SELECT sum(出生数) FROM "ssdse-b" WHERE 年度 BETWEEN 2018 AND 2020').fetchone()
    assert answer["data"]["rows"][0][0] == expected
    assert {"parameter": "where.年度", "input": "平成30年度〜令和2年度", "canonical": "2018..2020"} in answer["data"]["resolved_fields"]
    # "previous": the period before the latest.
    error, answer = await call(server, "query_records", {"dataset_id": "ssdse-b", "where": {"年度": "previous", "都道府県": ["東京都"]}, "select": ["年度"]})
    assert not error and answer["data"]["rows"] == [[2019]], answer


async def test_the_latest_period_says_the_areas_it_leaves_out(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b-gaps", "metrics": ["sum:総人口"], "group_by": ["都道府県"], "limit": 47,
    })
    assert not error, answer
    names = {r[0] for r in answer["data"]["rows"]}
    expected = {p for (p,) in duck.execute('SELECT DISTINCT 都道府県 FROM "ssdse-b-gaps" WHERE 年度 = 2020').fetchall()}
    assert names == expected and "沖縄県" not in names
    (said,) = [w for w in warnings(answer) if "not in the answer" in w]
    assert "沖縄県 (last 2019)" in said and "年度 2020" in said, said


async def test_a_rate_over_several_periods_says_it_pools_them(server):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["avg:人口千人当たり出生数"], "group_by": ["地方"], "where": {"年度": "2015..2020"},
    })
    assert not error, answer
    (said,) = [w for w in warnings(answer) if "pools" in w]
    assert "2015–2020" in said and "group_by `年度`" in said, said


async def test_year_keys_are_numbers(server, duck):
    error, answer = await call(server, "summarize_records", {
        "dataset_id": "ssdse-b", "metrics": ["count"], "group_by": ["年度"], "where": {"年度": "2016..2018"}, "order_by": ["年度"],
    })
    assert not error, answer
    assert answer["data"]["rows"] == [[2016, 47], [2017, 47], [2018, 47]], answer["data"]["rows"]


async def test_an_unknown_field_ranks_the_field_it_starts_first(server):
    error, answer = await call(server, "summarize_records", {"dataset_id": "ssdse-b", "metrics": ["count"], "group_by": ["年"]})
    assert error, answer
    names = [c["name"] for c in answer["error"]["candidates"]]
    assert names[0] == "年度", names
    assert answer["error"]["example"]["arguments"]["group_by"] == ["年度"], answer["error"]


async def test_a_measures_period_is_shown_and_a_ratio_across_periods_warned(server, duck):
    error, answer = await call(server, "inspect_dataset", {"dataset_id": "ssdse-e"})
    assert not error, answer
    fields = {f["name"]: f for f in answer["data"]["fields"]}
    assert (fields["総人口"]["period"], fields["出生数"]["period"], fields["合計特殊出生率"]["period"]) == ("2021", "2020", "2019")
    error, answer = await call(server, "summarize_records", {"dataset_id": "ssdse-e", "metrics": ["avg:人口千人当たり出生数", "sum:総人口"]})
    assert not error, answer
    metrics = {m["column"]: m for m in answer["data"]["metrics"]}
    assert metrics["avg:人口千人当たり出生数"]["period"] == "2020 / 2021" and metrics["sum:総人口"]["period"] == "2021", metrics
    (said,) = [w for w in warnings(answer) if "different periods" in w]
    assert "出生数 of 2020" in said and "総人口 of 2021" in said, said
    value = answer["data"]["rows"][0][answer["data"]["columns"].index("avg:人口千人当たり出生数")]
    (expected,) = duck.execute('SELECT round(sum(出生数) * 1000.0 / sum(総人口), 4) FROM "ssdse-e"').fetchone()
    assert value == pytest.approx(expected, abs=1e-9)


def test_summarize_help_lists_every_metric_form():
    import subprocess

    out = subprocess.run([tally_bin(), "summarize", "--help"], capture_output=True, text=True, timeout=60).stdout
    for form in ("count", "sum:F", "avg:F", "min:F", "max:F", "last:F", "avg:<computed measure>"):
        assert form in out, (form, out)


async def test_periods_and_left_out_groups_are_of_the_callers_view(datasets, tmp_path):
    """The periods a refusal names and the groups a warning says are left out are read through
    the caller's policy: a caller who may see 沖縄県 only (whose last year is 2019) is told of
    2009–2019, and never of another prefecture."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    token = "okinawa-token-0123456789abcdef"
    (tmp_path / "tokens").write_text(f"okinawa {token}\n", encoding="utf-8")
    (tmp_path / "policies.yaml").write_text(
        "policies:\n  okinawa:\n    datasets:\n      ssdse-b-gaps:\n        rows: {都道府県: 沖縄県}\n"
        "grants:\n  tokens: {okinawa: [okinawa]}\n",
        encoding="utf-8",
    )
    scoped = HttpServer("--token-file", str(tmp_path / "tokens"), "--policy-file", str(tmp_path / "policies.yaml"), datasets=str(datasets))
    try:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            async with Client(streamable_http_client(scoped.url, http_client=http), mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                refused = await c.call_tool("summarize_records", {"dataset_id": "ssdse-b-gaps", "metrics": ["sum:出生数"], "where": {"年度": 2020}})
                assert refused.is_error, refused
                message = json.loads(refused.content[0].text)["error"]["message"]
                assert "2009–2019 (11 periods, none missing)" in message, message
                latest = await c.call_tool("summarize_records", {"dataset_id": "ssdse-b-gaps", "metrics": ["sum:総人口"], "group_by": ["都道府県"]})
                assert not latest.is_error, latest
                answer = json.loads(latest.content[0].text)
                assert [r[0] for r in answer["data"]["rows"]] == ["沖縄県"], answer["data"]["rows"]
                # Of the caller's latest period, 2019; nothing left out of the caller's view,
                # and no other prefecture named anywhere in what is said.
                assert answer["provenance"]["query"]["arguments"]["where"]["年度"] == {"$eq": 2019}
                said = json.dumps([answer["provenance"]["warnings"], answer["data"]["rows"]], ensure_ascii=False)
                assert "not in the answer" not in said, said
                for other in ("北海道", "東京都", "青森県"):
                    assert other not in said, said
    finally:
        scoped.stop()
