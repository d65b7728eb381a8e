"""Answers that can be checked again (docs/verify.md): `tally verify ENVELOPE.json` and the
`verify_answer` tool, on a small dataset written here.

A saved answer verifies as identical; after the data file changes, the check says which source
changed and lists every value that changed, old and new; after a field is removed from the
definition, the call is not reproducible and the field is named; an answer whose numbers were
edited is found out by its resultHash. A page asked by cursor in one server process is checked
by another.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from conftest import tally_bin

pytestmark = pytest.mark.anyio

YAML = """title: Small counts
publisher: Tally tests
retrieved_at: 2026-12-01
fields:
  - {name: id, role: id, data_type: string}
  - {name: grp, role: dim, data_type: string}
  - {name: kind, role: dim, data_type: string, codelist: ["1 a", "2 b"]}
  - {name: n, role: measure, data_type: integer}
"""


def write_data(folder: Path, bump: int = 0):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 60
    table = pa.table({
        "id": [f"r{i:02}" for i in range(rows)],
        "grp": [f"g{i % 3}" for i in range(rows)],
        "kind": ["1 a" if i % 2 else "2 b" for i in range(rows)],
        # `bump` changes one value of group g0.
        "n": [i + (bump if i == 0 else 0) for i in range(rows)],
    })
    pq.write_table(table, folder / "data.parquet")


@pytest.fixture
def datasets(tmp_path) -> Path:
    root = tmp_path / "datasets"
    folder = root / "small"
    folder.mkdir(parents=True)
    (folder / "dataset.yaml").write_text(YAML, encoding="utf-8")
    write_data(folder)
    return root


def tally(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tally_bin(), *args], capture_output=True, text=True, input=stdin, timeout=120,
        env={**os.environ, "TALLY_NO_CACHE": "1"},
    )


def summarize(datasets: Path) -> dict:
    # Loose forms a model writes: a typo'd field name, a label for a code.
    p = tally("summarize", "small", "--datasets", str(datasets), "--group-by", "GRP",
              "--metrics", "count", "--metrics", "sum:n", "--where", '{"kind": ["a"]}')
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def verify(datasets: Path, envelope: dict, tmp: Path) -> tuple[int, dict, str]:
    path = tmp / "answer.json"
    path.write_text(json.dumps(envelope, ensure_ascii=False), encoding="utf-8")
    p = tally("verify", str(path), "--datasets", str(datasets))
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else {}, p.stderr


def test_the_call_is_recorded_as_resolved(datasets):
    answer = summarize(datasets)
    query = answer["provenance"]["query"]
    assert query["tool"] == "summarize_records" and query["toolVersion"].startswith("tally ")
    args = query["arguments"]
    assert args["group_by"] == ["grp"], "the name as the definition writes it"
    assert args["where"] == {"kind": {"$in": ["1 a"]}}, "the code as the codelist writes it, the operator spelled out"
    assert args["metrics"] == ["count", "sum:n"] and args["limit"] == 200
    [source] = answer["provenance"]["sources"]
    assert source["datasetVersion"] and source["contentHash"].startswith("sha256:")
    assert answer["provenance"]["resultHash"].startswith("sha256:")


def test_a_saved_answer_is_identical(datasets, tmp_path):
    code, check, said = verify(datasets, summarize(datasets), tmp_path)
    assert code == 0, said
    assert check["data"]["status"] == "identical" and said.startswith("identical")
    assert check["data"]["result_hash_matches"] is True
    assert check["data"]["changes"] == [] and not any(s["changed"] for s in check["data"]["sources"])


def test_changed_data_is_said_with_every_changed_number(datasets, tmp_path):
    answer = summarize(datasets)
    write_data(datasets / "small", bump=1000)
    code, check, said = verify(datasets, answer, tmp_path)
    assert code == 1, said
    data = check["data"]
    assert data["status"] == "data_changed"
    [source] = data["sources"]
    assert source["changed"] and source["recorded_hash"] != source["current_hash"], source
    # Row 0 of the id order (n = 0, kind "2 b") is not counted under kind "1 a": the
    # answer's numbers are unchanged, and the check says so.
    assert data["changes"] == [] and "no value of this answer changed" in data["summary"]

    # The same with a value the answer counts: n of r01 (kind "1 a", group g1).
    write_data(datasets / "small")
    answer = summarize(datasets)
    import pyarrow.parquet as pq

    table = pq.read_table(datasets / "small" / "data.parquet").to_pydict()
    table["n"][1] += 5
    import pyarrow as pa

    pq.write_table(pa.table(table), datasets / "small" / "data.parquet")
    code, check, said = verify(datasets, answer, tmp_path)
    assert code == 1, said
    changes = check["data"]["changes"]
    assert len(changes) == 1, changes
    [c] = changes
    assert c["at"] == "row 2 (g1), column sum:n" or c["at"].endswith("column sum:n"), c
    assert c["new"] == c["old"] + 5
    assert "sum:n" in said and f"{c['old']} → {c['new']}" in said


def test_a_removed_field_makes_it_not_reproducible(datasets, tmp_path):
    answer = summarize(datasets)
    yaml = (datasets / "small" / "dataset.yaml").read_text(encoding="utf-8")
    (datasets / "small" / "dataset.yaml").write_text(
        "\n".join(l for l in yaml.splitlines() if "name: grp" not in l) + "\n", encoding="utf-8"
    )
    code, check, said = verify(datasets, answer, tmp_path)
    assert code == 2, said
    assert check["data"]["status"] == "not_reproducible"
    assert "grp" in " ".join(check["data"]["reasons"]), check["data"]["reasons"]


def test_edited_numbers_are_found_out(datasets, tmp_path):
    answer = summarize(datasets)
    answer["data"]["rows"][0][1] += 1
    code, check, said = verify(datasets, answer, tmp_path)
    assert code == 1, said
    data = check["data"]
    assert data["status"] == "altered" and data["result_hash_matches"] is False
    [c] = data["changes"]
    assert c["path"] == "/rows/0/1" and c["old"] == c["new"] + 1


def test_an_edited_call_is_found_out(datasets, tmp_path):
    """The hash covers the recorded call too: an answer whose call was changed is altered,
    not a change of Tally's semantics."""
    answer = summarize(datasets)
    answer["provenance"]["query"]["arguments"]["where"] = {"kind": {"$in": ["2 b"]}}
    code, check, said = verify(datasets, answer, tmp_path)
    assert code == 1, said
    assert check["data"]["status"] == "altered" and check["data"]["changes"], check["data"]


def test_not_an_answer_is_refused_with_what_would_work(datasets, tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"data": {}}', encoding="utf-8")
    p = tally("verify", str(path), "--datasets", str(datasets))
    assert p.returncode == 1 and "provenance" in p.stderr, p.stderr
    p = tally("verify", str(tmp_path / "missing.json"), "--datasets", str(datasets))
    assert p.returncode == 1 and "cannot read" in p.stderr, p.stderr


def stdio(datasets: Path, cache: Path | None = None):
    from mcp import StdioServerParameters

    cached = ["--cache-dir", str(cache)] if cache else ["--no-cache"]
    return StdioServerParameters(
        command=tally_bin(), args=["serve", "--datasets", str(datasets), *cached],
        env={"TALLY_LOG": "warn", "PATH": os.environ.get("PATH", "")},
    )


async def test_verify_answer_over_mcp_in_another_server_process(datasets, tmp_path):
    # Both processes keep their data in one cache, and so sign cursors with its key.
    cache = tmp_path / "cache"
    async with Client(stdio(datasets, cache), mode="legacy", cache=None) as c:
        first = await c.call_tool("query_records", {"dataset_id": "small", "order_by": ["-n"], "limit": 7})
        page = json.loads(first.content[0].text)
        second = await c.call_tool("query_records", {"dataset_id": "small", "order_by": ["-n"], "limit": 7, "cursor": page["data"]["next_cursor"]})
        assert not second.is_error
        answer = second.structured_content
    # A process without the cache has a cursor key of its own: the page cannot be asked again
    # there, and it says why, as query_records would.
    async with Client(stdio(datasets), mode="legacy", cache=None) as c:
        r = await c.call_tool("verify_answer", {"envelope": answer})
        check = r.structured_content["data"]
        assert check["status"] == "not_reproducible", check
        assert any("cursor" in reason for reason in check["reasons"]), check
    # Another process of the same datasets directory and cache: the same cursor key.
    async with Client(stdio(datasets, cache), mode="legacy", cache=None) as c:
        r = await c.call_tool("verify_answer", {"envelope": answer})
        assert not r.is_error, r.content[0].text
        check = r.structured_content["data"]
        assert check["status"] == "identical", check["changes"]
        assert check["tool"] == "query_records" and check["arguments"]["cursor"]
        # As JSON text too, and an edited one is found out.
        answer["data"]["rows"][0][-1] = -1
        r = await c.call_tool("verify_answer", {"envelope": json.dumps(answer, ensure_ascii=False)})
        assert r.structured_content["data"]["status"] == "altered"
        r = await c.call_tool("verify_answer", {"envelope": {"rows": []}})
        assert r.is_error and "data" in r.content[0].text and "provenance" in r.content[0].text
