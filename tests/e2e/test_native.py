"""Native plugins through the real MCP client: the workspace-built SQLite plugin against the same
data served from Parquet, conditions that reached SQLite, the opt-in, a library replaced under a
running server, and libraries that panic or do not fit. Times are printed, never asserted."""

import json
import os
import shutil
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import HttpServer

pytestmark = pytest.mark.anyio

NATIVE = Path(os.environ.get("TALLY_NATIVE_DIR", ""))
VARIANTS = Path(os.environ.get("TALLY_VARIANTS", ""))
TIMEOUT = 120
BOUND = 30.0

FIELDS = """\
fields:
- {name: id, role: id}
- {name: grp, role: dim, desc: group}
- {name: amount, role: measure, data_type: integer}
- {name: ratio, role: measure, data_type: number}
"""

HOSTILE_FIELDS = """\
fields:
- {name: name, role: dim}
- {name: n, role: measure, data_type: integer}
"""


def lib(stem: str) -> Path:
    path = NATIVE / f"lib{stem}.so"
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {path} was not built")
        pytest.skip(f"{path} is not built (the cargo test wrapper builds it and sets TALLY_NATIVE_DIR)")
    return path


def place_library(library: Path, target: Path):
    """A dataset's copy of a built library: a hard link where the file system allows one (a
    library is hundreds of megabytes unoptimised, and the server reads it into a private copy
    anyway), else a copy."""
    try:
        os.link(library, target)
    except OSError:
        shutil.copyfile(library, target)


def need_comparison():
    if not (VARIANTS / "compare.sqlite").is_file():
        pytest.skip("TALLY_VARIANTS has no compare.sqlite (the cargo test wrapper writes it)")


def body(result) -> dict:
    return json.loads(result.content[0].text)


def ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    return body(result)


def write_atomic(path: Path, data: bytes):
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)


def sqlite_dataset(root: Path, name: str = "sq"):
    folder = root / name
    folder.mkdir()
    shutil.copyfile(VARIANTS / "compare.sqlite", folder / "data.sqlite")
    place_library(lib("tally_plugin_sqlite"), folder / "plugin.so")
    (folder / "dataset.yaml").write_text(
        "title: compare (sqlite)\nbackend: {kind: native, library: plugin.so, config: {database: data.sqlite, table: t}}\n" + FIELDS,
        encoding="utf-8",
    )


def parquet_dataset(root: Path):
    folder = root / "pq"
    folder.mkdir()
    shutil.copyfile(VARIANTS / "compare.parquet", folder / "data.parquet")
    (folder / "dataset.yaml").write_text("title: compare (parquet)\n" + FIELDS, encoding="utf-8")


def hostile_dataset(root: Path, name: str, library: Path, mode: str = "ok"):
    folder = root / name
    folder.mkdir()
    place_library(library, folder / "plugin.so")
    (folder / "dataset.yaml").write_text(
        f"title: hostile {mode}\nbackend: {{kind: native, library: plugin.so, config: {{mode: {mode}}}}}\n" + HOSTILE_FIELDS,
        encoding="utf-8",
    )


def connect(server):
    return Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT)


async def test_sqlite_answers_like_parquet_and_runs_the_conditions(tmp_path):
    need_comparison()
    sqlite_dataset(tmp_path)
    parquet_dataset(tmp_path)
    server = HttpServer("--allow-native", datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            async with connect(server) as c:
                summary = {"group_by": ["grp"], "metrics": ["count", "sum:amount", "avg:ratio", "min:amount", "max:ratio"]}
                a = ok(await c.call_tool("summarize_records", {"dataset_id": "pq", **summary}))
                b = ok(await c.call_tool("summarize_records", {"dataset_id": "sq", **summary}))
                assert a["data"]["rows"] == b["data"]["rows"] and len(a["data"]["rows"]) == 4
                print("per group (both):", a["data"]["rows"])

                query = {"where": {"grp": ["g1"], "amount": {"$gte": 100}}, "select": ["id", "amount", "ratio"], "order_by": ["-amount"], "limit": 10}
                a = ok(await c.call_tool("query_records", {"dataset_id": "pq", **query}))
                started = time.monotonic()
                b = ok(await c.call_tool("query_records", {"dataset_id": "sq", **query}))
                print(f"sqlite query: {time.monotonic() - started:.2f} s")
                assert a["data"]["rows"] == b["data"]["rows"] and a["data"]["total"] == b["data"]["total"] > 0
                extract = b["provenance"]["transformations"][0]["description"]
                print(extract)
                # The plugin itself returned only the rows of g1: SQLite ran the condition.
                assert """WHERE "grp" = 'g1'""" in extract
                g1 = ok(await c.call_tool("summarize_records", {"dataset_id": "pq", "where": {"grp": ["g1"]}}))["data"]["rows"][0][0]
                assert f"({g1} rows)" in extract and f"; {g1} rows" in extract
                assert b["provenance"]["sources"][0]["contentHash"].startswith("sha256:")
                inspected = ok(await c.call_tool("inspect_dataset", {"dataset_id": "sq"}))
                assert inspected["data"]["backend"]["kind"] == "native"
                assert inspected["data"]["backend"]["plugin"] == "sqlite"
    finally:
        server.stop()


async def test_native_plugins_need_the_opt_in(tmp_path):
    need_comparison()
    sqlite_dataset(tmp_path)
    server = HttpServer(datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            async with connect(server) as c:
                listed = ok(await c.call_tool("list_datasets", {}))["data"]
                assert listed["datasets"] == []
                [broken] = listed["broken_datasets"]
                text = json.dumps(broken, ensure_ascii=False)
                assert "native plugins are not allowed" in text and "--allow-native" in text
                r = await c.call_tool("query_records", {"dataset_id": "sq"})
                assert r.is_error
    finally:
        server.stop()


async def test_a_replaced_library_serves_its_data(tmp_path):
    need_comparison()
    sqlite_dataset(tmp_path, "swap")
    server = HttpServer("--allow-native", datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            async with connect(server) as c:
                env = ok(await c.call_tool("query_records", {"dataset_id": "swap", "limit": 1}))
                assert env["data"]["total"] == 300
                folder = tmp_path / "swap"
                write_atomic(folder / "plugin.so", lib("tally_test_native_hostile").read_bytes())
                write_atomic(
                    folder / "dataset.yaml",
                    ("title: swapped\nbackend: {kind: native, library: plugin.so, config: {mode: ok}}\n" + HOSTILE_FIELDS).encode(),
                )
                started = time.monotonic()
                while True:
                    r = await c.call_tool("query_records", {"dataset_id": "swap", "select": ["name", "n"]})
                    if not r.is_error and body(r)["data"]["rows"] == [["alpha", 1], ["beta", 2], ["gamma", 3]]:
                        break
                    assert time.monotonic() - started < BOUND, "the new library is not served"
                    await anyio.sleep(0.1)
                print(f"replaced library served: {time.monotonic() - started:.2f} s")
                assert "native plugin `hostile`" in body(r)["provenance"]["transformations"][0]["description"]
    finally:
        server.stop()


async def test_panics_and_misfits_fail_alone(tmp_path):
    hostile = lib("tally_test_native_hostile")
    for mode in ["ok", "construct", "scan", "stream"]:
        hostile_dataset(tmp_path, mode, hostile, mode)
    hostile_dataset(tmp_path, "future", lib("tally_test_native_wrong_version"))
    hostile_dataset(tmp_path, "no-entry", lib("tally_test_native_no_entry"))
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "plugin.so").write_bytes(b"\x7fELF but not really a library")
    (junk / "dataset.yaml").write_text("title: junk\nbackend: {kind: native, library: plugin.so}\n" + HOSTILE_FIELDS, encoding="utf-8")
    server = HttpServer("--allow-native", datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            async with connect(server) as c:
                listed = ok(await c.call_tool("list_datasets", {}))["data"]
                # A library whose data cannot be read whole is refused when it registers (its
                # probe read), as a wasm plugin is: it never enters service.
                assert {d["dataset_id"] for d in listed["datasets"]} == {"ok"}
                broken = {b["folder"]: " ".join(p["reason"] for p in b["problems"]) for b in listed["broken_datasets"]}
                print(json.dumps(broken, ensure_ascii=False, indent=1))
                assert "panicked while it was being built: hostile native plugin: panic while being built" in broken["construct"]
                assert "built for native plugin ABI 9.0 and DataFusion 54, but this Tally runs native plugin ABI 1.0 and DataFusion 55" in broken["future"]
                assert "has no entry point `tally_native_plugin_v0`" in broken["no-entry"]
                assert "is not a loadable shared library" in broken["junk"]
                for name, needle in {
                    "scan": "panicked during scan: hostile native plugin: panic in scan",
                    "stream": "panicked during a stream poll: hostile native plugin: panic in the middle of a stream",
                }.items():
                    assert "the probe read of its data at registration failed" in broken[name], broken[name]
                    assert needle in broken[name], broken[name]
                    # What the library wrote to stderr during the read follows, with where its
                    # panic happened: its own lines only (native datasets register one at a
                    # time), never another dataset's and never the server's log.
                    assert "it wrote to stderr: " in broken[name], broken[name]
                    for other in {"ok", "construct", "scan", "stream"} - {name}:
                        assert f"mode {other}\n" not in broken[name] + "\n", broken[name]
                    assert f"hostile native plugin: scanning in mode {name}" in broken[name], broken[name]
                    assert "panicked at tests/plugins/native-hostile/src/lib.rs:" in broken[name], broken[name]
                    assert " WARN " not in broken[name] and "tally_" not in broken[name], broken[name]
                    r = await c.call_tool("summarize_records", {"dataset_id": name})
                    print(f"{name}: {r.content[0].text[:300]}")
                    assert r.is_error and needle in r.content[0].text
                    env = ok(await c.call_tool("summarize_records", {"dataset_id": "ok", "metrics": ["count", "sum:n"]}))
                    assert env["data"]["rows"][0][:2] == [3, 6]
        # The operator still sees what the libraries wrote: forwarded to the server's stderr.
        log = "".join(server.log)
        assert "hostile native plugin: scanning in mode scan" in log
        assert "panicked at tests/plugins/native-hostile/src/lib.rs:" in log
    finally:
        server.stop()


async def test_what_a_native_plugin_writes_to_stdout_never_reaches_the_protocol(tmp_path):
    """Over stdio, stdout is the protocol: a library that prints there (a forged JSON-RPC
    answer among its lines) is captured with its stderr and forwarded to the server's stderr,
    and the client sees answers only."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from conftest import tally_bin

    hostile_dataset(tmp_path, "chatty", lib("tally_test_native_hostile"), "chatty")
    params = StdioServerParameters(
        command=tally_bin(),
        args=["serve", "--allow-native", "--datasets", str(tmp_path)],
        env={"TALLY_LOG": "warn", "PATH": os.environ.get("PATH", ""), **{k: os.environ[k] for k in ("HOME", "XDG_CACHE_HOME") if k in os.environ}},
    )
    errlog = (tmp_path / "stderr.txt").open("w+", encoding="utf-8")
    with anyio.fail_after(TIMEOUT):
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for _ in range(3):
                    env = ok(await session.call_tool("summarize_records", {"dataset_id": "chatty", "metrics": ["count", "sum:n"]}))
                    assert env["data"]["rows"][0][:2] == [3, 6]
                    listed = ok(await session.call_tool("list_datasets", {}))["data"]
                    assert [d["dataset_id"] for d in listed["datasets"]] == ["chatty"]
    errlog.seek(0)
    said = errlog.read()
    errlog.close()
    assert "hostile native plugin: a line on stdout while being built" in said, said[-2000:]
    assert "hostile native plugin: a line on stdout while scanning" in said, said[-2000:]
    assert '"forged":true' in said, said[-2000:]


async def test_a_probe_read_that_never_ends_stops_at_the_plugin_deadline(tmp_path):
    """A library whose stream never yields would hold its registration (and start-up) for
    ever: its probe read stops at the plugin deadline, the dataset is served unproven (a call
    on it has its own deadline), and the log says so. The time to the first answer is
    printed, never asserted."""
    hostile = lib("tally_test_native_hostile")
    hostile_dataset(tmp_path, "ok", hostile, "ok")
    hostile_dataset(tmp_path, "pending", hostile, "pending")
    started = time.monotonic()
    server = HttpServer("--allow-native", "--plugin-deadline-ms", "1500", datasets=str(tmp_path))
    try:
        with anyio.fail_after(TIMEOUT):
            async with connect(server) as c:
                listed = ok(await c.call_tool("list_datasets", {}))["data"]
                print(f"listed {time.monotonic() - started:.2f} s after start")
                assert {d["dataset_id"] for d in listed["datasets"]} == {"ok", "pending"}
                assert listed["broken_datasets"] == []
                env = ok(await c.call_tool("summarize_records", {"dataset_id": "ok", "metrics": ["count"]}))
                assert env["data"]["rows"][0][0] == 3
        said = [line for line in server.log if "did not finish within 1.5 s" in line]
        assert len(said) == 1 and "dataset=pending" in said[0], list(server.log)[-20:]
    finally:
        server.stop()

