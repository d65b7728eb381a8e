"""What each person may see (issue 55): a policy that hides fields and restricts rows, granted
to a static token, walked through every MCP method the server answers (the server's own method
table, as the scope walk in test_gate.py does), in both protocol eras.

The hidden fields' names and values all carry `x9k`, and every record the row condition leaves
out carries `rowb` in a visible field, so a leak anywhere is one substring search. A hidden
field and one that does not exist get the same answers. Counts, sums and statistics under the
policy equal DuckDB's over the same Parquet with the condition, and those of a caller without
a policy equal DuckDB's without it."""

import json
import re
import shutil

import anyio
import httpx2
import pytest

from conftest import ROOT, HttpServer
from test_gate import method_table, normal, raw, session

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:resources/subscribe is removed"),
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

TIMEOUT = 120
ADMIN = "admin-token-0123456789abcdef"
TEAM = "team-a-token-0123456789abcd"
DATASET = "staff"
HIDDEN_FIELD = "salary_x9k"
MISSING_FIELD = "bonus_k4w"
SECRET = re.compile(r"x9k|rowb", re.IGNORECASE)
ERAS = ["2025-11-25", "2026-07-28"]
ROWS = 600


def write_staff(folder):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    depts = ["A", "B", "C"]
    dept = [depts[i % 3] for i in range(ROWS)]
    table = pa.table(
        {
            "staff_id": [f"s{i:04}" for i in range(ROWS)],
            "dept": dept,
            # The records the policy leaves out say so in a visible field.
            "name": [f"person {i}" if d == "A" else f"rowb person {i}" for i, d in enumerate(dept)],
            "role": [["clerk", "lead", "analyst", "rowb-only"][i % 4] if d != "A" else ["clerk", "lead", "analyst"][i % 3] for i, d in enumerate(dept)],
            "amount": [float((i * 37) % 1000) if i % 11 else None for i in range(ROWS)],
            "visits": [i % 7 for i in range(ROWS)],
            HIDDEN_FIELD: [100_000 + i * 13 for i in range(ROWS)],
            "email_x9k": [f"p{i}@x9k.example" for i in range(ROWS)],
        }
    )
    pq.write_table(table, folder / "data.parquet")
    (folder / "dataset.yaml").write_text(
        f"""schema_version: "1"
title: Staff records
publisher: Test office
description: People and their visits.
id_field: staff_id
fields:
- name: staff_id
  role: id
  desc: record id
- name: dept
  role: dim
  desc: department
  codelist: auto
- name: name
  role: attr
  desc: name
- name: role
  role: dim
  desc: role
  codelist: auto
- name: amount
  role: measure
  desc: amount spent
- name: visits
  role: measure
  data_type: integer
  desc: visits
- name: {HIDDEN_FIELD}
  role: measure
  desc: pay
- name: email_x9k
  role: attr
  desc: mail address
""",
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def governed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("policy")
    datasets = tmp / "datasets"
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    write_staff(datasets / DATASET)
    tokens = tmp / "tokens"
    tokens.write_text(f"admin {ADMIN}\nteam-a {TEAM}\n", encoding="utf-8")
    policies = tmp / "policies.yaml"
    policies.write_text(
        f"""policies:
  team-a:
    datasets:
      {DATASET}:
        hide: [{HIDDEN_FIELD}, email_x9k]
        rows: {{dept: A}}
      guide: {{}}
grants:
  tokens: {{team-a: [team-a]}}
""",
        encoding="utf-8",
    )
    server = HttpServer(
        "--token-file", str(tokens), "--policy-file", str(policies),
        "--rate-limit", "100000", "--rate-burst", "100000",
        datasets=str(datasets),
    )
    server.parquet = datasets / DATASET / "data.parquet"
    yield server
    server.stop()


def fill(template: str, field: str) -> dict:
    text = (
        template.replace("@DATASET@", DATASET)
        .replace("@FIELD@", field)
        .replace("@VALUE@", "A")
        .replace("@PREFIX@", DATASET[:3])
    )
    return json.loads(text)


def canon(value):
    """An answer without the names it suggests: which declared fields a mistyped name is
    nearest to depends on the name typed, not on what is hidden (what they are is checked for
    leaks before; how many there are is compared)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "text" and isinstance(v, str) and v.startswith("{"):
                try:
                    v = json.dumps(canon(json.loads(v)), ensure_ascii=False, sort_keys=True)
                except ValueError:
                    pass
            out[k] = canon(v)
            if k == "candidates" and isinstance(out[k], list):
                # The few nearest of all candidates (their total is kept and compared).
                out[k] = len(out[k])
        return out
    if isinstance(value, list):
        return [canon(v) for v in value]
    return value


def leaks(text: str, typed: str) -> list[str]:
    return SECRET.findall(text.replace(typed, ""))


async def test_a_restricted_caller_sees_no_hidden_field_and_no_restricted_row(governed):
    """Every probe of every method, once naming the hidden field and once a field that does not
    exist: the same answers (the typed name aside), and nothing hidden or left out in any."""
    walked = 0
    with anyio.fail_after(TIMEOUT * 3):
        for era in ERAS:
            notices: list[str] = []

            async def on_message(message):
                notices.append(repr(message))

            async with session(governed, TEAM, era, on_message) as c:
                for method in method_table():
                    if era not in method["eras"]:
                        continue
                    for probe in method["probes"]:
                        # With a visible field: nothing hidden in the answer.
                        params = fill(json.dumps(probe), "dept")
                        params.pop("_meta", None) if isinstance(params, dict) else None
                        answer = await raw(c, method["name"], params)
                        text = json.dumps(answer, ensure_ascii=False)
                        assert leaks(text, "@") == [], (era, method["name"], params, text[:3000])
                        # Naming the hidden field is answered as naming none.
                        answers = {}
                        for typed in (HIDDEN_FIELD, MISSING_FIELD):
                            params = fill(json.dumps(probe), typed)
                            params.pop("_meta", None) if isinstance(params, dict) else None
                            answer = await raw(c, method["name"], params)
                            text = json.dumps(answer, ensure_ascii=False)
                            assert leaks(text, typed) == [], (era, method["name"], params, text[:3000])
                            answers[typed] = normal(canon(answer), typed).replace(typed, "@FIELD@")
                            walked += 1
                        assert answers[HIDDEN_FIELD] == answers[MISSING_FIELD], (era, method["name"], probe, answers)
            assert leaks("\n".join(notices), "@") == [], notices
    print(f"probes walked: {walked}")
    assert walked >= 40
    # The control: the same probes by a caller without a policy do reach what is hidden, so
    # the walk above could have found it.
    seen = []
    with anyio.fail_after(TIMEOUT):
        async with session(governed, ADMIN, ERAS[0]) as c:
            for method in method_table():
                for probe in method["probes"] if ERAS[0] in method["eras"] else []:
                    params = fill(json.dumps(probe), "dept")
                    params.pop("_meta", None) if isinstance(params, dict) else None
                    seen += leaks(json.dumps(await raw(c, method["name"], params), ensure_ascii=False), "@")
    assert {s.lower() for s in seen} == {"x9k", "rowb"}, seen


def duck(parquet, sql: str):
    import duckdb

    return duckdb.connect().execute(sql.replace("FROM T", f"FROM read_parquet('{parquet}')")).fetchall()


async def answer_of(server, token: str, tool: str, arguments: dict) -> dict:
    async with session(server, token, ERAS[0]) as c:
        result = await c.call_tool(tool, arguments)
        assert not result.is_error, result
        return result.structured_content["data"]


@pytest.mark.parametrize(
    "token,where",
    [(TEAM, "WHERE dept = 'A'"), (ADMIN, "")],
)
async def test_totals_under_a_row_policy_equal_duckdb_with_its_condition(governed, token, where):
    with anyio.fail_after(TIMEOUT):
        data = await answer_of(
            governed, token, "summarize_records",
            {"dataset_id": DATASET, "metrics": ["count", "sum:amount", "avg:amount", "min:amount", "max:amount", "sum:visits"]},
        )
        row = dict(zip(data["columns"], data["rows"][0]))
        expected = duck(
            governed.parquet,
            f"SELECT count(*), sum(amount), avg(amount), min(amount), max(amount), sum(visits) FROM T {where}",
        )[0]
        assert row["count"] == expected[0]
        assert row["sum:amount"] == pytest.approx(expected[1])
        # Averages are given to two decimals.
        assert row["avg:amount"] == pytest.approx(expected[2], abs=0.005)
        assert (row["min:amount"], row["max:amount"]) == pytest.approx((expected[3], expected[4]))
        assert row["sum:visits"] == expected[5]

        grouped = await answer_of(
            governed, token, "summarize_records",
            {"dataset_id": DATASET, "metrics": ["count", "sum:visits"], "group_by": ["role"]},
        )
        got = {r[0]: (r[1], r[2]) for r in grouped["rows"]}
        expected = {r[0]: (r[1], r[2]) for r in duck(governed.parquet, f"SELECT role, count(*), sum(visits) FROM T {where} GROUP BY role")}
        assert got == expected

        found = await answer_of(governed, token, "query_records", {"dataset_id": DATASET, "q": "person 1", "limit": 1})
        expected = duck(governed.parquet, f"SELECT count(*) FROM T WHERE name ILIKE '%person 1%' {where.replace('WHERE', 'AND')}")[0][0]
        assert found["total"] == expected, found

        inspected = await answer_of(governed, token, "inspect_dataset", {"dataset_id": DATASET})
        assert inspected["record_count"] == duck(governed.parquet, f"SELECT count(*) FROM T {where}")[0][0]
        names = {f["name"] for f in inspected["fields"]}
        assert (HIDDEN_FIELD in names) == (token == ADMIN)


async def test_the_answer_says_a_policy_restricted_it(governed):
    with anyio.fail_after(TIMEOUT):
        restricted = await answer_of(governed, TEAM, "summarize_records", {"dataset_id": DATASET, "metrics": ["count"]})
        whole = await answer_of(governed, ADMIN, "summarize_records", {"dataset_id": DATASET, "metrics": ["count"]})
    said = json.dumps(restricted, ensure_ascii=False)
    assert "access policy" in said, said
    assert "access policy" not in json.dumps(whole, ensure_ascii=False)


def test_a_policy_that_does_not_fit_the_data_is_refused_at_start(tmp_path):
    import subprocess

    from conftest import tally_bin

    datasets = tmp_path / "datasets"
    write_staff(datasets / DATASET)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {TEAM}\n", encoding="utf-8")
    cases = {
        "hide: [salary]": "does not declare",
        "rows: {dep: [A]}": "write it exactly so",
        "rows: {department: A}": "does not resolve",
        "hid: [name]": "unknown key `hid`",
    }
    for body, said in cases.items():
        policies = tmp_path / "policies.yaml"
        policies.write_text(
            f"policies:\n  p:\n    datasets:\n      {DATASET}:\n        {body}\ngrants:\n  tokens: {{team-a: [p]}}\n",
            encoding="utf-8",
        )
        r = subprocess.run(
            [tally_bin(), "serve", "--http", "127.0.0.1:0", "--datasets", str(datasets),
             "--token-file", str(tokens), "--policy-file", str(policies)],
            capture_output=True, text=True, timeout=60,
        )
        assert r.returncode == 5, (body, r.stderr)
        assert said in r.stderr, (body, r.stderr)


def test_sign_in_options_are_refused_on_a_stdio_server(tmp_path):
    """A stdio server's client owns it and sees everything: a policy file (or a token file) given
    without --http would be ignored, so it is refused with what works."""
    import subprocess

    from conftest import datasets_dir, tally_bin

    policies = tmp_path / "policies.yaml"
    policies.write_text("policies:\n  p:\n    datasets: \"*\"\n", encoding="utf-8")
    r = subprocess.run(
        [tally_bin(), "serve", "--datasets", datasets_dir(), "--policy-file", str(policies)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 5, r.stderr
    assert "--policy-file applies to serving over HTTP only" in r.stderr and "--http" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def cited(tmp_path_factory):
    """A law of two articles (served by the law plugin, whose rows say where each comes from)
    and references to it; a policy shows only the first article, and hides the references'
    kind."""
    from test_oauth import datasets_with_a_law

    tmp = tmp_path_factory.mktemp("policy-laws")
    datasets = datasets_with_a_law(tmp / "datasets")
    tokens = tmp / "tokens"
    tokens.write_text(f"admin {ADMIN}\nteam-a {TEAM}\n", encoding="utf-8")
    policies = tmp / "policies.yaml"
    policies.write_text(
        """policies:
  first-article:
    datasets:
      laws: {rows: {article: [第一条]}}
      refs: {hide: [kind]}
grants:
  tokens: {team-a: [first-article]}
""",
        encoding="utf-8",
    )
    server = HttpServer(
        "--token-file", str(tokens), "--policy-file", str(policies),
        "--rate-limit", "100000", "--rate-burst", "100000",
        datasets=str(datasets),
    )
    yield server
    server.stop()


async def test_cited_provisions_and_searches_keep_to_the_rows_a_policy_shows(cited):
    """cite_provisions reads the linked law dataset as the caller sees it: the provisions a
    policy leaves out are neither cited nor quoted, and the references to them are unmatched;
    a search of the law finds only what is shown, and the hidden field of the references is
    absent."""
    second_article = ["申請は、書面でする", "電子情報処理組織"]
    with anyio.fail_after(TIMEOUT):
        team = await answer_of(cited, TEAM, "cite_provisions", {"dataset_id": "refs"})
        admin = await answer_of(cited, ADMIN, "cite_provisions", {"dataset_id": "refs"})
        team_text = json.dumps(team, ensure_ascii=False)
        admin_text = json.dumps(admin, ensure_ascii=False)
        assert "この法律は、試験の手続を定める" in team_text, team_text[:2000]
        for words in second_article:
            assert words in admin_text, admin_text[:2000]
            assert words not in team_text, team_text[:3000]
        assert "kind" not in team_text, team_text[:3000]
        searched = await answer_of(cited, TEAM, "query_records", {"dataset_id": "laws", "q": "申請"})
        assert searched["total"] == 0, searched
        searched = await answer_of(cited, ADMIN, "query_records", {"dataset_id": "laws", "q": "申請"})
        assert searched["total"] >= 2, searched
        counted = await answer_of(cited, TEAM, "summarize_records", {"dataset_id": "laws", "metrics": ["count"], "group_by": ["article"]})
        assert [r[0] for r in counted["rows"]] == ["第一条"], counted


async def test_verify_answer_recomputes_as_the_caller_sees_the_data(governed):
    """A restricted caller's answer verifies as identical for it; an unrestricted caller's
    answer, checked by the restricted caller, is recomputed on what the policy shows (so it
    differs), and the check shows nothing hidden."""
    summary = {"dataset_id": DATASET, "metrics": ["count", "sum:visits"], "group_by": ["role"]}
    with anyio.fail_after(TIMEOUT):
        async with session(governed, TEAM, ERAS[0]) as team, session(governed, ADMIN, ERAS[0]) as admin:
            mine = (await team.call_tool("summarize_records", summary)).structured_content
            theirs = (await admin.call_tool("summarize_records", summary)).structured_content
            check = (await team.call_tool("verify_answer", {"envelope": mine})).structured_content["data"]
            assert check["status"] == "identical", check
            check = await team.call_tool("verify_answer", {"envelope": theirs})
            text = check.content[0].text
            assert check.structured_content["data"]["status"] != "identical", text[:2000]
            # The admin's own answer carries `rowb-only` (a role only left-out records have);
            # what the check adds of its own must not.
            recomputed = json.dumps(check.structured_content["data"].get("changes", []), ensure_ascii=False)
            assert "x9k" not in text.lower(), text[:2000]
            print(recomputed[:500])
