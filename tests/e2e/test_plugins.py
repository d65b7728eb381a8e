"""Wasm plugins through the real MCP client: the built-in documents plugin over the reference
documents, hot reload of a component, and hostile plugins that must fail alone. Times are
printed, never asserted."""

import hashlib
import json
import re
import os
import shutil
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import HttpServer, requests_in_flight, stdio_params, wait_for

pytestmark = pytest.mark.anyio

WASM = Path(os.environ.get("TALLY_WASM_DIR", ""))
REFERENCE = Path(os.environ.get("TALLY_REFERENCE", Path(__file__).resolve().parents[3] / "shared" / "reference"))
BOUND = 30.0
TIMEOUT = 120


def component(stem: str) -> Path:
    path = WASM / f"{stem}.wasm"
    if not path.is_file():
        pytest.skip(f"TALLY_WASM_DIR has no {stem}.wasm (the cargo test wrapper sets it)")
    return path


def reference_documents() -> Path:
    docs = REFERENCE / "documents"
    if not docs.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the reference documents are missing ({docs})")
        pytest.skip("the reference documents are not beside the repository")
    return docs


def body(result) -> dict:
    return json.loads(result.content[0].text)


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def write_atomic(path: Path, data: bytes):
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)


def s_title(source: dict) -> str:
    return source["title"]


def sources_by_id(env: dict) -> dict:
    return {s["id"]: s for s in env["provenance"]["sources"]}


DOCUMENTS_YAML = """\
title: Reference documents
publisher: デジタル庁
license: CC0-1.0
backend:
  kind: wasm
  component: builtin:documents
  config:
    folder: docs
    base_url: "https://example.org/guidebooks/"
fields:
- {name: path, role: dim, desc: The Markdown file}
- {name: document_title, role: dim, desc: The document title}
- {name: heading_path, role: attr, desc: Headings down to the section}
- {name: heading, role: attr, desc: The section heading}
- {name: heading_level, role: attr, data_type: integer, desc: Heading level}
- {name: text, role: attr, groupable: false, desc: Section text}
"""


async def test_reference_documents_search_and_summarize(tmp_path):
    docs = reference_documents()
    folder = tmp_path / "refdocs"
    (folder / "docs").mkdir(parents=True)
    files = sorted(p for p in docs.iterdir() if p.suffix == ".md")
    for p in files:
        shutil.copyfile(p, folder / "docs" / p.name)
    (folder / "dataset.yaml").write_text(DOCUMENTS_YAML, encoding="utf-8")
    server = HttpServer(datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                started = time.monotonic()
                r = await c.call_tool(
                    "query_records",
                    {
                        "dataset_id": "refdocs",
                        "q": "相互運用性",
                        "select": ["path", "document_title", "heading", "text"],
                        "limit": 20,
                    },
                )
                print(f"first query (scan of {len(files)} documents): {time.monotonic() - started:.2f} s")
                assert not r.is_error, r.content[0].text
                env = body(r)
                data = env["data"]
                assert data["total"] > 0 and len(data["rows"]) > 0
                assert len(data["rowSourceRefs"]) == len(data["rows"])
                sources = sources_by_id(env)
                for row, refs in zip(data["rows"], data["rowSourceRefs"]):
                    path, title, heading, text = row
                    assert "相互運用性" in (path + title + heading + text)
                    assert s_title(sources[refs[0]]) == title
                    [ref] = refs
                    s = sources[ref]
                    assert s["sourceType"] == "document"
                    assert s["uri"] == f"https://example.org/guidebooks/{path}"
                    assert s["locator"] == (f"{path}#{heading}" if heading else path)
                    assert s["contentHash"] == sha256(folder / "docs" / path)
                    assert s["retrievedAt"]
                print("first row's source:", json.dumps(sources[data["rowSourceRefs"][0][0]], ensure_ascii=False))

                r = await c.call_tool(
                    "summarize_records", {"dataset_id": "refdocs", "group_by": ["path"], "metrics": ["count"], "limit": 100}
                )
                assert not r.is_error, r.content[0].text
                env = body(r)
                counts = {row[0]: row[1] for row in env["data"]["rows"]}
                assert set(counts) == {p.name for p in files}
                assert all(n >= 1 for n in counts.values())
                # Aggregates cite the dataset (with the hash of the rows the plugin returned)
                # and each document the records come from, with the hash of its file, as a
                # query cites its rows' (no locator: a summary shows no row).
                assert "rowSourceRefs" not in env["data"]
                [src, *documents] = env["provenance"]["sources"]
                assert src["id"] == "dataset:refdocs" and src["contentHash"].startswith("sha256:")
                assert env["data"]["sourceRefs"] == [s["id"] for s in env["provenance"]["sources"]]
                for d in documents:
                    path = d["uri"].removeprefix("https://example.org/guidebooks/")
                    assert d["sourceType"] == "document" and "locator" not in d
                    assert d["contentHash"] == sha256(folder / "docs" / path), d
                assert sorted(d["uri"] for d in documents) == sorted(f"https://example.org/guidebooks/{p}" for p in counts)
                # Under a condition, only the documents of the records it kept.
                one = sorted(counts)[0]
                r = await c.call_tool(
                    "summarize_records", {"dataset_id": "refdocs", "where": {"path": [one]}, "metrics": ["count"]}
                )
                [_, document] = body(r)["provenance"]["sources"]
                assert document["uri"] == f"https://example.org/guidebooks/{one}"
                assert document["contentHash"] == sha256(folder / "docs" / one)
                total = sum(counts.values())
                r = await c.call_tool("query_records", {"dataset_id": "refdocs", "limit": 1})
                assert body(r)["data"]["total"] == total
                print(f"{len(counts)} documents, {total} sections")
    finally:
        server.stop()


async def test_the_default_guide_over_stdio():
    with anyio.fail_after(TIMEOUT):
        async with Client(stdio_params(), mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
            r = await c.call_tool("query_records", {"dataset_id": "guide", "q": "sandbox", "select": ["path", "heading"]})
            assert not r.is_error, r.content[0].text
            env = body(r)
            assert env["data"]["total"] >= 1
            sources = sources_by_id(env)
            for (path, heading), [ref] in zip(env["data"]["rows"], env["data"]["rowSourceRefs"]):
                assert sources[ref]["locator"] == f"{path}#{heading}"
                assert sources[ref]["uri"] == f"urn:tally:document:guide/{path}"
            extract = env["provenance"]["transformations"][0]["description"]
            assert "plugin `documents`" in extract and "component sha256:" in extract


HOSTILE_YAML = """\
title: hostile {mode}
backend:
  kind: wasm
  component: plugin.wasm
  config: {config}
fields:
- {{name: name, role: dim}}
- {{name: n, role: attr, data_type: integer}}
- {{name: payload, role: attr}}
"""

TEMPLATE_YAML = """\
title: lines
backend:
  kind: wasm
  component: plugin.wasm
  config: {{publisher: "{publisher}"}}
fields:
- {{name: path, role: dim}}
- {{name: line, role: attr, data_type: integer}}
- {{name: text, role: attr}}
"""


def hostile_dataset(root: Path, name: str, mode: str, payload: bool = True, **extra):
    """A dataset of the hostile plugin in `mode`; without `payload` its definition leaves the
    plugin's third column out, so every served read asks for fewer columns than the probe read
    at registration (the `late-error` and `controls` modes fail only on such reads)."""
    folder = root / name
    folder.mkdir()
    shutil.copyfile(component("tally_test_plugin_hostile"), folder / "plugin.wasm")
    config = json.dumps({"mode": mode, **extra})
    yaml = HOSTILE_YAML.format(mode=mode, config=config)
    if not payload:
        yaml = yaml.replace("- {name: payload, role: attr}\n", "")
    (folder / "dataset.yaml").write_text(yaml, encoding="utf-8")


async def test_hostile_plugins_fail_alone(tmp_path):
    secret = "TOP-SECRET-OUTSIDE-THE-DATASET"
    (tmp_path / "outside.txt").write_text(secret, encoding="utf-8")
    hostile_dataset(tmp_path, "ok", "ok")
    hostile_dataset(tmp_path, "loop", "loop")
    hostile_dataset(tmp_path, "memory", "memory")
    hostile_dataset(tmp_path, "trap", "trap")
    hostile_dataset(tmp_path, "oversize", "oversize", megabytes=12)
    hostile_dataset(tmp_path, "escape", "escape")
    hostile_dataset(tmp_path, "describe-loop", "describe-loop")
    wrong = tmp_path / "wrong-version"
    wrong.mkdir()
    shutil.copyfile(component("tally_test_plugin_wrong_version"), wrong / "plugin.wasm")
    (wrong / "dataset.yaml").write_text(HOSTILE_YAML.format(mode="wrong", config="{}"), encoding="utf-8")
    notwasm = tmp_path / "not-a-component"
    notwasm.mkdir()
    (notwasm / "plugin.wasm").write_bytes(b"\x7fELF this is not wasm")
    (notwasm / "dataset.yaml").write_text(HOSTILE_YAML.format(mode="none", config="{}"), encoding="utf-8")

    server = HttpServer(
        "--plugin-deadline-ms", "1500", "--plugin-memory-mb", "64", "--plugin-output-mb", "8",
        datasets=str(tmp_path),
    )
    try:
        with anyio.fail_after(TIMEOUT * 2):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                listed = body(await c.call_tool("list_datasets", {}))["data"]
                served = {d["dataset_id"] for d in listed["datasets"]}
                # A plugin whose data cannot be read whole is refused when it registers (its
                # probe read): it never enters service.
                assert served == {"ok"}
                broken = {b["folder"]: " ".join(p["reason"] + " " + p["fix"] for p in b["problems"]) for b in listed["broken_datasets"]}
                print("refused at registration:", json.dumps(broken, ensure_ascii=False, indent=1))
                assert "plugin API 9.0.0" in broken["wrong-version"] and "plugin API 0.1.0" in broken["wrong-version"]
                assert "deadline" in broken["describe-loop"]
                assert "is not WebAssembly" in broken["not-a-component"]

                expected = {
                    "loop": "deadline of 1.5 s",
                    "memory": "memory limit of 64.0 MiB",
                    "trap": "trap in the middle of a scan",
                    "escape": "could not read outside the dataset folder",
                    "oversize": "over the cap of 8.0 MiB",
                }
                for name, needle in expected.items():
                    assert "the probe read of its data at registration failed" in broken[name] and needle in broken[name], broken[name]
                    assert secret not in broken[name]
                    r = await c.call_tool("query_records", {"dataset_id": name})
                    assert r.is_error and needle in r.content[0].text, r.content[0].text

                started = time.monotonic()
                r = await c.call_tool("query_records", {"dataset_id": "ok", "select": ["name", "n"]})
                print(f"a normal query after them: {time.monotonic() - started:.2f} s")
                assert not r.is_error, r.content[0].text
                env = body(r)
                assert env["data"]["rows"] == [["alpha", 1], ["beta", 2], ["gamma", 3]]
                assert len(env["data"]["rowSourceRefs"]) == 3
    finally:
        server.stop()


async def test_replacing_a_component_or_its_config_reloads(tmp_path):
    folder = tmp_path / "swap"
    # Without `payload`, the dataset's reads ask fewer columns than the registration's probe
    # read, so they scan (1.5 s) instead of taking the probe's rows: the call is in flight.
    hostile_dataset(tmp_path, "swap", "slow", payload=False, millis=1500)
    server = HttpServer(datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT * 2):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                old_version = body(await c.call_tool("list_datasets", {}))["data"]["datasets"][0]["version"]
                results = {}

                async def slow_call():
                    r = await c.call_tool("query_records", {"dataset_id": "swap", "select": ["name"]})
                    results["slow"] = r

                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow_call)
                    await requests_in_flight(server)
                    # The new version: another component and a definition for its columns.
                    (folder / "notes.txt").write_text("first line\nsecond line\n", encoding="utf-8")
                    write_atomic(folder / "plugin.wasm", component("tally_plugin_template").read_bytes())
                    write_atomic(folder / "dataset.yaml", TEMPLATE_YAML.format(publisher="Org A").encode())
                r = results["slow"]
                assert not r.is_error, r.content[0].text
                env = body(r)
                assert env["data"]["rows"] == [["alpha"], ["beta"], ["gamma"]], "the old instance finished its call"
                assert env["data"]["dataset_version"] == old_version

                async def template_served():
                    r = await c.call_tool("query_records", {"dataset_id": "swap", "select": ["path", "line", "text"]})
                    return not r.is_error and body(r)["data"]["rows"] == [
                        ["notes.txt", 1, "first line"],
                        ["notes.txt", 2, "second line"],
                    ] and body(r)

                env = await wait_for("replaced component served", template_served)
                [ref] = env["data"]["rowSourceRefs"][0]
                assert sources_by_id(env)[ref]["publisher"] == "Org A"
                assert sources_by_id(env)[ref]["locator"] == "notes.txt:1"

                write_atomic(folder / "dataset.yaml", TEMPLATE_YAML.format(publisher="Org B").encode())

                async def new_config():
                    r = await c.call_tool("query_records", {"dataset_id": "swap", "limit": 1})
                    if r.is_error:
                        return False
                    env = body(r)
                    [ref] = env["data"]["rowSourceRefs"][0]
                    return sources_by_id(env)[ref]["publisher"] == "Org B"

                await wait_for("changed config served", new_config)
    finally:
        server.stop()


async def test_what_a_plugin_wrote_to_stderr_comes_with_its_error(tmp_path):
    """A plugin that returns an error after logging more than the 16 KiB of stderr kept: the
    end of its log (its reason) reaches the client with the error and the operator's log, and
    the flood before it neither traps the plugin nor fills the message."""
    import httpx2

    hostile_dataset(tmp_path, "late", "late-error", payload=False)
    hostile_dataset(tmp_path, "ok", "ok")
    server = HttpServer(datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            # Its probe read at registration passes, so it is served; the server's first read
            # as served fails, and /health counts it broken from then on.
            async def unreadable():
                health = httpx2.get(server.base + "/health").json()
                return health.get("unreadable_datasets") and health

            health = await wait_for("the unreadable dataset in /health", unreadable)
            assert health["unreadable_datasets"] == ["late"] and health["broken_datasets"] == 1, health
            assert health["datasets"] == 2
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                # list_datasets says what /health says: still served, and listed broken with why.
                listed = body(await c.call_tool("list_datasets", {}))["data"]
                assert sorted(d["dataset_id"] for d in listed["datasets"]) == ["late", "ok"]
                [late] = listed["broken_datasets"]
                assert late["folder"] == "late" and late["serving_version"], late
                assert "could not read part 2 of 3" in late["problems"][0]["reason"], late
                for _ in range(4):
                    assert (await c.call_tool("query_records", {"dataset_id": "late"})).is_error
                r = await c.call_tool("query_records", {"dataset_id": "late"})
                assert r.is_error, r.content[0].text
                message = body(r)["error"]["message"]
                print(message)
                assert "could not scan: could not read part 2 of 3" in message
                assert "it wrote to stderr (the end): " in message
                assert "hostile plugin: part 2 of 3 is unreadable (bad header at byte 17) (fix" in message, message
                assert "it wrote to stderr (the end): hostile plugin: debug line" in message, "whole lines only"
                # The end only: the first lines of the flood are not kept, and the plugin
                # did not trap on them.
                assert "debug line 000" not in message and "debug line 399" in message
                assert "trapped" not in message and "panicked" not in message

                async def logged():
                    return [line for line in server.log if "the scan failed" in line]

                [line] = (await wait_for("the failed scan in the log", logged))[:1]
                # Logged once for the background read and the five calls: once a minute at most.
                assert len(await logged()) == 1, await logged()
                print(line)
                assert "WARN" in line and "dataset=late" in line and "could not read part 2 of 3" in line, line
                assert "part 2 of 3 is unreadable (bad header at byte 17)" in line, line
    finally:
        server.stop()


async def test_looping_plugins_cost_start_up_about_one_deadline(tmp_path):
    """Every plugin folder's probe scan ran after the one before, so each plugin that loops
    added its whole deadline to start-up. Folders register four at a time now: four looping
    plugins and a good one are listed, in folder order, after about one deadline. The time to
    the first answer is printed (the figure of issue 54), never asserted."""
    for i in range(4):
        hostile_dataset(tmp_path, f"loop{i}", "loop")
    hostile_dataset(tmp_path, "ok", "ok")
    started = time.monotonic()
    server = HttpServer("--plugin-deadline-ms", "2000", datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                listed = body(await c.call_tool("list_datasets", {}))["data"]
                print(f"4 looping plugins, a 2 s deadline: the first list_datasets answered {time.monotonic() - started:.2f} s after start")
                assert [d["dataset_id"] for d in listed["datasets"]] == ["ok"]
                assert [b["folder"] for b in listed["broken_datasets"]] == ["loop0", "loop1", "loop2", "loop3"]
                for b in listed["broken_datasets"]:
                    assert "the probe read of its data at registration failed" in b["problems"][0]["reason"], b
                    assert "deadline of 2.0 s" in b["problems"][0]["reason"], b
        # Logged in folder order too.
        logged = [line for line in server.log if "the probe read of its data at registration failed" in line]
        # The folder first after the log's target (`tally_storage::catalog`, or a module of it).
        folders = [re.search(r"WARN tally_storage::catalog(?:::\w+)*: ([^/]+)/", line).group(1) for line in logged]
        assert folders == ["loop0", "loop1", "loop2", "loop3"], logged
    finally:
        server.stop()


def raw_controls(text: str) -> list[str]:
    """The characters of `text` that act on a terminal or reorder text: C0 controls but the line
    break, DEL, C1 controls, line and paragraph separators, bidirectional marks and overrides."""
    bidi = {0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
    return [
        repr(ch) for ch in text
        if (ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) <= 0x9F or ord(ch) in bidi
    ]


async def test_control_characters_a_plugin_writes_reach_clients_and_the_log_escaped(tmp_path):
    """A plugin's error reached clients with raw ESC, BEL and CR, and the reason of a dataset
    whose probe scan failed reached the log with the line breaks of what the plugin wrote to
    stderr, so a plugin could forge a log line (`2026-01-01T00:00:00Z ERROR forged`). Now
    every text a plugin gives is escaped where it enters (`\\u{1b}`, `\\r`), the end of its
    stderr keeps its own lines for the client only, and every log line that carries plugin
    text is one line."""
    hostile_dataset(tmp_path, "controls", "controls", payload=False)
    hostile_dataset(tmp_path, "probe", "controls", at_probe=True)
    server = HttpServer(datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                # Refused at registration: its probe scan failed (the reason is a client's).
                listed = body(await c.call_tool("list_datasets", {}))["data"]
                assert [d["dataset_id"] for d in listed["datasets"]] == ["controls"]
                # (`controls` is listed there too once a read of it has failed: it stays served.)
                [broken] = [b for b in listed["broken_datasets"] if b["folder"] == "probe"]
                reason = broken["problems"][0]["reason"]
                # Served (its probe read passes); a read as served fails.
                r = await c.call_tool("query_records", {"dataset_id": "controls"})
                assert r.is_error, r.content[0].text
                message = body(r)["error"]["message"]
                for text in (reason, message):
                    print(text)
                    assert raw_controls(text) == [], text
                    # The plugin's error, on one line, its characters written visibly.
                    assert "\\u{1b}]0;title\\u{7}bad\\r\\n2026-01-01T00:00:00Z ERROR forged from the error \\u{202e}desrever\\u{9b}" in text, text
                    # What it wrote to stderr: its lines kept for the client, nothing else raw.
                    assert "\\u{1b}[31mred\\u{1b}[0m, a bell \\u{7}, a return\\rover\n" in text, text
                    assert "\n2026-01-01T00:00:00Z ERROR forged from stderr" in text, text

            async def logged():
                lines = list(server.log)
                return (
                    any("the scan failed" in line for line in lines)
                    and any("probe/dataset.yaml" in line for line in lines)
                    and lines
                )

            lines = await wait_for("both failures in the log", logged)
            # The log is read as text with universal newlines: a raw CR would split a line too.
            forged = [line for line in lines if "forged" in line]
            for line in forged:
                print(line, end="")
            # The probe's refusal, and each failed read (the client's; the background count's).
            assert len(forged) >= 2, forged
            for line in forged:
                assert not line.startswith("2026-01-01T00:00:00Z"), f"a plugin wrote a line of the log: {line!r}"
                assert raw_controls(line.rstrip("\n")) == [], line
                assert "\\n2026-01-01T00:00:00Z ERROR forged from stderr" in line, line
                assert "\\u{1b}[31mred" in line and "\\u{7}" in line, line
            assert any("WARN" in line and "dataset=controls" in line and "the scan failed" in line for line in forged), forged
            assert any("WARN" in line and "probe/dataset.yaml" in line and "the probe read of its data at registration failed" in line for line in forged), forged
    finally:
        server.stop()


async def test_a_plugin_that_cannot_read_is_broken_and_a_reload_to_one_keeps_the_last_good_version(tmp_path):
    """A plugin that describes itself but cannot read its folder is refused when it registers
    (its probe read of the whole data): listed broken with the reason, counted in /health, said in the
    log. A reload to a version whose probe fails keeps the last good version serving, as a
    broken dataset.yaml does."""
    import httpx2 as httpx

    root = Path(__file__).resolve().parents[2]
    shutil.copytree(root / "datasets" / "guide", tmp_path / "docs")
    yaml = tmp_path / "docs" / "dataset.yaml"
    yaml.write_text(yaml.read_text(encoding="utf-8").replace("folder: docs", "folder: no-such-folder"), encoding="utf-8")
    hostile_dataset(tmp_path, "swap", "ok")
    server = HttpServer(datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT * 2):
            health = httpx.get(server.base + "/health").json()
            assert health["datasets"] == 1 and health["broken_datasets"] == 1, health
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                listed = body(await c.call_tool("list_datasets", {}))["data"]
                assert [d["dataset_id"] for d in listed["datasets"]] == ["swap"]
                [docs] = listed["broken_datasets"]
                reason = docs["problems"][0]["reason"]
                print(reason)
                assert docs["folder"] == "docs" and "the probe read of its data at registration failed" in reason and "no-such-folder" in reason
                assert any("docs/dataset.yaml" in line and "no-such-folder" in line for line in server.log), list(server.log)

                r = await c.call_tool("query_records", {"dataset_id": "swap", "select": ["name"]})
                env = body(r)
                assert env["data"]["rows"] == [["alpha"], ["beta"], ["gamma"]]
                good = env["data"]["dataset_version"]

                # A new version whose scan fails at once: refused, the last good one serves.
                write_atomic(tmp_path / "swap" / "dataset.yaml", HOSTILE_YAML.format(mode="trap", config='{"mode": "trap"}').encode())

                async def swap_broken():
                    listed = body(await c.call_tool("list_datasets", {}))["data"]
                    return [b for b in listed["broken_datasets"] if b["folder"] == "swap"]

                [swap] = await wait_for("the failed reload reported", swap_broken)
                print(json.dumps(swap, ensure_ascii=False))
                assert swap["serving_version"] == good
                assert "the probe read of its data at registration failed" in swap["problems"][0]["reason"]
                assert "trap in the middle of a scan" in swap["problems"][0]["reason"]
                r = await c.call_tool("query_records", {"dataset_id": "swap", "select": ["name"]})
                assert not r.is_error, r.content[0].text
                assert body(r)["data"]["rows"] == [["alpha"], ["beta"], ["gamma"]]
                assert body(r)["data"]["dataset_version"] == good
                health = httpx.get(server.base + "/health").json()
                assert health["datasets"] == 1 and health["broken_datasets"] == 2, health
                assert any("swap/dataset.yaml" in line and "trap in the middle of a scan" in line for line in server.log)

                # Fixed: the new version replaces the old one and is no longer broken.
                write_atomic(tmp_path / "swap" / "dataset.yaml", HOSTILE_YAML.format(mode="ok again", config='{"mode": "ok"}').encode())

                async def fixed():
                    listed = body(await c.call_tool("list_datasets", {}))["data"]
                    return all(b["folder"] != "swap" for b in listed["broken_datasets"]) and listed

                listed = await wait_for("the fixed version served", fixed)
                assert [d["title"] for d in listed["datasets"]] == ["hostile ok again"]
    finally:
        server.stop()


async def test_a_dataset_that_cannot_be_read_is_listed_only_to_who_may_see_it(tmp_path):
    """The entry `list_datasets` adds for a served dataset whose read failed (with the plugin's
    words and stderr) is built from the caller's view: a token scoped to other datasets learns
    neither the dataset nor its failure."""
    from test_security import ADMIN, client

    hostile_dataset(tmp_path, "late", "late-error", payload=False)
    hostile_dataset(tmp_path, "ok", "ok")
    scoped = "ok-only-token-0123456789abcdef"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {ADMIN}\nscoped {scoped} ok\n", encoding="utf-8")
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    for name in ("late", "ok"):
        shutil.move(tmp_path / name, datasets / name)
    server = HttpServer("--token-file", str(tokens), datasets=str(datasets))
    try:
        with anyio.fail_after(TIMEOUT):
            async with client(server, ADMIN) as admin:

                async def late_listed():
                    listed = body(await admin.call_tool("list_datasets", {}))["data"]
                    return [b for b in listed["broken_datasets"] if b["folder"] == "late"]

                [late] = await wait_for("the failed read listed to the operator", late_listed)
                assert "could not read part 2 of 3" in late["problems"][0]["reason"], late
            async with client(server, scoped) as c:
                listed = body(await c.call_tool("list_datasets", {}))["data"]
                assert [d["dataset_id"] for d in listed["datasets"]] == ["ok"]
                assert listed["broken_datasets"] == [], listed["broken_datasets"]
                assert "late" not in json.dumps(listed)
    finally:
        server.stop()

