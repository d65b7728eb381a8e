"""Law texts through the real MCP client: the built-in law plugin over the reference e-Gov XML
(行政手続法 in two revisions, 個人情報保護法, 不正アクセス禁止法, 番号法), article-level
provenance, one revision per law by default, filters applied by the plugin, and the lookup from
a survey procedure's 根拠条項号 to its provision."""

import json
import os
import shutil
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import HttpServer

pytestmark = pytest.mark.anyio

REFERENCE = Path(os.environ.get("TALLY_REFERENCE", Path(__file__).resolve().parents[3] / "shared" / "reference"))
TIMEOUT = 120
GYOSEI = "405AC0000000088"

LAWS_YAML = """\
title: 法令（e-Gov 法令標準XML）
publisher: e-Gov法令検索 (デジタル庁)
source: {url: "https://laws.e-gov.go.jp/"}
backend:
  kind: wasm
  component: builtin:law
  config: {folder: xml}
fields:
- {name: unit, role: dim, desc: 行の単位（項または号）, codelist: [paragraph, item]}
- {name: law_id, role: dim, desc: e-Gov 法令ID}
- {name: law_num, role: attr, desc: 法令番号}
- {name: law_title, role: dim, desc: 法令名（略称・法令番号でも指定できる）, aliases: [law_abbrev, law_num]}
- {name: law_abbrev, role: attr, desc: 法令の略称（e-Gov の Abbrev、複数はカンマ区切り）, multi_value: {separator: ","}}
- {name: revision_id, role: dim, desc: 改正履歴ID, notes: [改正を指定しないときは各法令の最新の版だけを数える]}
- {name: revision_date, role: dim, desc: 改正の施行日}
- {name: law_id_from, role: attr, desc: 法令IDの読み取り元}
- {name: provision, role: dim, desc: 本則（main）または附則（supplementary）}
- {name: chapter, role: dim, desc: 章}
- {name: section, role: dim, desc: 節}
- {name: article, role: attr, desc: 条}
- {name: article_caption, role: attr, desc: 条の見出し}
- {name: paragraph, role: attr, data_type: integer, desc: 項番号}
- {name: item, role: attr, desc: 号}
- {name: locator, role: attr, locator: law, desc: 条項号（例 第九条第一項第二号）}
- {name: text, role: attr, groupable: false, desc: 本文}
- {name: file, role: attr, desc: XMLファイル}
"""


def laws_dir() -> Path:
    laws = REFERENCE / "laws"
    if not laws.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the reference laws are missing ({laws})")
        pytest.skip("the reference laws are not beside the repository")
    return laws


def body(result) -> dict:
    return json.loads(result.content[0].text)


def ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    return body(result)


def sources_by_id(env: dict) -> dict:
    return {s["id"]: s for s in env["provenance"]["sources"]}


def extract(env: dict) -> str:
    return env["provenance"]["transformations"][0]["description"]


@pytest.fixture(scope="module")
def law_server(tmp_path_factory):
    laws = laws_dir()
    root = tmp_path_factory.mktemp("datasets")
    folder = root / "laws" / "xml"
    folder.mkdir(parents=True)
    for p in laws.iterdir():
        if p.suffix == ".xml":
            shutil.copyfile(p, folder / p.name)
    (root / "laws" / "dataset.yaml").write_text(LAWS_YAML, encoding="utf-8")
    survey = REFERENCE / "procedures-survey-r6.dataset.yaml"
    if survey.is_file():
        (root / "survey").mkdir()
        shutil.copyfile(survey, root / "survey" / "dataset.yaml")
        shutil.copyfile(REFERENCE / "procedures" / "procedures-survey-r6.parquet", root / "survey" / "data.parquet")
    server = HttpServer(datasets=str(root))
    yield server
    server.stop()


def connect(server):
    return Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT)


async def test_paragraphs_per_chapter_count_each_law_once(law_server):
    with anyio.fail_after(TIMEOUT):
        async with connect(law_server) as c:
            base = {"law_id": [GYOSEI], "unit": ["paragraph"]}
            env = ok(await c.call_tool("summarize_records", {"dataset_id": "laws", "group_by": ["chapter"], "where": base, "limit": 100}))
            per_chapter = {row[0]: row[1] for row in env["data"]["rows"]}
            print("paragraphs per chapter of 行政手続法:", json.dumps(per_chapter, ensure_ascii=False))
            assert "第二章　申請に対する処分" in per_chapter
            total = sum(per_chapter.values())

            latest = ok(await c.call_tool("summarize_records", {"dataset_id": "laws", "where": {**base, "revision_date": ["2024-04-01"]}}))
            older = ok(await c.call_tool("summarize_records", {"dataset_id": "laws", "where": {**base, "revision_date": ["2018-04-01"]}}))
            n2024, n2018 = latest["data"]["rows"][0][0], older["data"]["rows"][0][0]
            print(f"paragraphs: no revision filter {total}, 2024 revision {n2024}, 2018 revision {n2018}")
            assert total == n2024, "without a revision filter only the latest revision is counted"
            assert n2018 > 0 and total < n2024 + n2018

            # Every law appears with exactly one revision.
            env = ok(await c.call_tool("summarize_records", {"dataset_id": "laws", "group_by": ["law_id", "revision_id"], "limit": 100}))
            law_ids = [row[0] for row in env["data"]["rows"]]
            assert sorted(law_ids) == sorted(set(law_ids)) and len(law_ids) == 4, env["data"]["rows"]


async def test_the_article_on_review_standards_and_its_revisions(law_server):
    with anyio.fail_after(TIMEOUT):
        async with connect(law_server) as c:
            where = {"law_id": [GYOSEI], "unit": ["paragraph"], "text": {"$contains": "審査基準を定めるものとする"}}
            env = ok(await c.call_tool("query_records", {"dataset_id": "laws", "where": where, "select": ["article", "article_caption", "locator", "revision_id", "text"]}))
            rows = env["data"]["rows"]
            assert [r[:3] for r in rows] == [["第五条", "（審査基準）", "第五条第一項"]], rows
            assert rows[0][3] == "20240401_504AC0100000052"
            [ref] = env["data"]["rowSourceRefs"][0]
            src = sources_by_id(env)[ref]
            print("source:", json.dumps(src, ensure_ascii=False))
            assert src["uri"] == f"https://laws.e-gov.go.jp/law/{GYOSEI}/20240401_504AC0100000052"
            assert src["locator"] == "第五条第一項"
            assert src["sourceType"] == "law"
            assert src["publisher"] == "e-Gov法令検索 (デジタル庁)"
            assert src["title"] == "行政手続法"
            assert src["effectiveAt"] == "2024-04-01"
            assert src["contentHash"].startswith("sha256:")

            env = ok(await c.call_tool("query_records", {"dataset_id": "laws", "where": {**where, "revision_id": ["20180401_429AC0000000004"]}, "select": ["locator", "revision_id", "revision_date"]}))
            assert env["data"]["rows"] == [["第五条第一項", "20180401_429AC0000000004", "2018-04-01"]]
            [ref] = env["data"]["rowSourceRefs"][0]
            src = sources_by_id(env)[ref]
            assert src["uri"] == f"https://laws.e-gov.go.jp/law/{GYOSEI}/20180401_429AC0000000004"
            assert src["effectiveAt"] == "2018-04-01"


async def test_filters_are_applied_by_the_plugin(law_server):
    with anyio.fail_after(TIMEOUT):
        async with connect(law_server) as c:
            everything = ok(await c.call_tool("query_records", {"dataset_id": "laws", "limit": 1}))["data"]["total"]
            env = ok(await c.call_tool("query_records", {"dataset_id": "laws", "where": {"law_id": ["411AC0000000128"]}, "limit": 1}))
            total = env["data"]["total"]
            text = extract(env)
            print(f"all rows {everything}; 不正アクセス禁止法 {total}; {text}")
            assert 0 < total < everything
            assert f'applied `law_id` = "411AC0000000128" itself, returning {total} rows' in text

            env = ok(await c.call_tool("query_records", {"dataset_id": "laws", "where": {"law_id": [GYOSEI], "article": ["第五条"]}, "select": ["locator"]}))
            rows = [r[0] for r in env["data"]["rows"]]
            assert rows and all(r.startswith("第五条第") for r in rows)
            assert f"returning {len(rows)} rows" in extract(env), extract(env)

            # Where the law id came from is said: the API wrapper states it, bare files do not.
            env = ok(await c.call_tool("summarize_records", {"dataset_id": "laws", "group_by": ["law_id", "law_id_from"], "limit": 10}))
            sources = {row[0]: row[1] for row in env["data"]["rows"]}
            assert sources[GYOSEI] == "file name" and sources["411AC0000000128"] == "xml"
            warnings = " ".join(env["provenance"]["warnings"])
            assert "was read from its file name" in warnings and "does not say which revision" in warnings


async def test_a_law_is_found_by_its_short_title_and_its_law_number(law_server):
    """Regression (issue 37, "law short titles"): 不正アクセス禁止法, the e-Gov short title
    (LawTitle's Abbrev) of 不正アクセス行為の禁止等に関する法律, found no record, and the hint
    blamed no condition. The title declares `aliases: [law_abbrev, law_num]`: the short title
    and the law number, in kanji or in digits, find the same records, disclosed."""
    full = "不正アクセス行為の禁止等に関する法律"
    with anyio.fail_after(TIMEOUT):
        async with connect(law_server) as c:
            args = {"dataset_id": "laws", "select": ["law_title", "locator"], "limit": 500}
            env = ok(await c.call_tool("query_records", {**args, "where": {"law_title": [full]}}))
            total, rows = env["data"]["total"], env["data"]["rows"]
            assert total > 20 and env["data"]["resolved_fields"] == []
            for typed, read in [
                ("不正アクセス禁止法", f"{full} (its law_abbrev)"),
                ("平成十一年法律第百二十八号", f"{full} (its law_num)"),
                ("平成11年法律第128号", f"{full} (its law_num 平成十一年法律第百二十八号)"),
            ]:
                env = ok(await c.call_tool("query_records", {**args, "where": {"law_title": [typed]}}))
                assert env["data"]["total"] == total and env["data"]["rows"] == rows, typed
                assert env["data"]["resolved_fields"] == [{"parameter": "where.law_title value", "input": typed, "canonical": read}]
                env = ok(await c.call_tool("summarize_records", {"dataset_id": "laws", "where": {"law_title": [typed]}, "group_by": ["law_title"]}))
                assert env["data"]["rows"] == [[full, total]], typed
            print(f"{full}: {total} records by its title, its short title and its law number")

            # A name no law has: the condition that excludes every record is named, and the
            # short titles are among the values offered.
            env = ok(await c.call_tool("query_records", {"dataset_id": "laws", "where": {"law_title": ["不正アクセス法"], "unit": ["item"]}}))
            hints = env["data"]["hints"]
            print(json.dumps(hints, ensure_ascii=False))
            assert env["data"]["total"] == 0
            assert any(h.startswith('`law_title in ["不正アクセス法"]` alone matches no record') for h in hints), hints
            assert any("`不正アクセス禁止法` (the law_abbrev of" in h for h in hints), hints
            assert not any("no single condition" in h for h in hints), hints


async def test_locator_forms_find_the_same_provision(law_server):
    with anyio.fail_after(TIMEOUT):
        async with connect(law_server) as c:
            seen = {}
            for form in ["第5条第1項", "第５条第１項", "第五条第一項", "法第5条1項"]:
                env = ok(await c.call_tool("query_records", {"dataset_id": "laws", "where": {"law_id": [GYOSEI], "locator": form}, "select": ["locator"]}))
                seen[form] = [r[0] for r in env["data"]["rows"]]
                if form != "第五条第一項":
                    read = [r for r in env["data"]["resolved_fields"] if r["parameter"] == "where.locator value"]
                    assert read and read[0]["canonical"] == "第五条第一項", env["data"]["resolved_fields"]
            print(json.dumps(seen, ensure_ascii=False))
            assert all(v == ["第五条第一項"] for v in seen.values()), seen
            env = ok(await c.call_tool("query_records", {"dataset_id": "laws", "where": {"law_id": [GYOSEI], "locator": "第2条"}, "select": ["locator"]}))
            rows = [r[0] for r in env["data"]["rows"]]
            assert rows[0] == "第二条第一項" and all(r.startswith("第二条第") for r in rows) and len(rows) > 1
            r = await c.call_tool("query_records", {"dataset_id": "laws", "where": {"locator": "第2項"}})
            assert r.is_error and "names no article" in r.content[0].text


async def test_a_procedures_legal_basis_is_looked_up(law_server):
    if not (REFERENCE / "procedures-survey-r6.dataset.yaml").is_file():
        pytest.skip("the reference survey is not beside the repository")
    title = "行政手続における特定の個人を識別するための番号の利用等に関する法律"
    with anyio.fail_after(TIMEOUT):
        async with connect(law_server) as c:
            env = ok(await c.call_tool("query_records", {"dataset_id": "survey", "where": {"法令名": [title]}, "select": ["手続名", "根拠条項号"], "limit": 100}))
            procedures = env["data"]["rows"]
            assert procedures
            found = 0
            for name, basis in procedures:
                r = await c.call_tool("query_records", {"dataset_id": "laws", "where": {"law_title": [title], "locator": basis}, "select": ["locator", "text"], "limit": 5})
                if not r.is_error and body(r)["data"]["total"] > 0:
                    found += 1
            print(f"{found} of {len(procedures)} procedures of 番号法 found their provision")
            name, basis = "指定した個人番号の通知", "第7条第1項"
            assert [name, basis] in procedures
            env = ok(await c.call_tool("query_records", {"dataset_id": "laws", "where": {"law_title": [title], "locator": basis, "unit": ["paragraph"]}, "select": ["locator", "text"]}))
            [[locator, text]] = env["data"]["rows"]
            assert locator == "第七条第一項" and "個人番号" in text
            assert found >= len(procedures) // 2


async def test_the_legal_basis_prompt_and_the_law_datasets_count(law_server):
    """With a law dataset served: the find_legal_basis prompt, its arguments completed, and
    the law dataset's number of records known without a call on it (counted in the
    background when the server starts)."""
    from mcp import MCPError
    from mcp_types import PromptReference

    from conftest import wait_for

    with anyio.fail_after(TIMEOUT):
        async with connect(law_server) as c:
            prompts = {p.name: p for p in (await c.list_prompts()).prompts}
            assert "find_legal_basis" in prompts
            laws = await c.complete(PromptReference(name="find_legal_basis"), {"name": "laws", "value": ""})
            assert laws.completion.values == ["laws"]
            if (REFERENCE / "procedures-survey-r6.dataset.yaml").is_file():
                title = "行政手続における特定の個人を識別するための番号の利用等に関する法律"
                got = await c.get_prompt("find_legal_basis", {"dataset_id": "survey", "where_field": "法令名", "where_value": title})
                text = got.messages[0].content.text
                assert f'"where":{{"法令名":["{title}"]}}' in text and "`laws`" in text and "`locator`" in text
                with pytest.raises(MCPError) as e:
                    await c.get_prompt("find_legal_basis", {"dataset_id": "survey", "where_field": "法令名"})
                assert "where_field and where_value go together" in str(e.value)

            async def counted():
                cards = ok(await c.call_tool("list_datasets", {}))["data"]["datasets"]
                return next(d for d in cards if d["dataset_id"] == "laws")["record_count"]

            n = await wait_for("the law dataset's record count", counted, bound=90)
            print("law dataset records:", n)
            listed = {str(r.uri): r.description for r in (await c.list_resources()).resources}
            assert listed["tally://datasets/laws"].startswith(f"{n} records")

