"""Python plugins as a third party writes them: `tally plugin new --lang python` writes a
project, its unit tests run with plain Python, `tally plugin build` compiles it with
componentize-py (installed by `.ci/run`, pinned in requirements.txt), `tally plugin test` runs
it through the sandbox, and `tally serve` serves it beside the built-in datasets to the
official Python MCP client: rows and summaries with a pushed filter, each record citing its
file and line, totals checked against a plain-Python recount of the same files. Then builds
swapped under a running server: a new build during calls (no call fails), and a build that
fails after its first row (never served: the last good build keeps answering, and the broken
one is listed with what it wrote to stderr)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import ROOT, HttpServer, tally_bin, wait_for
from test_plugins import write_atomic

pytestmark = pytest.mark.anyio

TIMEOUT = 180

FILES = {
    "a.txt": 420,
    "b.txt": 260,
    "c.txt": 150,
}


def tally(*args: str, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    # componentize-py comes from the test environment (the venv this suite runs in).
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([tally_bin(), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def body(result) -> dict:
    return json.loads(result.content[0].text)


def ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    return body(result)


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def write_texts(folder: Path):
    """Text files with blank lines between some rows, and text that is not ASCII."""
    for name, n in FILES.items():
        lines = []
        for i in range(n):
            lines.append(f"{name} 行 {i} — item {i % 7}")
            if i % 5 == 0:
                lines.append("   ")
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "ignored.md").write_text("not a .txt file\n", encoding="utf-8")


def recount(folder: Path) -> Counter:
    """The rows of each file as plain Python counts them: its non-empty lines."""
    counts = Counter()
    for p in sorted(folder.glob("*.txt")):
        counts[p.name] = sum(1 for line in p.read_text(encoding="utf-8").splitlines() if line.strip())
    return counts


def new_project(tmp_path: Path, name: str = "py-lines") -> Path:
    project = tmp_path / name
    made = tally("plugin", "new", "--lang", "python", name, "--path", str(project))
    assert made.returncode == 0, made.stderr
    assert "componentize-py==" in made.stdout
    return project


def build(project: Path) -> Path:
    built = tally("plugin", "build", str(project))
    print(built.stdout, built.stderr[-2000:])
    assert built.returncode == 0, built.stderr
    assert "componentize-py" in built.stdout and "plugin API 0.1.0" in built.stdout
    [wasm] = (project / "build").glob("*.wasm")
    return wasm


def serve_beside_builtins(tmp_path: Path, wasm: Path) -> Path:
    datasets = tmp_path / "datasets"
    for builtin in ("guide", "procedures"):
        shutil.copytree(ROOT / "datasets" / builtin, datasets / builtin)
    folder = datasets / "texts"
    folder.mkdir()
    write_texts(folder)
    shutil.copyfile(wasm, folder / "py_lines.wasm")
    (folder / "dataset.yaml").write_text(
        """\
title: Text lines (a Python plugin)
source: {url: "https://example.org/texts"}
backend:
  kind: wasm
  component: py_lines.wasm
  config: {publisher: "Example Org"}
fields:
- {name: path, role: dim, desc: The file}
- {name: line, role: attr, data_type: integer, desc: "The line number, from 1"}
- {name: text, role: attr, desc: The line}
""",
        encoding="utf-8",
    )
    # The same component over lines of `;`-separated tags: a multi-value field.
    tags = datasets / "tags"
    tags.mkdir()
    for name, lines in TAGS.items():
        (tags / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    shutil.copyfile(wasm, tags / "py_lines.wasm")
    (tags / "dataset.yaml").write_text(
        """\
title: Tagged lines (a Python plugin)
source: {url: "https://example.org/tags"}
backend: {kind: wasm, component: py_lines.wasm}
fields:
- {name: path, role: dim}
- {name: line, role: attr, data_type: integer}
- {name: text, role: dim, multi_value: true}
""",
        encoding="utf-8",
    )
    return datasets


TAGS = {
    "red.txt": ["red; green", "red"],
    "blue.txt": ["blue", "blue; green"],
    "mixed.txt": ["green; blue", "red; blue"],
}


async def test_a_python_plugin_is_made_built_tested_and_served(tmp_path):
    project = new_project(tmp_path)
    # Everything it needs is in the project: its guide too (no pointer into a checkout).
    for f in ("app.py", "tally_plugin.py", "wit/source.wit", "test_app.py", "pyproject.toml", "README.md", "example/dataset.yaml"):
        assert (project / f).is_file(), f
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert "docs/plugins.md" not in readme and "## The sandbox" in readme and "## Errors" in readme
    # Its own unit tests, with plain Python (no component, no sandbox).
    unit = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=project, capture_output=True, text=True, timeout=120)
    assert unit.returncode == 0, unit.stderr
    assert "Ran 2 tests" in unit.stderr and "OK" in unit.stderr

    wasm = build(project)
    print(f"component: {wasm.stat().st_size / 1e6:.1f} MB")
    tested = tally("plugin", "test", str(wasm), "--dataset", str(project / "example"))
    print(tested.stdout)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "ok: plugin `py-lines` 0.1.0 passed every check" in tested.stdout
    assert "row 3: hello.txt | 4 | This one cites line 4." in tested.stdout

    datasets = serve_beside_builtins(tmp_path, wasm)
    folder = datasets / "texts"
    expected = recount(folder)
    server = HttpServer(datasets=str(datasets))
    try:
        with anyio.fail_after(TIMEOUT):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                listed = ok(await c.call_tool("list_datasets", {}))["data"]
                assert {d["dataset_id"] for d in listed["datasets"]} == {"guide", "procedures", "texts", "tags"}
                assert listed["broken_datasets"] == []

                # Rows of one file: the filter pushed down to the plugin, every row citing its
                # file (with the file's hash) and line.
                env = ok(await c.call_tool("query_records", {
                    "dataset_id": "texts", "where": {"path": ["b.txt"]},
                    "select": ["path", "line", "text"], "order_by": ["line"], "limit": 5,
                }))
                assert env["data"]["total"] == expected["b.txt"]
                assert [r[:2] for r in env["data"]["rows"]] == [["b.txt", 1], ["b.txt", 3], ["b.txt", 4], ["b.txt", 5], ["b.txt", 6]]
                sources = {s["id"]: s for s in env["provenance"]["sources"]}
                for row, refs in zip(env["data"]["rows"], env["data"]["rowSourceRefs"]):
                    [ref] = refs
                    s = sources[ref]
                    assert s["locator"] == f"b.txt:{row[1]}" and s["publisher"] == "Example Org", s
                    assert s["contentHash"] == sha256(folder / "b.txt"), s
                    assert s["sourceType"] == "document"
                steps = json.dumps(env["provenance"]["transformations"], ensure_ascii=False)
                assert "plugin `py-lines` 0.1.0" in steps, steps
                assert f'applied `path` = \\"b.txt\\" itself, returning {expected["b.txt"]} rows' in steps, steps

                # A summary over two files, against the recount.
                env = ok(await c.call_tool("summarize_records", {
                    "dataset_id": "texts", "where": {"path": ["a.txt", "c.txt"]},
                    "group_by": ["path"], "metrics": ["count"],
                }))
                rows = {r[0]: r[1] for r in env["data"]["rows"]}
                assert rows == {"a.txt": expected["a.txt"], "c.txt": expected["c.txt"]}, rows
                cited = {s.get("locator") or s["id"] for s in env["provenance"]["sources"]}
                assert not any("b.txt" in c for c in cited), cited

                # All of it, and a built-in dataset beside it.
                env = ok(await c.call_tool("summarize_records", {"dataset_id": "texts", "group_by": ["path"], "metrics": ["count"]}))
                assert {r[0]: r[1] for r in env["data"]["rows"]} == dict(expected)
                env = ok(await c.call_tool("summarize_records", {"dataset_id": "guide", "metrics": ["count"]}))
                assert env["data"]["rows"][0][0] > 0

                # An exploded summary filtered on the parts cites only the documents of the
                # records it counted (blue.txt has no `red` line).
                env = ok(await c.call_tool("summarize_records", {
                    "dataset_id": "tags", "explode": ["text"], "group_by": ["text"],
                    "where": {"text": ["red"]}, "metrics": ["count"],
                }))
                assert env["data"]["rows"] == [["red", 3]], env["data"]["rows"]
                cited = sorted(d["uri"].rsplit("/", 1)[-1] for d in env["provenance"]["sources"][1:])
                assert cited == ["mixed.txt", "red.txt"], env["provenance"]["sources"]
    finally:
        server.stop()


def test_a_build_that_cannot_run_says_what_would_work(tmp_path):
    """Without componentize-py, and with an app that does not compile: each build fails with
    what went wrong and what would work, and writes no component."""
    project = new_project(tmp_path)
    missing = subprocess.run(
        [tally_bin(), "plugin", "build", str(project)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "TALLY_COMPONENTIZE_PY": str(tmp_path / "no-such-componentize-py")},
    )
    print(missing.stderr)
    assert missing.returncode == 5, missing.stderr
    assert "componentize-py could not be run" in missing.stderr and "pip install componentize-py==0.25.1" in missing.stderr
    (project / "app.py").write_text("def broken(:\n", encoding="utf-8")
    failed = tally("plugin", "build", str(project))
    print(failed.stderr[-1500:])
    assert failed.returncode == 1, failed.stderr
    assert "the plugin did not build (componentize-py's messages are above)" in failed.stderr
    assert "SyntaxError" in failed.stderr
    assert not list((project / "build").glob("*.wasm"))
    both = tally("plugin", "new", "--lang", "python", "other", "--path", str(tmp_path / "other"), "--api", str(ROOT / "plugin-api"))
    assert both.returncode == 1 and "leave --api out with --lang python" in both.stderr, both.stderr
    assert not (tmp_path / "other").exists()
    not_a_project = tally("plugin", "build", str(tmp_path))
    assert not_a_project.returncode == 5 and "has no Cargo.toml" in not_a_project.stderr, not_a_project.stderr


def variant(project: Path, version: str, fail_after_first_row: bool = False) -> Path:
    """A build of the project with another version, or one that fails after its first row."""
    app = project / "app.py"
    text = (project / "app.good").read_text(encoding="utf-8").replace('VERSION = "0.1.0"', f'VERSION = "{version}"')
    if fail_after_first_row:
        text = text.replace("import os\n", "import os\nimport sys\n").replace(
            "                if rows.is_full():\n",
            "                if len(rows) >= 1:\n"
            "                    print(f\"py-lines {VERSION}: the index of {name} is damaged after row 1\", file=sys.stderr)\n"
            "                    raise ValueError(f\"cannot read {name} past row {len(rows)}\")\n"
            "                if rows.is_full():\n",
        )
        assert "raise ValueError" in text
    app.write_text(text, encoding="utf-8")
    wasm = build(project)
    out = project / f"py-{version}.wasm"
    shutil.copyfile(wasm, out)
    return out


async def test_python_builds_swapped_under_calls(tmp_path):
    project = new_project(tmp_path)
    shutil.copyfile(project / "app.py", project / "app.good")
    first = variant(project, "0.1.0")
    second = variant(project, "0.2.0")
    broken = variant(project, "0.3.0", fail_after_first_row=True)
    datasets = serve_beside_builtins(tmp_path, first)
    folder = datasets / "texts"
    expected = recount(folder)
    server = HttpServer(datasets=str(datasets))
    failed: list[str] = []
    answered: Counter = Counter()
    try:
        with anyio.fail_after(TIMEOUT * 2):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:

                async def version_served() -> str:
                    listed = ok(await c.call_tool("list_datasets", {}))["data"]
                    [texts] = [d for d in listed["datasets"] if d["dataset_id"] == "texts"]
                    return texts["version"]

                async def steps_of_a_call() -> str:
                    r = await c.call_tool("summarize_records", {"dataset_id": "texts", "group_by": ["path"], "metrics": ["count"]})
                    if r.is_error:
                        failed.append(r.content[0].text)
                        return ""
                    env = body(r)
                    if {row[0]: row[1] for row in env["data"]["rows"]} != dict(expected):
                        failed.append(f"wrong counts: {env['data']['rows']}")
                    steps = json.dumps(env["provenance"]["transformations"], ensure_ascii=False)
                    for v in ("0.1.0", "0.2.0", "0.3.0"):
                        if f"py-lines` {v}" in steps:
                            answered[v] += 1
                    return steps

                assert "py-lines` 0.1.0" in await steps_of_a_call()
                first_version = await version_served()
                done = anyio.Event()

                async def calls():
                    # Paced: the server's per-client request rate is a quota too.
                    while not done.is_set():
                        await steps_of_a_call()
                        await anyio.sleep(0.1)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(calls)
                    # A new build, copied over the one serving, during calls.
                    write_atomic(folder / "py_lines.wasm", second.read_bytes())

                    async def second_served():
                        return "py-lines` 0.2.0" in await steps_of_a_call()

                    await wait_for("the new build answering", second_served, bound=120)
                    good_version = await version_served()
                    assert good_version != first_version

                    # A build that fails after its first row: read whole before it serves, it
                    # is refused; the last good build keeps answering.
                    write_atomic(folder / "py_lines.wasm", broken.read_bytes())

                    async def refused():
                        listed = ok(await c.call_tool("list_datasets", {}))["data"]
                        return [b for b in listed["broken_datasets"] if b["folder"] == "texts"]

                    [b] = await wait_for("the broken build listed", refused, bound=120)
                    reason = b["problems"][0]["reason"]
                    print(reason)
                    assert b["serving_version"] == good_version, b
                    assert "the probe read of its data at registration failed" in reason
                    assert "raised an exception while trying to scan" in reason
                    assert "ValueError: cannot read a.txt past row 1" in reason and '"app.py", line' in reason
                    # The end of its stderr: its own line, and the traceback.
                    assert "py-lines 0.3.0: the index of a.txt is damaged after row 1" in reason
                    assert "Traceback (most recent call last)" in reason
                    for _ in range(5):
                        assert "py-lines` 0.2.0" in await steps_of_a_call()
                    done.set()
                assert await version_served() == good_version
                print(f"calls answered by build: {dict(answered)}; failed: {len(failed)}")
                assert failed == [], failed[:3]
                assert answered["0.3.0"] == 0
                # /health says the same: a broken folder (the last good build serving).
                import httpx2

                health = httpx2.get(server.base + "/health").json()
                assert health["broken_datasets"] == 1 and health["datasets"] == 4, health
        # One log line for the refused build, not one per call.
        refusals = [line for line in server.log if "texts/dataset.yaml" in line and "registration failed" in line]
        assert len(refusals) == 1, refusals
    finally:
        server.stop()
