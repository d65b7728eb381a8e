"""Answers a model gets right (issue 15), through the official MCP client over stdio, on the
real survey: text written full-width is found, a code's label is not a silent two-code match,
a name of an undeclared column is refused naming it, and a default page fits the token
budget. Skips without the reference data, except under CI=true."""

import json

import anyio
import pytest
from mcp import Client

from conftest import reference_survey, stdio_params

pytestmark = pytest.mark.anyio

TIMEOUT = 120


def body(result) -> dict:
    return json.loads(result.content[0].text)


def estimated_tokens(text: str) -> int:
    """As Tally estimates them: about 4 ASCII characters or 1 other character a token."""
    ascii_chars = sum(1 for c in text if ord(c) < 128)
    return -(-ascii_chars // 4) + (len(text) - ascii_chars)


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    return str(reference_survey(tmp_path_factory, "answers"))


def params(datasets: str):
    p = stdio_params()
    p.args = ["serve", "--datasets", datasets, "--call-timeout-ms", "60000"]
    return p


async def test_full_width_text_coded_labels_undeclared_names_and_page_size(survey):
    with anyio.fail_after(TIMEOUT):
        async with Client(params(survey), mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
            # q finds e-Tax written full-width (（ｅ－Ｔａｘ）): 1,341 records, not 2.
            out = body(await c.call_tool("query_records", {"dataset_id": "survey", "q": "e-Tax", "limit": 1}))
            assert out["data"]["total"] > 1000, out["data"]["total"]

            # "実施済" on the coded field is the code 1 実施済 (said), not 1 and 5 together.
            out = body(await c.call_tool("summarize_records", {"dataset_id": "survey", "where": {"オンライン化の実施状況": "実施済"}}))
            assert out["data"]["rows"] == [[36315]], out["data"]["rows"]
            assert any("1 実施済" in w for w in out["provenance"]["warnings"])
            out = body(await c.call_tool("summarize_records", {"dataset_id": "survey", "where": {"オンライン化の実施状況": {"$contains": "実施済"}}}))
            assert out["data"]["rows"] == [[38731]]
            assert any("matched 2 codes" in w for w in out["provenance"]["warnings"])

            # avg:オンライン化率 names the undeclared column: refused, not read as オンライン率.
            r = await c.call_tool("summarize_records", {"dataset_id": "survey", "metrics": ["avg:オンライン化率"]})
            assert r.is_error
            err = body(r)["error"]
            assert "オンライン化率" in err["message"] and "not declared" in err["message"], err

            # A default page fits the token budget; the columns left out are named.
            out = body(await c.call_tool("query_records", {"dataset_id": "survey"}))
            tokens = estimated_tokens(json.dumps(out["data"]["rows"], ensure_ascii=False))
            print(f"default page: {len(out['data']['rows'])} rows, {len(out['data']['columns'])} columns, ~{tokens} tokens")
            assert tokens <= 6100
            assert out["data"]["omitted_columns"]

            # Summaries can be ordered: the top 3 by online rate.
            out = body(await c.call_tool("summarize_records", {
                "dataset_id": "survey", "group_by": ["所管府省庁"], "metrics": ["count", "avg:オンライン率"],
                "order_by": ["-オンライン率"], "limit": 3,
            }))
            rates = [row[2] for row in out["data"]["rows"]]
            assert rates == sorted(rates, reverse=True) and len(rates) == 3


async def test_tool_descriptions_name_only_what_is_served(survey):
    with anyio.fail_after(TIMEOUT):
        async with Client(params(survey), mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
            tools = (await c.list_tools()).tools
            text = json.dumps([{"d": t.description, "s": t.input_schema} for t in tools], ensure_ascii=False)
            assert '\\"survey\\"' in text or '"survey"' in text, "examples use the dataset served"
            assert "procedures" not in text, "no demo dataset that is not served"
            assert "行政手続法" not in text and "law_title" not in text, "no law example without a law dataset"


def test_check_says_which_single_valued_fields_hold_several_codes(survey):
    """Issue 37: three fields the published definition declares single-valued hold cells of
    several codes; `tally check` reads the data and says so, with how to declare them."""
    import subprocess

    from conftest import tally_bin

    done = subprocess.run(
        [tally_bin(), "check", survey], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for field in ("添付書類等提出の撤廃/省略状況", "添付書類等への電子署名", "添付形式等が定められた規定"):
        assert f"note: field `{field}` is declared with one value per cell" in done.stdout, done.stdout
    assert "multi_value: true" in done.stdout
