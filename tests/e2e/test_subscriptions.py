"""Resource subscriptions: a client subscribed to a dataset (or one of its fields) is told
notifications/resources/updated when the dataset is reloaded — with resources/subscribe in
the 2025 protocol, and in subscriptions/listen in 2026-07-28."""

import shutil

import anyio
import pytest
from mcp import Client

from conftest import ROOT, stdio_params, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:resources/subscribe is removed")]

TIMEOUT = 60


def server_params(datasets):
    params = stdio_params()
    params.args = ["serve", "--datasets", str(datasets), "--watch", "poll", "--poll-interval-ms", "200"]
    return params


def retitle(datasets, title):
    yaml = datasets / "guide" / "dataset.yaml"
    text = yaml.read_text()
    lines = [f"title: {title}" if line.startswith("title:") else line for line in text.splitlines()]
    yaml.write_text("\n".join(lines) + "\n")


async def test_a_2025_session_is_told_of_an_update(tmp_path):
    datasets = tmp_path / "datasets"
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    updated = []

    async def on_message(message):
        uri = getattr(getattr(message, "params", None), "uri", None)
        if type(message).__name__ == "ResourceUpdatedNotification" or getattr(message, "method", None) == "notifications/resources/updated":
            updated.append(str(uri))

    with anyio.fail_after(TIMEOUT):
        async with Client(server_params(datasets), mode="legacy", cache=None, message_handler=on_message) as c:
            await c.subscribe_resource("tally://datasets/guide")
            # Any URI is taken (MCP lets a client subscribe to any resource); one no reload
            # changes, such as a view, is never notified.
            await c.subscribe_resource("ui://tally/query_records")
            retitle(datasets, "A new title")

            async def told():
                return "tally://datasets/guide" in updated

            await wait_for("resources/updated", told)
            text = (await c.read_resource("tally://datasets/guide")).contents[0].text
            assert "A new title" in text


async def test_a_2026_client_names_the_uris_it_listens_for(tmp_path):
    datasets = tmp_path / "datasets"
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    with anyio.fail_after(TIMEOUT):
        async with Client(server_params(datasets), mode="2026-07-28", cache=None) as c:
            async with c.listen(resource_subscriptions=["tally://datasets/guide"]) as sub:
                assert "tally://datasets/guide" in (sub.honored.resource_subscriptions or [])
                retitle(datasets, "Another title")
                with anyio.fail_after(30):
                    async for event in sub:
                        if "tally://datasets/guide" in str(event):
                            break
