"""Resource subscriptions: a client subscribed to a dataset (or one of its fields) is told
notifications/resources/updated when the dataset is reloaded — with resources/subscribe in
the 2025 protocol, and in subscriptions/listen in 2026-07-28."""

import shutil
from contextlib import AsyncExitStack

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import ROOT, HttpServer, stdio_params, wait_for

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


async def test_one_token_cannot_lock_another_out_of_subscriptions(tmp_path):
    """Regression (issue 54, "first come holds the slots"): one token opened 66 sessions and
    subscribed until the server's 16 MiB of subscriptions were full, in 1.1 s, and every other
    caller was refused. One caller now holds at most its share (an eighth), however many
    sessions it opens, and another token still subscribes."""
    datasets = tmp_path / "datasets"
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    tokens = tmp_path / "tokens"
    greedy, other = "greedy-token-0123456789abcdef", "other-token-0123456789abcdef"
    tokens.write_text(f"greedy {greedy}\nother {other}\n", encoding="utf-8")
    # Each session keeps a stream open: room for as many connections as the sessions need.
    s = HttpServer("--token-file", str(tokens), "--rate-limit", "100000", "--rate-burst", "100000",
                   "--max-connections-per-peer", "1000", datasets=str(datasets))

    def client(token: str) -> Client:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
        return Client(streamable_http_client(s.url, http_client=http), mode="legacy", cache=None)

    try:
        with anyio.fail_after(600):
            async with AsyncExitStack() as sessions:
                refusal, held = None, 0
                # URIs of 4 KiB: a session holds 65 of them (256 KiB), the server 16 MiB.
                for n in range(80):
                    c = await sessions.enter_async_context(client(greedy))
                    for i in range(70):
                        try:
                            await c.subscribe_resource(f"tally://datasets/guide/fields/{n:03}-{i:0>3990}")
                            held += 1
                        except MCPError as e:
                            if e.error.data["bound"] == "MAX_SUBSCRIPTION_BYTES":
                                break  # this session is full: the next one
                            refusal = e.error
                            break
                    if refusal is not None:
                        break
                print(f"the greedy token held {held} URIs of 4 KiB in {n + 1} sessions: {refusal}")
                # Its sessions still open, another token subscribes.
                async with client(other) as c:
                    await c.subscribe_resource("tally://datasets/guide")
                    await c.subscribe_resource("tally://datasets/guide/fields/" + "y" * 3990)
                assert refusal is not None and refusal.data["bound"] == "MAX_SUBSCRIPTION_BYTES_PER_CALLER", refusal
                assert "share" in refusal.message and "5 minutes" in refusal.message, refusal.message
    finally:
        s.stop()
