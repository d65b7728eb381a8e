"""logging/setLevel and notifications/message (2025-era sessions): a client that asks is told
of datasets added, refused and removed, and of names a call corrected; one that does not ask
is told nothing; no tool data is ever logged."""

import shutil

import anyio
import pytest
from mcp import Client

from conftest import ROOT, stdio_params, wait_for

pytestmark = pytest.mark.anyio

TIMEOUT = 60


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
@pytest.mark.parametrize("asks", [True, False], ids=["asks", "does-not-ask"])
async def test_a_session_is_told_what_it_asked_for(tmp_path, asks):
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    params = stdio_params()
    params.args = ["serve", "--datasets", str(datasets), "--watch", "poll", "--poll-interval-ms", "200"]
    messages = []

    async def received(params):
        messages.append(params.data)

    with anyio.fail_after(TIMEOUT):
        async with Client(params, mode="legacy", cache=None, logging_callback=received, read_timeout_seconds=TIMEOUT) as c:
            if asks:
                await c.set_logging_level("info")
            shutil.copytree(ROOT / "datasets" / "procedures", datasets / "procedures")

            async def served():
                return "procedures" in [d["dataset_id"] for d in (await c.call_tool("list_datasets", {})).structured_content["data"]["datasets"]]

            await wait_for("the new dataset served", served)
            (datasets / "broken").mkdir()
            (datasets / "broken" / "dataset.yaml").write_text("title: [unclosed\n")

            async def refused():
                return "broken" in str((await c.call_tool("list_datasets", {})).structured_content["data"]["broken_datasets"])

            await wait_for("the broken folder reported", refused)
            r = await c.call_tool("summarize_records", {"dataset_id": "procedures", "group_by": ["所管府省"]})
            assert not r.is_error
            if asks:
                await wait_for("the messages", lambda: _has(messages, "names_corrected"))
                events = [m["event"] for m in messages]
                assert "dataset_added" in events and "dataset_refused" in events, events
                added = next(m for m in messages if m["event"] == "dataset_added")
                assert added["dataset_id"] == "procedures" and added["version"]
                corrected = next(m for m in messages if m["event"] == "names_corrected")
                assert "`所管府省` as `所管府省庁`" in corrected["message"]
                # Never tool data: no rows, no envelope.
                assert not any("rows" in m or "data" in m for m in messages)
            else:
                await anyio.sleep(0.5)
                assert messages == []


async def _has(messages, event):
    return any(m.get("event") == event for m in messages)
