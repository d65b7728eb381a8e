"""Law as of a date and procedures → provisions, on the real 行政手続法 revisions (2018-04-01 and
2024-04-01), the other reference laws and the real survey, through the official MCP Python SDK.

- `as_of` reads each law in the revision in force on a date: before the first revision nothing
  is in force (said, with the date the first takes effect), between the two the 2018 text,
  after both the 2024 one; 第三条第一項第八号 lost 婦人補導院 in 2024 and shows it.
- `cite_provisions` follows the survey's link to the laws: every procedure under 番号法 (26) and
  under 行政手続法 (38) finds its provisions, each law cited once; references that find
  nothing are counted by reason; `tally check` checks the link.
- A broad cite (every procedure) comes a page at a time within the result's token budget, with
  a signed cursor; the pages are one unbounded call's provisions exactly once; an edited cursor
  is refused; a page verifies `identical` in the server and in another process (issue 37).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from conftest import REFERENCE, ROOT, tally_bin

pytestmark = pytest.mark.anyio

GYOSEI = "405AC0000000088"
BANGO = "行政手続における特定の個人を識別するための番号の利用等に関する法律"
LINK = "links: [{to: laws, on: {法令番号: law_num, 根拠条項号: locator}}]\n"


def need_reference():
    for p in (REFERENCE / "laws", REFERENCE / "procedures-survey-r6.dataset.yaml", REFERENCE / "procedures" / "procedures-survey-r6.parquet"):
        if not p.exists():
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true but the reference {p} is missing")
            pytest.skip(f"the reference {p} is not beside the repository")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> Path:
    """The survey (its published definition with the link added) and the laws, as the
    example defines them (examples/laws/dataset.yaml: every revision read, `revisions`)."""
    need_reference()
    root = tmp_path_factory.mktemp("provisions") / "datasets"
    (root / "survey").mkdir(parents=True)
    published = (REFERENCE / "procedures-survey-r6.dataset.yaml").read_text(encoding="utf-8")
    (root / "survey" / "dataset.yaml").write_text(LINK + published, encoding="utf-8")
    shutil.copyfile(REFERENCE / "procedures" / "procedures-survey-r6.parquet", root / "survey" / "data.parquet")
    (root / "laws" / "xml").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples" / "laws" / "dataset.yaml", root / "laws" / "dataset.yaml")
    for p in (REFERENCE / "laws").glob("*.xml"):
        shutil.copyfile(p, root / "laws" / "xml" / p.name)
    return root


def stdio(datasets: Path):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=tally_bin(), args=["serve", "--datasets", str(datasets), "--call-timeout-ms", "60000"],
        env={"TALLY_LOG": "warn", "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")},
    )


def body(r) -> dict:
    return json.loads(r.content[0].text)


async def ok(c, tool: str, args: dict) -> dict:
    r = await c.call_tool(tool, args)
    assert not r.is_error, r.content[0].text
    return body(r)


def steps(env: dict, kind: str) -> str:
    return " ".join(t["description"] for t in env["provenance"]["transformations"] if t["type"] == kind)


ITEM_8 = {"law_id": [GYOSEI], "locator": "第3条第1項第8号"}


async def test_the_administrative_procedure_act_as_of_a_date(datasets):
    async with Client(stdio(datasets), mode="legacy", cache=None, read_timeout_seconds=120) as c:
        args = {"dataset_id": "laws", "where": ITEM_8, "select": ["revision_id", "revision_date", "text"]}
        before = await ok(c, "query_records", {**args, "as_of": "2010-01-01"})
        assert before["data"]["rows"] == [] and before["data"]["total"] == 0
        warnings = " ".join(before["provenance"]["warnings"])
        assert "no revision of 行政手続法 was in force on 2010-01-01" in warnings and "2018-04-01" in warnings, warnings
        assert "kept the revisions in force on 2010-01-01 (as_of): none" in steps(before, "filter")

        between = await ok(c, "query_records", {**args, "as_of": "2020-01-01"})
        [[revision, date, text]] = between["data"]["rows"]
        assert (revision, date) == ("20180401_429AC0000000004", "2018-04-01")
        assert "婦人補導院" in text, "the 2018 revision still names it"
        [ref] = between["data"]["rowSourceRefs"][0]
        source = {s["id"]: s for s in between["provenance"]["sources"]}[ref]
        assert source["effectiveAt"] == "2018-04-01" and source["uri"].endswith(f"/{GYOSEI}/20180401_429AC0000000004")
        assert between["provenance"]["query"]["arguments"]["as_of"] == "2020-01-01"

        after = await ok(c, "query_records", {**args, "as_of": "２０２５-０１-０１"})  # full-width digits read too
        [[revision, date, text]] = after["data"]["rows"]
        assert (revision, date) == ("20240401_504AC0100000052", "2024-04-01")
        assert "婦人補導院" not in text and "少年鑑別所" in text
        assert "行政手続法: revision 20240401_504AC0100000052, in force from 2024-04-01" in steps(after, "filter")

        # Without as_of: the latest revision, and the answer says which.
        latest = await ok(c, "query_records", args)
        assert latest["data"]["rows"] == after["data"]["rows"]
        assert "kept the latest revision of each (no as_of)" in steps(latest, "filter")
        counted = await ok(c, "summarize_records", {"dataset_id": "laws", "group_by": ["law_id", "revision_id"], "limit": 20})
        laws = [row[0] for row in counted["data"]["rows"]]
        assert sorted(laws) == sorted(set(laws)) and len(laws) == 4, "each law once; a law whose file states no revision keeps it"
        dated = await ok(c, "summarize_records", {"dataset_id": "laws", "group_by": ["law_id"], "as_of": "2025-01-01", "limit": 20})
        assert [row[0] for row in dated["data"]["rows"]] == [GYOSEI], "only a dated revision can be placed on a date"
        assert "does not say from which date it is in force" in " ".join(dated["provenance"]["warnings"])

        # Refusals that say what would work.
        r = await c.call_tool("query_records", {"dataset_id": "survey", "as_of": "2020-01-01"})
        assert r.is_error and "has no revisions" in r.content[0].text
        r = await c.call_tool("query_records", {**args, "as_of": "2020/01/01"})
        assert r.is_error and "YYYY-MM-DD" in r.content[0].text
        r = await c.call_tool("query_records", {**args, "where": {**ITEM_8, "revision_id": ["20180401_429AC0000000004"]}, "as_of": "2020-01-01"})
        assert r.is_error and "revision_id" in r.content[0].text


async def test_procedures_find_the_provisions_they_rest_on(datasets):
    async with Client(stdio(datasets), mode="legacy", cache=None, read_timeout_seconds=120) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert "cite_provisions" in tools
        bango = await ok(c, "cite_provisions", {"dataset_id": "survey", "where": {"法令名": [BANGO]}, "limit": 100})
        data = bango["data"]
        assert (data["records_total"], data["records_matched"], data["unmatched"]) == (26, 26, [])
        assert data["columns"] == ["law", "provision", "text", "revision", "uri", "records"]
        sources = {s["id"]: s for s in bango["provenance"]["sources"]}
        rows = {row[1]: row for row in data["rows"]}
        law, provision, text, revision, uri, records = rows["第七条第一項"]
        assert law == BANGO and "個人番号" in text and uri == "https://laws.e-gov.go.jp/law/425AC0000000027"
        assert records == 2
        for row, [ref] in zip(data["rows"], data["rowSourceRefs"]):
            # The row names the provision; its source is the law it was read from, cited once.
            assert sources[ref]["uri"] == row[4] and sources[ref]["title"] == row[0] and sources[ref]["sourceType"] == "law"
        assert sum(row[5] for row in data["rows"]) >= 26

        gyosei = await ok(c, "cite_provisions", {"dataset_id": "survey", "where": {"法令名": ["行政手続法"]}, "group_by": ["所管府省庁"], "limit": 200})
        data = gyosei["data"]
        assert (data["records_total"], data["records_matched"]) == (38, 38), data["unmatched"]
        assert data["columns"][0] == "所管府省庁"
        assert all(row[4] == "20240401_504AC0100000052" for row in data["rows"]), "the latest revision"
        assert all(row[5].endswith("/405AC0000000088/20240401_504AC0100000052") for row in data["rows"])

        # The same as of 2020: the 2018 revision.
        older = await ok(c, "cite_provisions", {"dataset_id": "survey", "where": {"法令名": ["行政手続法"]}, "as_of": "2020-01-01"})
        assert older["data"]["as_of"] == "2020-01-01"
        assert {row[3] for row in older["data"]["rows"]} == {"20180401_429AC0000000004"}
        assert "kept the revisions in force on 2020-01-01" in steps(older, "filter")

        # Every procedure: those under laws this server does not have are counted as such.
        everything = await ok(c, "cite_provisions", {"dataset_id": "survey", "limit": 10})
        data = everything["data"]
        assert data["records_total"] == 75071
        reasons = {u["reason"].split(":")[0]: u["records"] for u in data["unmatched"]}
        assert reasons.get("law not served", 0) > 70000, reasons
        assert data["records_matched"] >= 26 + 38
        listed = next(u for u in data["unmatched"] if u["reason"].startswith("law not served"))
        assert len(listed["references"]) == 50 and listed["references"][0]["records"] >= listed["references"][-1]["records"]
        assert "found no provision" in " ".join(everything["provenance"]["warnings"])

        # Verifiable like every answer.
        r = await c.call_tool("verify_answer", {"envelope": bango})
        assert r.structured_content["data"]["status"] == "identical", r.structured_content["data"]

        r = await c.call_tool("cite_provisions", {"dataset_id": "laws"})
        assert r.is_error and "links to no other dataset" in r.content[0].text


def estimated_tokens(text: str) -> int:
    """Tokens as the server estimates them (host/engine meta.rs `estimated_tokens`): about four
    ASCII characters a token, one a character of other scripts."""
    ascii = sum(1 for ch in text if ord(ch) < 128)
    return -(-ascii // 4) + (len(text) - ascii)


def row_tokens(rows: list) -> int:
    return sum(estimated_tokens(json.dumps(r, ensure_ascii=False, separators=(",", ":"))) + 1 for r in rows)


def law_sources(env: dict) -> list:
    return [s for s in env["provenance"]["sources"] if s["sourceType"] == "law"]


def each_law_cited_once(env: dict):
    """Every source id once, every law (its text: URI and content hash) once, each row's source
    its law, and no source no row of the page needs."""
    sources = env["provenance"]["sources"]
    ids = [s["id"] for s in sources]
    assert len(ids) == len(set(ids)), ids
    laws = [(s["uri"], s.get("contentHash")) for s in law_sources(env)]
    assert len(laws) == len(set(laws)), f"a law cited more than once: {laws}"
    by_id = {s["id"]: s for s in sources}
    data = env["data"]
    law_at = data["columns"].index("law")
    referenced = set()
    for row, refs in zip(data["rows"], data["rowSourceRefs"]):
        [ref] = refs
        assert by_id[ref]["uri"] == row[law_at + 4] and by_id[ref]["title"] == row[law_at], (row, by_id[ref])
        referenced.add(ref)
    assert {s["id"] for s in law_sources(env)} == referenced


BUDGET = 6000  # the default --max-result-tokens
EVERYTHING = {"dataset_id": "survey", "limit": 10000}


async def test_a_broad_cite_comes_in_pages_within_the_budget(datasets, tmp_path):
    """Every procedure, all provisions asked for at once: about 85,000 characters before issue 37
    (more than half of it a full source per provision). Now a page within the token budget, each law cited
    once, a cursor for the rest; the pages, walked, are one unbounded call's rows exactly."""
    cache = ["--cache-dir", str(tmp_path / "cache")]
    params = stdio(datasets)
    params.args += cache
    async with Client(params, mode="legacy", cache=None, read_timeout_seconds=300) as c:
        pages, args = [], dict(EVERYTHING)
        while True:
            r = await c.call_tool("cite_provisions", args)
            assert not r.is_error, r.content[0].text
            pages.append((len(r.content[0].text), body(r)))
            cursor = pages[-1][1]["data"]["next_cursor"]
            if cursor is None:
                break
            assert len(pages) < 50, "paging does not end"
            args = {**EVERYTHING, "cursor": cursor}
        first = pages[0][1]
        total = first["data"]["total_provisions"]
        assert len(pages) > 1 and first["data"]["returned"] < total, first["data"]["returned"]
        warnings = " ".join(first["provenance"]["warnings"])
        assert "context budget" in warnings and "next_cursor" in warnings, warnings
        rows, offset = [], 0
        for size, page in pages:
            data = page["data"]
            assert data["offset"] == offset and data["total_provisions"] == total
            assert row_tokens(data["rows"]) <= BUDGET, (data["offset"], row_tokens(data["rows"]))
            each_law_cited_once(page)
            rows += data["rows"]
            offset += data["returned"]
        assert offset == total

        # A page is asked again with its cursor: verify_answer finds it identical.
        second = pages[1][1]
        assert second["provenance"]["query"]["arguments"]["cursor"] == first["data"]["next_cursor"]
        r = await c.call_tool("verify_answer", {"envelope": second})
        assert r.structured_content["data"]["status"] == "identical", r.structured_content["data"]

        # An edited cursor (its offset rewritten) is refused, not answered with other rows.
        import base64

        b, tag = first["data"]["next_cursor"].split(".")
        payload = json.loads(base64.urlsafe_b64decode(b + "=" * (-len(b) % 4)))
        payload["o"] = 1
        forged = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode().rstrip("=")
        r = await c.call_tool("cite_provisions", {**EVERYTHING, "cursor": f"{forged}.{tag}"})
        assert r.is_error and "invalid_cursor" in r.content[0].text and "edited" in r.content[0].text, r.content[0].text
        # Another call's cursor (another `where`) too.
        r = await c.call_tool("cite_provisions", {**EVERYTHING, "where": {"法令名": [BANGO]}, "cursor": first["data"]["next_cursor"]})
        assert r.is_error and "different query" in r.content[0].text, r.content[0].text

    # The same page checked by `tally verify` in another process (the cursor key of the cache).
    page_file = tmp_path / "page.json"
    page_file.write_text(json.dumps(second, ensure_ascii=False), encoding="utf-8")
    p = subprocess.run([tally_bin(), "verify", str(page_file), "--datasets", str(datasets), *cache],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and json.loads(p.stdout)["data"]["status"] == "identical", p.stdout + p.stderr

    # One unbounded call (the budget raised): the same rows, in the same order.
    params = stdio(datasets)
    params.args += ["--max-result-tokens", "10000000", "--no-cache"]
    async with Client(params, mode="legacy", cache=None, read_timeout_seconds=300) as c:
        r = await c.call_tool("cite_provisions", EVERYTHING)
        whole = body(r)
        assert whole["data"]["next_cursor"] is None and whole["data"]["returned"] == total
        assert rows == whole["data"]["rows"], "the pages, end to end, are the unbounded call's rows"
        each_law_cited_once(whole)
    chars = lambda v: len(json.dumps(v, ensure_ascii=False, separators=(",", ":")))
    print(
        f"\ncite_provisions over every procedure ({total} provisions): unbounded {len(r.content[0].text):,} characters "
        f"(provenance {chars(whole['provenance']):,}, {len(whole['provenance']['sources'])} sources); "
        f"first page {pages[0][0]:,} characters (provenance {chars(first['provenance']):,}, rows {row_tokens(first['data']['rows']):,} "
        f"estimated tokens, {first['data']['returned']} provisions); {len(pages)} pages, the largest {max(s for s, _ in pages):,} characters"
    )


async def test_every_tool_answers_its_own_example_and_every_answer_verifies(datasets):
    """The tool table (tally_semantic::request::TOOLS with Tool::example) is the one place a
    tool is listed: each tool's description carries an example call written with the names
    served; each example answers on the real survey and laws, and each answer of a tool
    whose answers come from data verifies `identical`. A tool added without an example, or
    whose answers verify_answer cannot check, fails here."""
    async with Client(stdio(datasets), mode="legacy", cache=None, read_timeout_seconds=300) as c:
        tools = (await c.list_tools()).tools
        assert {t.name for t in tools} == {"list_datasets", "inspect_dataset", "query_records", "summarize_records",
                                           "cite_provisions", "verify_answer"}
        checked = []
        for t in tools:
            text = t.description.split("Example: ", 1)[1]
            if t.name == "verify_answer":
                assert text.startswith('{"envelope": <an answer>}'), text
                continue
            example, _ = json.JSONDecoder().raw_decode(text)
            answer = await ok(c, t.name, example)
            verdict = await ok(c, "verify_answer", {"envelope": answer})
            assert verdict["data"]["status"] == "identical", (t.name, example, verdict["data"])
            checked.append(t.name)
        assert len(checked) == 5, checked


async def test_a_cite_states_its_where_groups_and_date(datasets):
    """The `where` filter, the groups and the date read are steps of the answer, and each law
    is cited once however many of its provisions the rows hold."""
    async with Client(stdio(datasets), mode="legacy", cache=None, read_timeout_seconds=120) as c:
        got = await ok(c, "cite_provisions", {"dataset_id": "survey", "where": {"法令名": ["行政手続法"]}, "group_by": ["所管府省庁"], "as_of": "2020-01-01"})
        filters = steps(got, "filter")
        assert "kept records of `survey` where 法令名" in filters and "行政手続法" in filters and ": 38 matched" in filters, filters
        assert "kept the revisions in force on 2020-01-01" in filters, filters
        assert "`所管府省庁` (group_by)" in steps(got, "aggregate"), steps(got, "aggregate")
        each_law_cited_once(got)
        assert len(law_sources(got)) == 1 and len(got["data"]["rows"]) > 1, "one law, many provisions, one source"

        bango = await ok(c, "cite_provisions", {"dataset_id": "survey", "where": {"法令名": [BANGO]}})
        each_law_cited_once(bango)
        assert len(law_sources(bango)) == 1 and len(bango["data"]["rows"]) == 21, bango["data"]["returned"]


def test_cite_from_the_command_line_and_check_the_link(datasets, tmp_path):
    p = subprocess.run(
        [tally_bin(), "cite", "survey", "--datasets", str(datasets), "--where", json.dumps({"法令名": [BANGO]}), "--limit", "3"],
        capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["data"]["records_matched"] == 26
    p = subprocess.run([tally_bin(), "check", str(datasets)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    # A broken link: a field the laws do not have, and no provision field linked.
    broken = tmp_path / "datasets"
    shutil.copytree(datasets, broken)
    yaml = (broken / "survey" / "dataset.yaml").read_text(encoding="utf-8")
    (broken / "survey" / "dataset.yaml").write_text(yaml.replace("根拠条項号: locator", "根拠条項号: article_no"), encoding="utf-8")
    p = subprocess.run([tally_bin(), "check", str(broken)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout
    assert "`article_no` is not a field of `laws`" in p.stdout and "locator: law" in p.stdout, p.stdout
    (broken / "survey" / "dataset.yaml").write_text(yaml.replace("to: laws", "to: statutes"), encoding="utf-8")
    p = subprocess.run([tally_bin(), "check", str(broken)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "links to dataset `statutes`, which is not served" in p.stdout, p.stdout


def test_the_law_lookup_example_runs():
    need_reference()
    p = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "law_lookup.py"), "--reference", str(REFERENCE), "--tally", tally_bin()],
        capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "26 of 26 procedures found their provisions" in p.stdout
    assert "kept the revisions in force on 2020-01-01 (as_of): 行政手続法: revision 20180401_429AC0000000004" in p.stdout


def small_datasets(root: Path) -> Path:
    """The laws, and a small dataset linked to them whose references are each a known case."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copytree(REFERENCE / "laws", root / "laws" / "xml")
    shutil.copyfile(ROOT / "examples" / "laws" / "dataset.yaml", root / "laws" / "dataset.yaml")
    (root / "refs").mkdir()
    gyosei = "平成五年法律第八十八号"
    rows = [
        ("r1", gyosei, "第5条第1項"),            # found
        ("r2", gyosei, "第5条及び第999条"),       # one found, one not: matched, and unmatched once
        ("r3", gyosei, "第999条第1項及び第998条"), # two not found: unmatched once
        ("r4", "令和九十九年法律第一号", "第1条"),   # law not served
        ("r5", "", ""),                          # no reference
        ("r6", gyosei, "附属書のとおり"),           # unparsable
    ]
    pq.write_table(
        pa.table({"id": [r[0] for r in rows], "law": [r[1] for r in rows], "ref": [r[2] for r in rows]}),
        root / "refs" / "data.parquet",
    )
    (root / "refs" / "dataset.yaml").write_text(
        "title: References\n"
        "links: [{to: laws, on: {law: law_num, ref: locator}}]\n"
        "fields:\n"
        "- {name: id, role: id}\n"
        "- {name: law, role: dim}\n"
        "- {name: ref, role: attr}\n",
        encoding="utf-8",
    )
    return root


async def test_every_reference_is_counted_once_by_why_it_found_nothing(tmp_path):
    need_reference()
    datasets = small_datasets(tmp_path / "datasets")
    async with Client(stdio(datasets), mode="legacy", cache=None, read_timeout_seconds=120) as c:
        got = await ok(c, "cite_provisions", {"dataset_id": "refs", "limit": 50})
        data = got["data"]
        assert (data["records_total"], data["records_matched"]) == (6, 2)
        provisions = {row[1]: row[5] for row in data["rows"]}
        assert provisions == {"第五条第一項": 1, "第五条": 1}, provisions
        reasons = {u["reason"].split(":")[0]: u["records"] for u in data["unmatched"]}
        assert reasons == {
            "no reference": 1, "law not served": 1, "provision not found": 2, "unparsable reference": 1,
        }, reasons
        not_found = next(u for u in data["unmatched"] if u["reason"].startswith("provision not found"))
        assert sorted(r["provision"] for r in not_found["references"]) == ["第九百九十九条", "第九百九十九条第一項", "第九百九十八条"]
        warnings = " ".join(got["provenance"]["warnings"])
        assert "5 records have a reference that found no provision (1 of them found others)" in warnings, warnings

        # Before the law's first revision: the law is there, but not in force.
        early = await ok(c, "cite_provisions", {"dataset_id": "refs", "as_of": "2010-01-01"})
        reasons = {u["reason"].split(":")[0]: u["records"] for u in early["data"]["unmatched"]}
        assert reasons.get("law not in force") == 4, reasons
        assert early["data"]["records_matched"] == 0

        r = await c.call_tool("cite_provisions", {"dataset_id": "refs", "link": "statutes"})
        assert r.is_error and "has no link to `statutes`" in r.content[0].text and "laws" in r.content[0].text


async def test_the_references_of_a_call_are_bounded(datasets):
    """More distinct references than the groups a call may hold: refused with what to do."""
    params = stdio(datasets)
    params.args += ["--max-groups", "50"]
    async with Client(params, mode="legacy", cache=None, read_timeout_seconds=120) as c:
        r = await c.call_tool("cite_provisions", {"dataset_id": "survey"})
        assert r.is_error, "the whole survey names thousands of references"
        text = r.content[0].text
        assert "more than 50 distinct references" in text and "where" in text, text


async def test_revisions_of_one_day_and_date_times(tmp_path):
    """Any dataset may declare revisions: two taking effect the same day count once (the
    greater id), and a date-time's day counts as its date."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "datasets" / "rules"
    folder.mkdir(parents=True)
    pq.write_table(
        pa.table({
            "rule": ["A", "A", "A", "B"],
            "effective": ["2020-04-01", "2020-04-01", "2021-01-01T09:00:00", "2021-01-01"],
            "rev": ["2020-1", "2020-2", "2021-1", "2021-1"],
            "text": ["old", "amended the same day", "new", "b"],
        }),
        folder / "data.parquet",
    )
    (folder / "dataset.yaml").write_text(
        "title: Rules\n"
        "revisions: {key: rule, effective: effective, id: rev}\n"
        "fields:\n- {name: rule, role: dim}\n- {name: effective, role: dim}\n- {name: rev, role: dim}\n- {name: text, role: attr}\n",
        encoding="utf-8",
    )
    async with Client(stdio(tmp_path / "datasets"), mode="legacy", cache=None) as c:
        async def texts(as_of=None):
            args = {"dataset_id": "rules", "select": ["rule", "text"], **({"as_of": as_of} if as_of else {})}
            return (await ok(c, "query_records", args))["data"]["rows"]

        assert await texts("2020-12-31") == [["A", "amended the same day"]]
        assert await texts("2021-01-01") == [["A", "new"], ["B", "b"]], "a date-time counts on its day"
        assert await texts() == [["A", "new"], ["B", "b"]]
