"""Drop-in datasets against a running `tally serve`: real file operations in a temporary
datasets directory. Changes are polled for with generous bounds and the times are printed;
nothing asserts on time."""

import json
import os
import shutil
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import HttpServer, stdio_params, wait_for

pytestmark = pytest.mark.anyio

VARIANTS = Path(os.environ.get("TALLY_VARIANTS", ""))
BOUND = 30.0


def need_variants():
    if not (VARIANTS / "v1.parquet").is_file():
        pytest.skip("TALLY_VARIANTS is not set (the cargo test wrapper makes the variant Parquet files)")


def definition(k: int, grp_desc: str = "グループ") -> str:
    return (
        f'title: "churn v{k}"\n'
        f'notes: ["version {k}"]\n'
        "fields:\n"
        "- {name: id, role: id}\n"
        f'- {{name: grp, role: dim, desc: "{grp_desc}"}}\n'
        "- {name: k, role: dim, data_type: integer}\n"
    )


def write_dataset(folder: Path, k: int, grp_desc: str = "グループ", gap: float = 0.0):
    """Writes a version: each file to a temporary name, then renamed into place, the data
    first and the definition `gap` seconds after (a writer that is not instantaneous)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(VARIANTS / f"v{k}.parquet", folder / ".data.parquet.tmp")
    os.replace(folder / ".data.parquet.tmp", folder / "data.parquet")
    if gap:
        time.sleep(gap)
    (folder / ".dataset.yaml.tmp").write_text(definition(k, grp_desc), encoding="utf-8")
    os.replace(folder / ".dataset.yaml.tmp", folder / "dataset.yaml")


def body(result) -> dict:
    return json.loads(result.content[0].text)


async def listed(c) -> dict:
    return body(await c.call_tool("list_datasets", {}))["data"]


async def count_of(c, dataset: str):
    r = await c.call_tool("summarize_records", {"dataset_id": dataset, "group_by": ["k"]})
    return r.is_error, body(r)


@pytest.mark.parametrize("watch", [[], ["--watch", "poll", "--poll-interval-ms", "300"]], ids=["events", "poll"])
async def test_add_change_break_and_remove(tmp_path, watch):
    need_variants()
    write_dataset(tmp_path / "a", 3)
    server = HttpServer_for(tmp_path, *watch)
    try:
        with anyio.fail_after(BOUND * 6):
            async with Client(server.url, mode="legacy", cache=None) as c:
                assert [d["dataset_id"] for d in (await listed(c))["datasets"]] == ["a"]

                write_dataset(tmp_path / "b", 5)

                async def b_listed():
                    return "b" in [d["dataset_id"] for d in (await listed(c))["datasets"]]

                await wait_for("added dataset listed", b_listed)
                err, env = await count_of(c, "b")
                assert not err and env["data"]["rows"] == [[5, 5]]

                write_dataset(tmp_path / "b", 5, grp_desc="グループ（改訂）")

                async def new_description():
                    env = body(await c.call_tool("inspect_dataset", {"dataset_id": "b"}))
                    return [f["description"] for f in env["data"]["fields"] if f["name"] == "grp"] == ["グループ（改訂）"]

                await wait_for("changed description visible", new_description)

                good_version = [d["version"] for d in (await listed(c))["datasets"] if d["dataset_id"] == "b"][0]
                (tmp_path / "b" / "dataset.yaml").write_text("title: [broken\nfields: {", encoding="utf-8")

                async def b_broken():
                    data = await listed(c)
                    return [x for x in data["broken_datasets"] if x["folder"] == "b"]

                broken = await wait_for("invalid YAML listed as broken", b_broken)
                assert broken[0]["serving_version"] == good_version
                assert broken[0]["problems"][0]["line"] >= 1
                err, env = await count_of(c, "b")
                assert not err and env["data"]["rows"] == [[5, 5]], "the last good version keeps serving"
                assert env["data"]["dataset_version"] == good_version

                shutil.rmtree(tmp_path / "b")

                async def b_gone():
                    data = await listed(c)
                    return "b" not in [d["dataset_id"] for d in data["datasets"]] and not [
                        x for x in data["broken_datasets"] if x["folder"] == "b"
                    ]

                await wait_for("removed dataset gone", b_gone)
                r = await c.call_tool("query_records", {"dataset_id": "b"})
                assert r.is_error and body(r)["error"]["code"] == "unknown_dataset"
    finally:
        server.stop()


async def test_slow_chunked_write_is_never_served_half_written(tmp_path):
    need_variants()
    server = HttpServer_for(tmp_path)
    try:
        with anyio.fail_after(BOUND * 3):
            async with Client(server.url, mode="legacy", cache=None) as c:
                folder = tmp_path / "slow"
                folder.mkdir()
                (folder / "dataset.yaml").write_text(definition(40), encoding="utf-8")
                data = (VARIANTS / "v40.parquet").read_bytes()
                chunk = max(1, len(data) // 8)
                observations = 0
                with open(folder / "data.parquet", "wb") as f:
                    for start in range(0, len(data), chunk):
                        f.write(data[start : start + chunk])
                        f.flush()
                        await anyio.sleep(0.15)
                        state = await listed(c)
                        assert "slow" not in [x["folder"] for x in state["broken_datasets"]], "reported broken while still being written"
                        if "slow" in [d["dataset_id"] for d in state["datasets"]]:
                            err, env = await count_of(c, "slow")
                            assert not err and env["data"]["rows"] == [[40, 40]], env
                        observations += 1

                async def served():
                    return "slow" in [d["dataset_id"] for d in (await listed(c))["datasets"]]

                await wait_for("chunked dataset served once complete", served)
                err, env = await count_of(c, "slow")
                assert not err and env["data"]["rows"] == [[40, 40]]
                print(f"observed {observations} times while writing")
    finally:
        server.stop()


async def test_a_cursor_from_an_older_version_is_refused(tmp_path):
    need_variants()
    write_dataset(tmp_path / "d", 20)
    server = HttpServer_for(tmp_path)
    try:
        with anyio.fail_after(BOUND * 2):
            async with Client(server.url, mode="2026-07-28", cache=None) as c:
                first = body(await c.call_tool("query_records", {"dataset_id": "d", "limit": 5}))["data"]
                write_dataset(tmp_path / "d", 30)

                async def changed():
                    r = body(await c.call_tool("query_records", {"dataset_id": "d", "limit": 1}))["data"]
                    return r["dataset_version"] != first["dataset_version"]

                await wait_for("new version served", changed)
                r = await c.call_tool("query_records", {"dataset_id": "d", "limit": 5, "cursor": first["next_cursor"]})
                assert r.is_error
                err = body(r)["error"]
                assert err["code"] == "invalid_cursor" and "stale" in err["message"]
    finally:
        server.stop()


async def test_resources_and_list_changed_for_a_legacy_client(tmp_path):
    need_variants()
    write_dataset(tmp_path / "a", 2)
    seen = []

    async def on_message(message):
        method = getattr(getattr(message, "root", message), "method", None) or getattr(message, "method", None)
        if method == "notifications/resources/list_changed" or type(message).__name__ == "ResourceListChangedNotification":
            seen.append(time.monotonic())

    params = stdio_params()
    params.args = ["serve", "--datasets", str(tmp_path)]
    with anyio.fail_after(BOUND * 2):
        async with Client(params, mode="legacy", cache=None, message_handler=on_message) as c:
            resources = (await c.list_resources()).resources
            assert [str(r.uri) for r in resources] == ["tally://datasets/a"]
            text = (await c.read_resource("tally://datasets/a")).contents[0].text
            assert json.loads(text)["record_count"] == 2

            write_dataset(tmp_path / "b", 3)
            started = time.monotonic()
            while not seen:
                if time.monotonic() - started > BOUND:
                    pytest.fail("no notifications/resources/list_changed after an add")
                await anyio.sleep(0.1)
            print(f"list_changed received: {seen[0] - started:.2f} s")
            uris = sorted(str(r.uri) for r in (await c.list_resources()).resources)
            assert uris == ["tally://datasets/a", "tally://datasets/b"]


async def test_churn(tmp_path):
    """One task adds, rewrites, renames and removes datasets while others query over HTTP."""
    need_variants()
    server = HttpServer_for(tmp_path)
    figures = {"ok": 0, "not_found": 0, "server_errors": 0, "invalid": 0, "mixed": 0, "operations": 0}
    problems = []
    done = anyio.Event()

    async def writer():
        # Each state is held a little longer than the catalog waits for a folder to be quiet
        # (0.5 s), so it is served; a rewrite renames the data, then 0.3 s later the
        # definition: no answer may pair the new data with the old definition (issue 56).
        k = 1
        try:
            for round_ in range(9):
                live = tmp_path / "churn"
                write_dataset(live, k)  # add
                figures["operations"] += 1
                await anyio.sleep(0.8)
                k = k % 80 + 1
                await anyio.to_thread.run_sync(lambda: write_dataset(live, k, gap=0.3))  # rewrite
                figures["operations"] += 1
                await anyio.sleep(0.8)
                renamed = tmp_path / "churn_r"
                os.rename(live, renamed)  # rename
                figures["operations"] += 1
                await anyio.sleep(0.8)
                shutil.rmtree(renamed)  # remove
                figures["operations"] += 1
                await anyio.sleep(0.2)
                k = k % 80 + 1
        finally:
            done.set()

    async def reader(n: int):
        async with Client(server.url, mode="legacy" if n % 2 else "2026-07-28", cache=None) as c:
            while not done.is_set():
                for dataset in ("churn", "churn_r"):
                    try:
                        r = await c.call_tool("summarize_records", {"dataset_id": dataset, "group_by": ["k"]})
                    except RuntimeError as e:  # the SDK's own outputSchema validation
                        figures["invalid"] += 1
                        problems.append(str(e))
                        continue
                    env = body(r)
                    if r.is_error:
                        if env["error"]["code"] == "unknown_dataset":
                            figures["not_found"] += 1
                        else:
                            figures["server_errors"] += 1
                            problems.append(env["error"]["message"])
                        continue
                    rows = env["data"]["rows"]
                    notes = env["data"].get("dataset_notes", [])
                    k = int(rows[0][0]) if len(rows) == 1 else -1
                    if len(rows) != 1 or rows[0][1] != k or notes != [f"version {k}"]:
                        figures["mixed"] += 1
                        problems.append(f"rows {rows} with notes {notes}")
                    else:
                        figures["ok"] += 1

    try:
        started = time.monotonic()
        with anyio.fail_after(BOUND * 6):
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer)
                for n in range(3):
                    tg.start_soon(reader, n)
        print(f"churn: {figures} in {time.monotonic() - started:.1f} s")
        for p in problems[:10]:
            print("  ", p)
        assert figures["operations"] >= 36
        assert figures["ok"] > 0
        assert figures["server_errors"] == 0 and figures["invalid"] == 0 and figures["mixed"] == 0, figures
    finally:
        server.stop()


def HttpServer_for(datasets: Path, *extra: str) -> HttpServer:
    # The readers poll as fast as they can from one address: lift the per-caller rate limit.
    return HttpServer("--rate-limit", "100000", "--rate-burst", "100000", *extra, datasets=str(datasets))
