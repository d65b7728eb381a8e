"""Resource templates, prompts and completions, as the Python SDK sees them over stdio and
HTTP in both protocol eras, limited to what the caller's token may see."""

import anyio
import pytest
from mcp import Client, MCPError
from mcp_types import PromptReference, ResourceTemplateReference

from conftest import HttpServer, stdio_params, wait_for

pytestmark = pytest.mark.anyio

TIMEOUT = 60


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_templates_prompts_and_completions(transport, mode, http_server):
    target = stdio_params() if transport == "stdio" else http_server.url
    with anyio.fail_after(TIMEOUT):
        async with Client(target, mode=mode, cache=None, read_timeout_seconds=TIMEOUT) as c:
            templates = {t.uri_template: t for t in (await c.list_resource_templates()).resource_templates}
            assert set(templates) == {"tally://datasets/{id}", "tally://datasets/{id}/fields/{name}"}
            field = await c.read_resource("tally://datasets/procedures/fields/所管府省庁")
            (content,) = field.contents
            assert content.mime_type == "application/json"
            assert '"role":"dim"' in content.text and "所管府省庁" in content.text
            # The same MIME type in the list and when read.
            listed = {str(r.uri): r.mime_type for r in (await c.list_resources()).resources}
            read = (await c.read_resource("tally://datasets/procedures")).contents[0]
            assert listed["tally://datasets/procedures"] == read.mime_type == "application/json"
            with pytest.raises(MCPError) as e:
                await c.read_resource("tally://datasets/procedures/fields/no such field")
            assert "tally://datasets/procedures lists the fields" in str(e.value)

            prompts = {p.name: p for p in (await c.list_prompts()).prompts}
            assert set(prompts) == {"explore_dataset", "compare_groups", "find_records"}
            assert prompts["compare_groups"].title
            explored = await c.get_prompt("explore_dataset", {"dataset_id": "procedures"})
            text = explored.messages[0].content.text
            assert "inspect_dataset" in text and '"dataset_id": "procedures"' in text
            compared = await c.get_prompt("compare_groups", {"dataset_id": "procedures", "group_by": "所管府省庁", "metric": "avg:オンライン率"})
            assert '"metrics":["avg:オンライン率","count"]' in compared.messages[0].content.text
            with pytest.raises(MCPError) as e:
                await c.get_prompt("compare_groups", {"dataset_id": "procedures", "group_by": "手続名X"})
            assert "not a groupable field" in str(e.value) and "所管府省庁" in str(e.value)

            ids = await c.complete(PromptReference(name="explore_dataset"), {"name": "dataset_id", "value": "pro"})
            assert ids.completion.values[0] == "procedures"
            groups = await c.complete(
                PromptReference(name="compare_groups"), {"name": "group_by", "value": "所管"}, {"dataset_id": "procedures"}
            )
            assert groups.completion.values[0] == "所管府省庁"
            metrics = await c.complete(
                PromptReference(name="compare_groups"), {"name": "metric", "value": "avg:オン"}, {"dataset_id": "procedures"}
            )
            assert "avg:オンライン率" in metrics.completion.values
            # Full-width input folds like names do.
            folded = await c.complete(PromptReference(name="explore_dataset"), {"name": "dataset_id", "value": "ＰＲＯ"})
            assert folded.completion.values[0] == "procedures"
            names = await c.complete(
                ResourceTemplateReference(uri="tally://datasets/{id}/fields/{name}"), {"name": "name", "value": "手続"}, {"id": "procedures"}
            )
            assert names.completion.values and all("手続" in v for v in names.completion.values[:3])

            # A condition: the field, then its codes (a static codelist's, folded like names).
            keys = await c.complete(
                PromptReference(name="compare_groups"), {"name": "where_field", "value": "手続類"}, {"dataset_id": "procedures"}
            )
            assert keys.completion.values[0] == "手続類型"
            codes = await c.complete(
                PromptReference(name="compare_groups"), {"name": "where_value", "value": "２－"},
                {"dataset_id": "procedures", "where_field": "手続類型"},
            )
            assert codes.completion.values == ["2-1 申請等に基づく処分通知等", "2-2 申請等に基づかない処分通知等", "2-3 交付等（民間手続）"]
            # A field whose codes are the values in the data: offered once the data is prepared.
            ministries = await c.complete(
                PromptReference(name="compare_groups"), {"name": "where_value", "value": "デジタ"},
                {"dataset_id": "procedures", "where_field": "所管府省庁"},
            )
            assert ministries.completion.values[0] == "デジタル庁", ministries.completion.values
            # A field with a value per record (69,621 names): candidates come from the 10,000
            # most frequent, and at most 100 are sent, with the total said.
            await c.call_tool("summarize_records", {"dataset_id": "procedures", "group_by": ["手続名"], "limit": 1})
            names = await c.complete(
                PromptReference(name="compare_groups"), {"name": "where_value", "value": ""},
                {"dataset_id": "procedures", "where_field": "手続名"},
            )
            assert len(names.completion.values) == 100 and names.completion.total == 10_000 and names.completion.has_more
            narrowed = await c.get_prompt("compare_groups", {
                "dataset_id": "procedures", "group_by": "所管府省庁", "where_field": "手続類型", "where_value": "1 申請等",
            })
            assert '"where":{"手続類型":["1 申請等"]}' in narrowed.messages[0].content.text
            with pytest.raises(MCPError) as e:
                await c.get_prompt("compare_groups", {
                    "dataset_id": "procedures", "group_by": "所管府省庁", "where_field": "手続類型", "where_value": "9 なし",
                })
            assert "not a code of `手続類型`" in str(e.value) and "1 申請等" in str(e.value)
            # The other argument names of the tools complete too: fields to show, to search, to
            # order by (the sign kept), multi-value fields to explode.
            async def complete(name, value, prompt="find_records"):
                got = await c.complete(PromptReference(name=prompt), {"name": name, "value": value}, {"dataset_id": "procedures"})
                return got.completion.values

            assert (await complete("select", "手続名"))[0] == "手続名"
            assert (await complete("order_by", "-所管"))[0] == "-所管府省庁"
            assert "総手続件数" not in await complete("search_fields", "")
            assert "手続名" in await complete("search_fields", "")
            exploded = await complete("explode", "", prompt="compare_groups")
            assert "実施府省庁" in exploded and "所管府省庁" not in exploded
            found = await c.get_prompt("find_records", {"dataset_id": "procedures", "q": "旅券", "select": "手続名", "order_by": "-総手続件数"})
            text = found.messages[0].content.text
            assert '"q":"旅券"' in text and '"order_by":["-総手続件数"]' in text and '"select":["手続名"]' in text
            with pytest.raises(MCPError) as e:
                await c.get_prompt("compare_groups", {"dataset_id": "procedures", "group_by": "実施府省庁", "explode": "所管府省庁"})
            assert "not a multi-value field" in str(e.value) and "実施府省庁" in str(e.value)
            # Without a law dataset there is no legal-basis prompt.
            assert "find_legal_basis" not in prompts


async def test_completions_see_only_the_tokens_datasets(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("guide-only guide-only-token-0123456789 guide\n")
    server = HttpServer("--token-file", str(tokens))
    try:
        import httpx2

        http = httpx2.AsyncClient(headers={"Authorization": "Bearer guide-only-token-0123456789"})
        from mcp.client.streamable_http import streamable_http_client

        async with Client(streamable_http_client(server.url, http_client=http), mode="legacy", cache=None) as c:
            ids = await c.complete(PromptReference(name="explore_dataset"), {"name": "dataset_id", "value": ""})
            assert ids.completion.values == ["guide"]
            with pytest.raises(MCPError) as e:
                await c.get_prompt("explore_dataset", {"dataset_id": "procedures"})
            assert "no dataset `procedures`" in str(e.value) and "guide" in str(e.value)
            none = await c.complete(PromptReference(name="compare_groups"), {"name": "group_by", "value": ""}, {"dataset_id": "procedures"})
            assert none.completion.values == []
    finally:
        server.stop()


async def test_the_first_completion_after_a_start_offers_the_values_in_the_data():
    """Regression (issue 42): the values of a `codelist: auto` field (所管府省庁) were offered
    only once a tool call had prepared the data, so a client completing a condition first got
    []. A completion now starts the preparation and waits for it a moment; no tool is called
    here."""
    with anyio.fail_after(TIMEOUT):
        async with Client(stdio_params(), cache=None, read_timeout_seconds=TIMEOUT) as c:
            started = anyio.current_time()
            while True:
                got = await c.complete(
                    PromptReference(name="compare_groups"), {"name": "where_value", "value": ""},
                    {"dataset_id": "procedures", "where_field": "所管府省庁"},
                )
                if got.completion.values or anyio.current_time() - started > 30:
                    break
            assert got.completion.values[:3] == ["国土交通省", "厚生労働省", "経済産業省"], got.completion
            assert got.completion.total == 25
            law = await c.complete(
                PromptReference(name="compare_groups"), {"name": "where_value", "value": "建築"},
                {"dataset_id": "procedures", "where_field": "法令名"},
            )
            assert law.completion.values[0] == "建築基準法", law.completion.values


async def test_completing_values_not_ready_says_so_at_once(tmp_path):
    """Values of a table whose first preparation takes longer than a completion may wait (a
    few million records) are not waited for: the completion answers at once, with no values,
    `hasMore`, and `_meta["tally/values"]` saying they are being prepared and about when to
    ask again; the preparation goes on, and a later completion offers them. (It waited 3 s
    and returned nothing, with nothing said.)"""
    import time

    import duckdb

    root = tmp_path / "datasets"
    big = root / "big"
    big.mkdir(parents=True)
    (big / "dataset.yaml").write_text(
        'title: 大きな表\nretrieved_at: "2026-12-01"\nfields:\n- {name: 記録ID, role: id}\n- {name: 地域, role: dim}\n- {name: 件数, role: measure, data_type: integer}\n',
        encoding="utf-8",
    )
    duckdb.connect().execute(
        "COPY (SELECT 'R' || i AS 記録ID, '地域' || (i % 47) AS 地域, 1::BIGINT AS 件数 FROM range(3000000) t(i))"
        f" TO '{big / 'data.parquet'}' (FORMAT parquet)"
    )
    server = HttpServer("--cache-dir", str(tmp_path / "cache"), datasets=str(root))
    try:
        with anyio.fail_after(TIMEOUT * 2):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:

                async def complete():
                    return await c.complete(
                        PromptReference(name="compare_groups"), {"name": "where_value", "value": "地域1"},
                        {"dataset_id": "big", "where_field": "地域"},
                    )

                began = time.monotonic()
                first = await complete()
                took = time.monotonic() - began
                said = (first.meta or {}).get("tally/values") if hasattr(first, "meta") else None
                said = said or (first.model_extra or {}).get("_meta", {}).get("tally/values")
                print(f"first completion in {took * 1000:.0f} ms: {first.completion}, {said}")
                assert first.completion.values == [] and first.completion.has_more, first
                assert said and said["ready"] is False, first
                assert "being prepared" in said["message"] and "3000000 records" in said["message"], said
                assert took < 2.0, f"the completion waited {took:.1f} s for values it could not have"

                async def offered():
                    r = await complete()
                    return r.completion.values or None

                values = await wait_for("the values once prepared", offered, 90)
                assert values[0] == "地域1" and "地域10" in values, values
    finally:
        server.stop()
