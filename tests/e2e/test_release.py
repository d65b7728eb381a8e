"""The release archive a new user downloads instead of compiling (issue 61): what
`tools/release/package` packs (here the binary under test, so no release build is needed),
checked against its SHA-256, unpacked into an empty folder, and run from there as the
archive's QUICKSTART says: the default datasets listed and a summary answered with its
provenance, and an MCP client served over stdio from the unpacked binary."""

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from conftest import ROOT, tally_bin

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run(
        [str(ROOT / "tools" / "release" / "package"), "--binary", tally_bin(), "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stderr
    archive = Path(p.stdout.strip().splitlines()[-1])
    assert archive.is_file() and archive.name.startswith("tally-") and archive.name.endswith(".tar.gz"), archive
    digest, name = (archive.parent / (archive.name + ".sha256")).read_text().split()
    assert name == archive.name
    assert digest == hashlib.sha256(archive.read_bytes()).hexdigest()
    home = tmp_path_factory.mktemp("user")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        top = {n.split("/")[0] for n in names}
        assert top == {archive.name.removesuffix(".tar.gz")}, top
        tar.extractall(home, filter="data")
    root = home / top.pop()
    for needed in ("tally", "datasets/procedures/dataset.yaml", "datasets/guide/dataset.yaml", "README.md", "llms.txt", "QUICKSTART.txt", "docs"):
        assert (root / needed).exists(), needed
    assert os.access(root / "tally", os.X_OK)
    return root


def run(root: Path, *args: str) -> dict:
    # A user's machine: no cache of an earlier run, nothing of this checkout on the way.
    env = {**os.environ, "TALLY_NO_CACHE": "1"}
    p = subprocess.run(["./tally", *args], cwd=root, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_unpacked_archive_answers_from_its_own_folder(unpacked):
    listed = run(unpacked, "list")
    assert {d["dataset_id"] for d in listed["data"]["datasets"]} == {"guide", "procedures"}
    summary = run(unpacked, "summarize", "procedures", "--group-by", "所管府省庁", "--metrics", "count", "--limit", "3")
    assert summary["data"]["rows"] and summary["provenance"]["sources"][0]["id"] == "dataset:procedures"
    # The guide is read by the wasm plugin inside the binary.
    guide = run(unpacked, "query", "guide", "--limit", "1")
    assert guide["data"]["rows"], guide


async def test_the_unpacked_binary_serves_an_mcp_client(unpacked):
    params = StdioServerParameters(command=str(unpacked / "tally"), args=["serve"], cwd=str(unpacked), env={**os.environ, "TALLY_NO_CACHE": "1"})
    with anyio.fail_after(120):
        async with Client(params, mode="legacy", cache=None) as c:
            r = await c.call_tool("summarize_records", {"dataset_id": "procedures", "metrics": ["count"]})
            assert not r.is_error, r
            assert json.loads(r.content[0].text)["data"]["rows"][0][0] > 0


def test_the_packer_refuses_bad_arguments_with_what_would_work(tmp_path):
    package = str(ROOT / "tools" / "release" / "package")
    for args, says in [
        (["--binary"], "--binary needs the path of a built tally binary"),
        (["--bogus"], "unknown argument '--bogus'; see --help"),
        (["--binary", str(tmp_path / "missing"), "--out", str(tmp_path / "out")], "is not an executable; build it first"),
    ]:
        p = subprocess.run([package, *args], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and says in p.stderr, (args, p.stderr)
    # Nothing written for a refused call.
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
