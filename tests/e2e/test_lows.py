"""Findings of an attacker's probe ("one gate for what a caller may see and how much it may
cost"), driven through the real binary. Each test is named after what broke:

- `tally verify FILE` read an answer of any size (320 MB took 8 GB): it is refused past
  `--max-envelope-bytes` (16 MiB) before it is read, a file by its size and stdin by reading
  one byte past the cap; JSON nested past 128 levels is refused in words;
- `verify_answer` re-signed and ran a recorded cursor that `query_records` refuses: the
  recorded cursor now passes the same check, and is refused for the same reason;
- `tally check` passed a Parquet file whose pages do not decode (every query failed on it):
  every check now decodes every page, and names the file and the column;
- `inspect_dataset` on a decompression bomb ran into its deadline where `query_records`
  refused at once: both refuse with the same limit error.
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from conftest import tally_bin

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
CAP = 16 * MIB

YAML = """title: Small counts
publisher: Tally tests
retrieved_at: 2026-12-01
fields:
  - {name: id, role: id, data_type: string}
  - {name: grp, role: dim, data_type: string}
  - {name: n, role: measure, data_type: integer}
"""


def tally(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tally_bin(), *args], capture_output=True, input=stdin, timeout=120,
        env={**os.environ, "TALLY_NO_CACHE": "1"},
    )


@pytest.fixture
def datasets(tmp_path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "datasets"
    folder = root / "small"
    folder.mkdir(parents=True)
    (folder / "dataset.yaml").write_text(YAML, encoding="utf-8")
    rows = 30
    pq.write_table(pa.table({
        "id": [f"r{i:02}" for i in range(rows)],
        "grp": [f"g{i % 3}" for i in range(rows)],
        "n": list(range(rows)),
    }), folder / "data.parquet")
    return root


def refusal(p: subprocess.CompletedProcess) -> dict:
    text = p.stderr.decode("utf-8")
    return json.loads(text[text.index("{"):])["error"]


def test_verify_refuses_an_envelope_past_the_cap_before_reading_it(datasets, tmp_path):
    # A file one byte past the cap, sparse: refused by its size, never read.
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(CAP + 1)
    p = tally("verify", str(big), "--datasets", str(datasets))
    assert p.returncode == 3, p.stderr
    error = refusal(p)
    assert error["code"] == "limit_exceeded", error
    assert f"{CAP + 1} bytes" in error["message"] and str(CAP) in error["message"], error
    assert "16 MiB" in error["message"], error
    assert "--max-envelope-bytes" in error["hint"], error

    # stdin: read one byte past the cap at most, then refused.
    p = tally("verify", "-", "--datasets", str(datasets), stdin=b" " * (CAP + 4096))
    assert p.returncode == 3, p.stderr
    error = refusal(p)
    assert f"more than {CAP} bytes" in error["message"] and "--max-envelope-bytes" in error["hint"], error

    # A file whose size says nothing (a device) is bounded by what is read.
    p = tally("verify", "/dev/zero", "--datasets", str(datasets))
    assert p.returncode == 3, p.stderr
    assert "more than" in refusal(p)["message"]


def test_verify_peak_memory_on_a_320_mb_envelope(datasets, tmp_path):
    """Measured: the peak resident set of `tally verify` on a 320 MB envelope (it took 12 GB
    and a minute before the cap; GNU time reports it). Asserted only against a generous
    bound, never on time."""
    import shutil

    big = tmp_path / "big.json"
    with open(big, "w", encoding="utf-8") as f:
        f.write('{"data": {"rows": [')
        chunk = ",".join(["[1,2,3,4,5,6,7,8]"] * 10_000)
        while f.tell() < 320 * MIB:
            f.write(chunk + ",")
        f.write('[0]]}, "provenance": {}}')
    gnu_time = shutil.which("time") if Path("/usr/bin/time").is_file() else None
    command = [tally_bin(), "verify", str(big), "--datasets", str(datasets)]
    started = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-v", *command] if gnu_time else command, capture_output=True, timeout=120)
    took = time.monotonic() - started
    said = p.stderr.decode()
    assert p.returncode == 3 and "limit_exceeded" in said, said
    peak = next((int(line.split(":")[1]) * 1024 for line in said.splitlines() if "Maximum resident set size" in line), None)
    print(f"tally verify on {big.stat().st_size / MIB:.0f} MiB: refused after {took:.2f} s, peak RSS {peak / MIB if peak else float('nan'):.0f} MiB")
    if peak is not None:
        assert peak < 256 * MIB, peak


def test_verify_refuses_json_nested_too_deep_in_words(datasets, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"data": ' + "[" * 5000 + "]" * 5000 + ', "provenance": {}}', encoding="utf-8")
    p = tally("verify", str(deep), "--datasets", str(datasets))
    assert p.returncode == 1, p.stderr
    error = refusal(p)
    assert error["code"] == "invalid_argument" and "deeper than 128" in error["message"], error


def stdio(datasets: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=tally_bin(), args=["serve", "--datasets", str(datasets), "--no-cache"],
        env={"TALLY_LOG": "warn", "PATH": os.environ.get("PATH", "")},
    )


def edited(cursor: str, offset: int) -> str:
    """The cursor with its offset rewritten and its signature kept."""
    import base64

    body, tag = cursor.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["o"] = offset
    raw = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).rstrip(b"=").decode()
    return f"{raw}.{tag}"


def canonical(value) -> bytes:
    """Canonical JSON as Tally hashes it (keys sorted by UTF-16 code units, no whitespace)."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return b"{" + b",".join(json.dumps(k, ensure_ascii=False).encode() + b":" + canonical(v) for k, v in items) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(canonical(v) for v in value) + b"]"
    return json.dumps(value, ensure_ascii=False).encode()


def rehashed(answer: dict) -> dict:
    """The answer with its resultHash made again, as anyone can (it is a hash, not a signature)."""
    import hashlib

    text = b'{"data":' + canonical(answer["data"]) + b',"query":' + canonical(answer["provenance"]["query"]) + b"}"
    answer["provenance"]["resultHash"] = "sha256:" + hashlib.sha256(text).hexdigest()
    return answer


async def test_verify_answer_refuses_an_edited_cursor_as_query_records_does(datasets):
    args = {"dataset_id": "small", "select": ["id"], "limit": 5}
    async with Client(stdio(datasets), mode="legacy", cache=None) as c:
        first = (await c.call_tool("query_records", args)).structured_content
        second_cursor = first["data"]["next_cursor"]
        second = (await c.call_tool("query_records", {**args, "cursor": second_cursor})).structured_content
        third = (await c.call_tool("query_records", {**args, "cursor": second["data"]["next_cursor"]})).structured_content
        assert rehashed(json.loads(json.dumps(third))) == third, "the hash is made as Tally makes it"

        # The page this process issued checks as identical here.
        r = await c.call_tool("verify_answer", {"envelope": second})
        assert r.structured_content["data"]["status"] == "identical", r.content[0].text

        # The third page's rows claimed for the second page's cursor with its offset edited to
        # the third page's, the hash made again: it used to check as identical.
        forged = edited(second_cursor, 10)
        r = await c.call_tool("query_records", {**args, "cursor": forged})
        assert r.is_error
        said = json.loads(r.content[0].text)["error"]
        assert said["code"] == "invalid_cursor", said
        answer = json.loads(json.dumps(third))
        answer["provenance"]["query"]["arguments"]["cursor"] = forged
        r = await c.call_tool("verify_answer", {"envelope": rehashed(answer)})
        check = r.structured_content["data"]
        assert check["status"] == "not_reproducible", check
        assert any(said["message"] in reason for reason in check["reasons"]), (said, check["reasons"])


def write_corrupt_page(path: Path):
    """A valid file (zstd, no dictionary) whose `n` data page has the start of its compressed
    body overwritten, the zstd frame's magic number right after the page header: not the
    footer, not a page header. (Bytes flipped further into a zstd body may decompress to
    other values without an error.)"""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 4096
    pq.write_table(pa.table({
        "id": [f"r{i}" for i in range(rows)],
        "grp": [f"g{i % 3}" for i in range(rows)],
        "n": [(i * 7919) % 1000 for i in range(rows)],
    }), path, compression="zstd", use_dictionary=False)
    column = pq.ParquetFile(path).metadata.row_group(0).column(2)
    data = bytearray(path.read_bytes())
    body = data.index(b"\x28\xb5\x2f\xfd", column.data_page_offset)
    assert body < column.data_page_offset + column.total_compressed_size
    for i in range(body, body + 16):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def test_check_fails_a_file_whose_pages_do_not_decode(datasets):
    write_corrupt_page(datasets / "small" / "data.parquet")
    p = tally("check", str(datasets))
    out = p.stdout.decode()
    print(out)
    assert p.returncode == 1, out
    assert "small/dataset.yaml" in out and "data.parquet" in out and "column `n`" in out, out
    assert "does not decode" in out, out
    # It is the file every query fails on.
    q = tally("summarize", "small", "--metrics", "sum:n", "--datasets", str(datasets))
    assert q.returncode != 0, q.stdout
    # A sound file passes (pages read), and so does --deep.
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["a"], "grp": ["g"], "n": [1]}), datasets / "small" / "data.parquet")
    for extra in ([], ["--deep"]):
        p = tally("check", *extra, str(datasets))
        assert p.returncode == 0, p.stdout.decode()


def write_bombs(datasets: Path):
    """The e2e suite's bombs (host/server/tests/it/e2e.rs): 10M copies of a 16-character
    string, and 1.5M copies of a 2 KiB one (3 GB once decoded), dictionary-encoded and zstd:
    kilobytes on disk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name, rows, text in (("bombrows", 10_000_000, "x" * 16), ("bombtext", 1_500_000, "y" * 2048)):
        folder = datasets / name
        folder.mkdir(parents=True)
        (folder / "dataset.yaml").write_text(f"title: {name}\nfields:\n- {{name: s, role: dim}}\n", encoding="utf-8")
        schema = pa.schema([pa.field("s", pa.dictionary(pa.int32(), pa.string()), nullable=False)])
        with pq.ParquetWriter(folder / "data.parquet", schema, compression="zstd") as w:
            for start in range(0, rows, 1_000_000):
                n = min(1_000_000, rows - start)
                keys = pa.array([0] * n, pa.int32())
                w.write_table(pa.table({"s": pa.DictionaryArray.from_arrays(keys, pa.array([text]))}, schema=schema))


async def test_inspect_on_a_decompression_bomb_is_described_from_its_prepared_table(tmp_path):
    """inspect_dataset read every value of a bomb from its files (3 GB of text for bombtext)
    while its table was prepared, and ran into its deadline. Now it describes a bomb from its
    prepared table (waiting for its preparation). One whose table does not fit the budget
    (bombrows in 16 MiB) is read from its files, as query_records reads it: answered, or
    stopped at the call's deadline, never holding more than the budget."""
    datasets = tmp_path / "datasets"
    write_bombs(datasets)
    params = StdioServerParameters(
        command=tally_bin(), args=["serve", "--datasets", str(datasets), "--no-cache", "--memory-budget", "16"],
        env={"TALLY_LOG": "warn", "PATH": os.environ.get("PATH", "")},
    )
    async with Client(params, mode="legacy", cache=None) as c:
        started = time.monotonic()
        r = await c.call_tool("inspect_dataset", {"dataset_id": "bombtext"})
        print(f"inspect bombtext: {time.monotonic() - started:.2f} s")
        assert not r.is_error, r.content[0].text
        [field] = r.structured_content["data"]["fields"]
        assert field["values"]["distinct_count"] == 1 and r.structured_content["data"]["record_count"] == 1_500_000

        started = time.monotonic()
        r = await c.call_tool("inspect_dataset", {"dataset_id": "bombrows"})
        print(f"inspect bombrows: {time.monotonic() - started:.2f} s")
        if r.is_error:
            error = json.loads(r.content[0].text)["error"]
            assert error["code"] == "limit_exceeded" and "time budget" in error["message"], error
        else:
            assert r.structured_content["data"]["record_count"] == 10_000_000

        r = await c.call_tool("query_records", {"dataset_id": "bombrows", "limit": 2})
        if r.is_error:
            # A debug build on a loaded machine may not count 10M records within the budget.
            assert "time budget" in json.loads(r.content[0].text)["error"]["message"], r.content[0].text
        else:
            assert r.structured_content["data"]["total"] == 10_000_000
