"""One gate for what a caller may see (issue 36): a token scoped to one dataset walks every
MCP method the server answers — from the server's own method table (`host/mcp/src/methods.rs`,
handed over by the cargo test as `methods.json`), checked against every method of the
protocol the official SDK knows — in both protocol eras, and nothing of a hidden dataset (its
id, title, fields, codes, counts) appears in any answer or notification, while the catalog
changes under it. A hidden dataset and one that does not exist get the same answers.

The hidden dataset's names all carry `q7z`, which nothing else served contains, so a leak
anywhere is one substring search."""

import copy
import json
import os
import re
import shutil
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import ROOT, HttpServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:resources/subscribe is removed"),
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

TIMEOUT = 120
ADMIN = "admin-token-0123456789abcdef"
SCOPED = "guide-only-token-0123456789"
HIDDEN = "archive-q7z"
MISSING = "archive-k4w"
FIELD = "region_q7z"
VALUE = "Q7Z-NORTH"
SECRET = re.compile(r"q7z", re.IGNORECASE)
ERAS = ["2025-11-25", "2026-07-28"]


def method_table() -> list[dict]:
    variants = Path(os.environ.get("TALLY_VARIANTS", ""))
    path = variants / "methods.json"
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail("TALLY_VARIANTS has no methods.json; the cargo test wrapper writes it")
        pytest.skip("no methods.json (run through `cargo test`)")
    return json.loads(path.read_text(encoding="utf-8"))


def write_hidden(folder: Path, name: str = HIDDEN, title: str = "Archive Q7Z survey") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    rows = 137
    table = pa.table(
        {
            "id_q7z": [f"q7z-{i:04}" for i in range(rows)],
            FIELD: [["Q7Z-NORTH", "Q7Z-SOUTH"][i % 2] for i in range(rows)],
            "amount_q7z": [i * 3 for i in range(rows)],
        }
    )
    pq.write_table(table, folder / "data.parquet")
    (folder / "dataset.yaml").write_text(
        f"""schema_version: "1"
title: {title}
publisher: Q7Z office
description: Records of the q7z vault.
id_field: id_q7z
fields:
- name: id_q7z
  role: id
  desc: q7z record id
- name: {FIELD}
  role: dim
  desc: q7z region
  codelist:
  - Q7Z-NORTH: north of q7z
  - Q7Z-SOUTH: south of q7z
- name: amount_q7z
  role: measure
  desc: q7z amount
""",
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gate")
    datasets = tmp / "datasets"
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    write_hidden(datasets / HIDDEN)
    tokens = tmp / "tokens"
    tokens.write_text(f"admin {ADMIN}\nscoped {SCOPED} guide\n", encoding="utf-8")
    server = HttpServer(
        "--token-file", str(tokens), "--watch", "poll", "--poll-interval-ms", "200",
        "--rate-limit", "100000", "--rate-burst", "100000",
        datasets=str(datasets),
    )
    server.datasets = datasets
    yield server
    server.stop()


def session(server, token: str, era: str, on_message=None):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
    mode = "legacy" if era.startswith("2025") else era
    kwargs = {"message_handler": on_message} if on_message else {}
    return Client(
        streamable_http_client(server.url, http_client=http), mode=mode, cache=None,
        read_timeout_seconds=TIMEOUT, **kwargs,
    )


async def raw(c: Client, method: str, params: dict | None, on_progress=None) -> dict:
    """One request as the SDK would send it in the session's era, answered as JSON: the result,
    or {"error": {...}}."""
    from mcp.shared.exceptions import MCPError

    data = {"method": method, "params": copy.deepcopy(params) if params is not None else {}}
    opts: dict = {"timeout": 60}
    if on_progress is not None:
        opts["on_progress"] = on_progress
    c.session._stamp(data, opts)
    try:
        return await c.session._dispatcher.send_raw_request(method, data.get("params"), opts)
    except MCPError as e:
        return {"error": {"code": e.error.code, "message": e.error.message, "data": e.error.data}}


def fill(template: str, dataset: str) -> dict:
    text = (
        template.replace("@DATASET@", dataset)
        .replace("@FIELD@", FIELD)
        .replace("@VALUE@", VALUE)
        .replace("@PREFIX@", dataset[:5])
    )
    return json.loads(text)


# Per-answer values that differ between two calls of the same question.
VOLATILE = re.compile(
    r'"(generatedAt|resultHash|retrievedAt|ms|duration_ms)":\s*("[^"]*"|[0-9.]+)|\b\d+(\.\d+)? s\b'
)


def normal(answer, typed: str) -> str:
    if isinstance(answer, dict) and "structuredContent" in answer:
        # The text block repeats the structured content as JSON text.
        answer = {k: v for k, v in answer.items() if k != "content"}
    text = json.dumps(answer, ensure_ascii=False, sort_keys=True)
    return VOLATILE.sub("~", text.replace(typed, "@DATASET@"))


def leaks(text: str, typed: str | None = None) -> list[str]:
    """The secret substrings of `text`, after removing what the client itself typed (the id,
    the field and the code of the probe: that a typed name is echoed tells nothing, and that
    the answer to it is the answer for a dataset that does not exist is checked apart)."""
    if typed:
        for said in (typed, FIELD, VALUE, typed[:5]):
            text = text.replace(said, "")
    return SECRET.findall(text)


async def test_the_method_table_is_what_the_server_answers(gated):
    """Every method of the protocol the official SDK knows is answered iff the table lists it
    for that era: a new surface cannot be left out of the walk below."""
    import mcp_types.methods as spec

    table = {(m["name"], era) for m in method_table() for era in m["eras"]}
    with anyio.fail_after(TIMEOUT):
        for era in ERAS:
            known = sorted({name for name, version in spec.CLIENT_REQUESTS if version == era})
            async with session(gated, ADMIN, era) as c:
                for name in known:
                    if name in ("initialize", "server/discover", "subscriptions/listen"):
                        # Handshakes and the listen stream are exercised by opening sessions
                        # and by the notification walk; they are in the table by name.
                        assert (name, era) in table or name == "initialize" and era == ERAS[1], (name, era)
                        continue
                    params = {"uri": "tally://datasets/guide"} if "resources/" in name and "list" not in name else {}
                    if name == "tools/call":
                        params = {"name": "list_datasets", "arguments": {}}
                    elif name == "prompts/get":
                        params = {"name": "explore_dataset", "arguments": {"dataset_id": "guide"}}
                    elif name == "completion/complete":
                        params = {"ref": {"type": "ref/prompt", "name": "explore_dataset"}, "argument": {"name": "dataset_id", "value": ""}}
                    elif name == "logging/setLevel":
                        params = {"level": "error"}
                    answer = await raw(c, name, params)
                    not_found = answer.get("error", {}).get("code") == -32601
                    assert not_found == ((name, era) not in table), (era, name, answer)
                unknown = await raw(c, "tally/no-such-method", {})
                assert unknown["error"]["code"] == -32601, unknown


async def test_a_scoped_caller_learns_nothing_of_a_hidden_dataset(gated):
    """Every probe of every method, with the hidden dataset's id and with an id no dataset
    has: the same answer (ids aside), and nothing of the hidden dataset in any answer."""
    methods = method_table()
    walked = 0
    with anyio.fail_after(TIMEOUT * 3):
        for era in ERAS:
            notices: list[str] = []

            async def on_message(message):
                notices.append(repr(message))

            async with session(gated, SCOPED, era, on_message) as c:
                for method in methods:
                    if era not in method["eras"]:
                        continue
                    for probe in method["probes"]:
                        answers = {}
                        for typed in (HIDDEN, MISSING):
                            params = fill(json.dumps(probe), typed)
                            progress: list[str] = []

                            async def on_progress(progress_value, total, message):
                                progress.append(message or "")

                            meta = params.pop("_meta", None) if isinstance(params, dict) else None
                            answer = await raw(c, method["name"], params, on_progress if meta else None)
                            answers[typed] = (normal(answer, typed), normal(progress, typed))
                            text = json.dumps(answer, ensure_ascii=False) + json.dumps(progress, ensure_ascii=False)
                            assert leaks(text, typed) == [], (era, method["name"], params, text[:2000])
                            walked += 1
                        assert answers[HIDDEN] == answers[MISSING], (era, method["name"], probe, answers)
                assert leaks("\n".join(notices)) == [], notices
    print(f"probes walked: {walked}")
    assert walked >= 40


async def test_notifications_of_a_scoped_session_never_name_a_hidden_dataset(gated):
    """A scoped 2025 session that set a log level and subscribed (to a visible and to a hidden
    URI), and a scoped 2026 listen naming both, are told of a visible change, and of nothing
    when a hidden dataset is added, changed or removed; /health gives it no counts."""
    datasets: Path = gated.datasets
    notices_2025: list[str] = []
    notices_2026: list[str] = []

    async def on_message(message):
        notices_2025.append(repr(message))

    with anyio.fail_after(TIMEOUT * 2):
        async with session(gated, SCOPED, "2025-11-25", on_message) as old, session(gated, SCOPED, "2026-07-28") as new:
            await raw(old, "logging/setLevel", {"level": "debug"})
            for uri in ("tally://datasets/guide", f"tally://datasets/{HIDDEN}", f"tally://datasets/{HIDDEN}/fields/{FIELD}", "tally://datasets/vault-new-q7z"):
                assert "error" not in await raw(old, "resources/subscribe", {"uri": uri})
            async with new.listen(
                resources_list_changed=True,
                prompts_list_changed=True,
                resource_subscriptions=["tally://datasets/guide", f"tally://datasets/{HIDDEN}", "tally://datasets/vault-new-q7z"],
            ) as sub:

                async def collect():
                    async for event in sub:
                        notices_2026.append(repr(event))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(collect)
                    # Hidden changes: one added, one changed, then removed.
                    write_hidden(datasets / "vault-new-q7z", "vault-new-q7z", "New Q7Z")
                    yaml = datasets / HIDDEN / "dataset.yaml"
                    yaml.write_text(yaml.read_text().replace("Archive Q7Z survey", "Archive Q7Z survey, revised"))

                    async def admin_sees(expected_title):
                        async with session(gated, ADMIN, "2025-11-25") as admin:
                            listed = (await admin.call_tool("list_datasets", {})).structured_content["data"]["datasets"]
                            return any(d["title"] == expected_title for d in listed)

                    deadline = time.monotonic() + 60
                    while not (await admin_sees("Archive Q7Z survey, revised") and await admin_sees("New Q7Z")):
                        assert time.monotonic() < deadline, "the hidden change was not served"
                        await anyio.sleep(0.2)
                    shutil.rmtree(datasets / "vault-new-q7z")
                    # The removal served (the admin no longer sees it) is the event: a session
                    # would be told of it now, and in order, before anything that follows.
                    deadline = time.monotonic() + 60
                    while await admin_sees("New Q7Z"):
                        assert time.monotonic() < deadline, "the hidden removal was not served"
                        await anyio.sleep(0.2)
                    hidden_only = len(notices_2025), len(notices_2026)
                    # A visible change, which both must hear of.
                    guide = datasets / "guide" / "dataset.yaml"
                    guide.write_text(guide.read_text().replace("title: Tally guide", "title: Tally guide (revised)"))
                    deadline = time.monotonic() + 60
                    while not (any("tally://datasets/guide" in n for n in notices_2025) and any("tally://datasets/guide" in n for n in notices_2026)):
                        assert time.monotonic() < deadline, (notices_2025, notices_2026)
                        await anyio.sleep(0.2)
                    tg.cancel_scope.cancel()
    print("2025 session:", notices_2025)
    print("2026 listen:", notices_2026)
    assert hidden_only == (0, 0), ("told of hidden changes", notices_2025, notices_2026)
    assert leaks("\n".join(notices_2025 + notices_2026)) == []
    scoped = httpx2.get(gated.base + "/health", headers={"Authorization": f"Bearer {SCOPED}"}).json()
    anonymous = httpx2.get(gated.base + "/health").json()
    admin = httpx2.get(gated.base + "/health", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert "datasets" not in scoped and "datasets" not in anonymous, (scoped, anonymous)
    assert admin["datasets"] == 2, admin
