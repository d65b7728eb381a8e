"""`tally add` and `tally fetch` as a user runs them, against a running `tally serve`.

The publisher is a local HTTPS server on 127.0.0.1 with a certificate from a certificate
authority made in the test (trustme); `tally fetch --ca-cert` trusts it. Its page links
several files; the survey's workbook (the reference XLSX) is found by the published
definition's `asset_pattern`. Nothing leaves the loopback interface.
"""

import json
import os
import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import HttpServer, tally_bin, wait_for

pytestmark = pytest.mark.anyio

REFERENCE = Path(os.environ.get("TALLY_REFERENCE", Path(__file__).resolve().parents[3] / "shared" / "reference"))
XLSX = REFERENCE / "source" / "20250729_procedures-survey-results_outline_02.xlsx"
CSV = REFERENCE / "source" / "procedures-survey-r6.cp932.csv"
DEFINITION = REFERENCE / "procedures-survey-r6.dataset.yaml"
BOUND = 60.0


def need_reference():
    for p in (XLSX, CSV, DEFINITION):
        if not p.is_file():
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true but the reference file {p} is missing")
            pytest.skip(f"the reference file {p} is not beside the repository")


class Publisher:
    """A publisher's site: `pages` maps a path to (status, headers, body) or a callable that
    handles the request itself."""

    def __init__(self, tmp: Path):
        import trustme

        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_pem = tmp / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_pem))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        self.pages = {}
        self.requests = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                site.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                page = site.pages.get(self.path)
                if page is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if callable(page):
                    page(self)
                    return
                status, headers, body = page
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


PAGE = "/resources/procedures-survey-results"
ASSET = "/assets/contents/node/basic_page/field_ref_resources/5a3e/20250729_procedures-survey-results_outline_02.xlsx"


def page_html(links) -> bytes:
    items = "\n".join(f'<li><a href="{href}">{name}</a></li>' for href, name in links)
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>行政手続等の棚卸調査結果</title></head><body><ul>{items}</ul></body></html>".encode()


def workbook_with_etag(etag: str):
    data = XLSX.read_bytes()

    def handle(h):
        if h.headers.get("If-None-Match") == etag:
            h.send_response(304)
            h.send_header("ETag", etag)
            h.end_headers()
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
        h.send_header("ETag", etag)
        h.send_header("Last-Modified", "Tue, 29 Jul 2025 01:00:00 GMT")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    return handle


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([tally_bin(), *args], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        pytest.fail(f"tally {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def small_csv(tmp: Path) -> Path:
    """The survey's two header rows and its first three records, in cp932 as published."""
    lines = CSV.read_bytes().split(b"\r\n")
    path = tmp / "first-rows.cp932.csv"
    path.write_bytes(b"\r\n".join(lines[:5]) + b"\r\n")
    return path


def body(result) -> dict:
    return json.loads(result.content[0].text)


async def summary_of(c) -> dict:
    r = await c.call_tool("summarize_records", {"dataset_id": "procedures", "metrics": ["count"]})
    assert not r.is_error, body(r)
    return body(r)


async def test_fetch_from_a_publisher_page_into_a_running_server(tmp_path):
    need_reference()
    site = Publisher(tmp_path)
    datasets = tmp_path / "datasets"
    folder = datasets / "procedures"
    folder.mkdir(parents=True)
    definition = DEFINITION.read_text(encoding="utf-8").replace(
        "https://www.digital.go.jp/resources/procedures-survey-results", site.url(PAGE)
    )
    (folder / "dataset.yaml").write_text(definition, encoding="utf-8")
    site.pages[PAGE] = (
        200,
        {"Content-Type": "text/html; charset=utf-8"},
        page_html(
            [
                ("/assets/old/20240701_procedures-survey-results_outline_02.xlsx", "令和5年度"),
                (ASSET, "令和6年度（Excel）"),
                ("/assets/20250729_procedures-survey-results_outline_01.pdf", "概要"),
                ("https://example.org/unrelated.csv", "other"),
            ]
        ),
    )
    site.pages[ASSET] = workbook_with_etag('"r6-v1"')
    server = None
    try:
        # First data: three records from the CSV, converted by `tally add` with the
        # published definition in place.
        added = json.loads(run("add", "procedures", str(small_csv(tmp_path)), "--datasets", str(datasets)).stdout)
        assert added["rows"] == 3 and added["definition"] == "kept"
        server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000", datasets=str(datasets))
        async with Client(server.url, mode="legacy", cache=None) as c:
            before = await summary_of(c)
            assert before["data"]["rows"] == [[3]]
            assert any("no retrieval date" in w for w in before["provenance"]["warnings"]), before["provenance"]

            fetched = run("fetch", "procedures", "--datasets", str(datasets), "--ca-cert", str(site.ca_pem))
            out = json.loads(fetched.stdout)
            assert out["status"] == "updated", out
            assert out["asset_url"] == site.url(ASSET)
            assert len(out["candidates"]) == 2, "both workbooks match; the newest was chosen"
            assert out["added"]["rows"] == 75071
            assert "downloading" in fetched.stderr, "progress is reported on stderr"
            record = json.loads((folder / ".fetch.json").read_text(encoding="utf-8"))
            assert record["pageUrl"] == site.url(PAGE)
            assert record["assetUrl"] == site.url(ASSET)
            assert record["size"] == XLSX.stat().st_size
            import hashlib

            assert record["sha256"] == "sha256:" + hashlib.sha256(XLSX.read_bytes()).hexdigest()
            assert record["etag"] == '"r6-v1"'
            assert record["lastModified"] == "Tue, 29 Jul 2025 01:00:00 GMT"
            assert record["retrievedAt"] == record["fetched_at"]

            async def reloaded():
                s = await summary_of(c)
                return s if s["data"]["rows"] == [[75071]] else None

            after = await wait_for("the server answers from the fetched data", reloaded, BOUND)
            source = after["provenance"]["sources"][0]
            assert source["retrievedAt"] == record["retrievedAt"], source
            assert not any("no retrieval date" in w for w in after["provenance"]["warnings"]), after["provenance"]
            steps = [t["description"] for t in after["provenance"]["transformations"]]
            assert any(
                "converted from 20250729_procedures-survey-results_outline_02.xlsx (xlsx, sheet 手続一覧, 2 header rows, "
                + record["sha256"]
                in d
                for d in steps
            ), steps
            served = (folder / "data.parquet").read_bytes()

            # Unchanged: a conditional request answered 304, nothing touched.
            again = run("fetch", "procedures", "--datasets", str(datasets), "--ca-cert", str(site.ca_pem))
            assert json.loads(again.stdout)["status"] == "unchanged"
            assert "HTTP 304" in again.stderr
            assert site.requests[-1][1].get("if-none-match") == '"r6-v1"'
            assert (folder / "data.parquet").read_bytes() == served

            def refused(links, *extra, expect: str):
                site.pages[PAGE] = (200, {"Content-Type": "text/html"}, page_html(links))
                p = run("fetch", "procedures", "--datasets", str(datasets), "--ca-cert", str(site.ca_pem), *extra, check=False)
                assert p.returncode != 0, p.stdout
                assert expect in p.stderr, p.stderr
                assert json.loads((folder / ".fetch.json").read_text(encoding="utf-8")) == record
                assert (folder / "data.parquet").read_bytes() == served
                return p

            newer = "/assets/20260401_procedures-survey-results_outline_02.xlsx"
            # A redirect to plain http.
            site.pages[newer] = (302, {"Location": f"http://127.0.0.1:{site.port}{ASSET}"}, b"")
            refused([(newer, "new")], expect="only https is fetched")
            # A host that is not the page's.
            refused([(site.url(newer, host="localhost"), "new")], expect="the host localhost is not the page's host")
            # A download that breaks off before its Content-Length.
            data = XLSX.read_bytes()

            def truncated(h):
                h.send_response(200)
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data[: len(data) // 3])
                h.wfile.flush()
                h.close_connection = True

            site.pages[newer] = truncated
            refused([(newer, "new")], expect="nothing was changed")
            # An HTML page served under the workbook's name.
            site.pages[newer] = (200, {"Content-Type": "text/html"}, b"<!DOCTYPE html><html><body>Please log in</body></html>")
            refused([(newer, "new")], expect="the server sent an HTML page")
            # More than --max-bytes (said by Content-Length before anything is read).
            site.pages[newer] = workbook_with_etag('"r7"')
            refused([(newer, "new")], "--max-bytes", "100000", expect="more than --max-bytes 100000")

            # More than --max-bytes with no Content-Length to say so: stopped while reading.
            def endless(h):
                h.send_response(200)
                h.send_header("Content-Type", "application/octet-stream")
                h.end_headers()
                h.wfile.write(b"PK\x03\x04" + b"\0" * 300_000)
                h.close_connection = True

            site.pages[newer] = endless
            refused([(newer, "new")], "--max-bytes", "100000", expect="sends more than --max-bytes 100000")
            # A redirect that never ends.
            site.pages[newer] = (302, {"Location": newer}, b"")
            refused([(newer, "new")], expect="redirects more than 10 times")
            # A publisher that stops answering.
            def silent(h):
                time.sleep(6)
                h.send_response(200)
                h.send_header("Content-Length", "0")
                h.end_headers()

            site.pages[newer] = silent
            refused([(newer, "new")], "--timeout", "2", expect="did not answer in time")
            # A page with no matching link lists what it has.
            refused([("/assets/notes.pdf", "notes")], expect="no link on")

            # Through all of it the server kept answering from the fetched data.
            still = await summary_of(c)
            assert still["data"]["rows"] == [[75071]]
            assert still["provenance"]["sources"][0]["retrievedAt"] == record["retrievedAt"]

            # Data added by hand no longer comes from the fetched file: the record goes, and
            # the next fetch downloads and converts again instead of answering "unchanged".
            local = run("add", "procedures", str(small_csv(tmp_path)), "--datasets", str(datasets))
            assert ".fetch.json was removed" in local.stderr, local.stderr
            assert not (folder / ".fetch.json").exists()
            site.pages[PAGE] = (200, {"Content-Type": "text/html"}, page_html([(ASSET, "令和6年度")]))
            refetched = json.loads(run("fetch", "procedures", "--datasets", str(datasets), "--ca-cert", str(site.ca_pem)).stdout)
            assert refetched["status"] == "updated" and refetched["added"]["rows"] == 75071
            assert "if-none-match" not in site.requests[-1][1], "no conditional request for data not served"
    finally:
        if server:
            server.stop()
        site.stop()


def page_with_one_csv(folder: Path, site: "Publisher"):
    """A dataset folder whose definition names `site`'s page, and that page linking one CSV
    (`/files/data.csv`, which the test serves as it needs)."""
    (folder / "dataset.yaml").write_text(
        f"""schema_version: "1"
title: t
source:
  url: {site.url("/page")}
  asset_pattern: "data\\\\.csv$"
id_field: id
fields:
- {{name: id, role: id}}
- {{name: n, role: measure, data_type: integer}}
""",
        encoding="utf-8",
    )
    site.pages["/page"] = (200, {"Content-Type": "text/html"}, page_html([("/files/data.csv", "data")]))


def test_a_redirect_to_another_port_of_the_page_host_is_another_origin(tmp_path):
    """The publisher's page on one port redirects the file to the same host on another port:
    another server, refused unless `--allow-host HOST:PORT` names it (a host without a port
    means https's own port, 443). The other server is never asked."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    site = Publisher(tmp_path / "a")
    other = Publisher(tmp_path / "b")
    try:
        datasets = tmp_path / "datasets"
        folder = datasets / "ports"
        folder.mkdir(parents=True)
        page_with_one_csv(folder, site)
        site.pages["/files/data.csv"] = (302, {"Location": other.url("/files/data.csv")}, b"")
        other.pages["/files/data.csv"] = (200, {"Content-Type": "text/csv"}, b"id,n\n1,5\n2,7\n")
        base = ["fetch", "ports", "--datasets", str(datasets), "--ca-cert", str(site.ca_pem), "--ca-cert", str(other.ca_pem)]

        p = run(*base, check=False)
        assert p.returncode != 0, p.stdout
        assert f"https://127.0.0.1:{other.port} is another server than the page's" in p.stderr, p.stderr
        assert f"--allow-host 127.0.0.1:{other.port}" in p.stderr, p.stderr
        # The host alone is port 443: still another server.
        p = run(*base, "--allow-host", "127.0.0.1", check=False)
        assert p.returncode != 0 and "is another server than the page's" in p.stderr, p.stderr
        assert other.requests == [], "the other server was never asked"
        assert not (folder / "data.parquet").exists()

        out = json.loads(run(*base, "--allow-host", f"127.0.0.1:{other.port}").stdout)
        assert out["status"] == "updated" and out["added"]["rows"] == 2, out
        assert [path for path, _ in other.requests] == ["/files/data.csv"]
    finally:
        site.stop()
        other.stop()


def test_a_certificate_that_cannot_be_verified_names_ca_cert(tmp_path):
    """Regression (issue 42): a publisher whose certificate comes from an authority the
    machine does not trust was refused with "check source.url", which leads nowhere; the hint
    names `--ca-cert`, and with it the same fetch succeeds."""
    site = Publisher(tmp_path)
    try:
        datasets = tmp_path / "datasets"
        folder = datasets / "private"
        folder.mkdir(parents=True)
        page_with_one_csv(folder, site)
        site.pages["/files/data.csv"] = (200, {"Content-Type": "text/csv"}, b"id,n\n1,5\n2,7\n")
        p = run("fetch", "private", "--datasets", str(datasets), check=False)
        assert p.returncode != 0, p.stdout
        assert "--ca-cert" in p.stderr and "certificate" in p.stderr, p.stderr
        assert "check source.url" not in p.stderr, p.stderr
        assert not (folder / "data.parquet").exists()
        out = json.loads(run("fetch", "private", "--datasets", str(datasets), "--ca-cert", str(site.ca_pem)).stdout)
        assert out["status"] == "updated" and out["added"]["rows"] == 2, out
    finally:
        site.stop()


async def test_add_into_a_running_server_reloads_it_once_with_a_skeleton(tmp_path):
    need_reference()
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000", datasets=str(datasets))
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            p = run("add", "survey", str(CSV), "--datasets", str(datasets))
            summary = json.loads(p.stdout)
            assert summary["definition"] == "written"
            assert "reading" in p.stderr and "converting" in p.stderr, "plain progress lines off a terminal"
            assert not p.stdout.lstrip().startswith("tally"), "stdout holds only the summary"
            checked = run("check", str(datasets))
            assert "1 dataset(s) valid" in checked.stdout, checked.stdout

            async def served():
                r = await c.call_tool("summarize_records", {"dataset_id": "survey", "group_by": ["オンライン化の実施状況"]})
                return None if r.is_error else body(r)

            s = await wait_for("the new dataset is served", served, BOUND)
            assert s["data"]["total_group_count"] >= 5
            inspected = body(await c.call_tool("inspect_dataset", {"dataset_id": "survey"}))
            roles = {f["name"]: f["role"] for f in inspected["data"]["fields"]}
            assert roles["手続ID"] == "id" and roles["総手続件数"] == "measure"
    finally:
        server.stop()


def test_a_null_marker_given_on_a_re_run_is_recorded_in_the_definition(tmp_path):
    """Regression (issue 42): the skeleton asks whether `-` means "no value" and suggests
    `--null-marker` on a re-run; the re-run converted the cells but recorded nothing, so
    dataset.yaml kept the question, the column stayed text and the next add forgot the answer.
    Now the answer is written into source.null_markers, the field is typed and measured as the
    file read with the marker says, its TODO lines follow, and the rest of the file is kept."""
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    data = tmp_path / "budget.csv"
    data.write_text("id,office,amount,year\n1,a,10,2020\n2,b,-,2021\n3,c,30,2022\n4,d,-,2020\n5,e,50,2021\n", encoding="utf-8")
    first = json.loads(run("add", "budget", str(data), "--datasets", str(datasets)).stdout)
    assert first["definition"] == "written"
    (question,) = first["questions"]
    assert "`-` (2)" in question and "--null-marker" in question
    yaml_path = datasets / "budget" / "dataset.yaml"
    # A person's own edit, which the re-run must keep.
    text = yaml_path.read_text(encoding="utf-8").replace("title: budget  # TODO: the dataset's title as its publisher gives it", "title: 予算")
    assert "title: 予算" in text
    yaml_path.write_text(text, encoding="utf-8")

    again = json.loads(run("add", "budget", str(data), "--datasets", str(datasets), "--null-marker", "-").stdout)
    assert again["definition"] == "updated", again
    assert 'source.null_markers: "-" added' in again["recorded"], again["recorded"]
    assert "amount: data_type string → integer" in again["recorded"], again["recorded"]
    assert again["questions"] == []
    amount = next(c for c in again["columns"] if c["name"] == "amount")
    assert amount["data_type"] == "integer" and amount["nulls"] == 2, amount
    text = yaml_path.read_text(encoding="utf-8")
    assert 'null_markers: ["-"]' in text and "title: 予算" in text
    assert "TODO (question)" not in text and "kept as text until they are answered" not in text
    assert "empty in 2 of 5 rows" in text, text
    checked = run("check", str(datasets))
    assert "1 dataset(s) valid" in checked.stdout, checked.stdout
    summed = json.loads(run("summarize", "budget", "--datasets", str(datasets), "--metrics", "sum:amount", "--group-by", "year").stdout)
    # Summed as numbers, and the empty cells said, not taken as 0.
    assert sorted(summed["data"]["rows"]) == [[2020, 10, 1], [2021, 50, 1], [2022, 30, 0]], summed["data"]
    assert summed["data"]["columns"] == ["year", "sum:amount", "amount:null_excluded"]

    # A third run without the flag keeps the answer: the definition declares it now.
    third = json.loads(run("add", "budget", str(data), "--datasets", str(datasets)).stdout)
    assert third["definition"] == "kept" and "recorded" not in third
    assert next(c for c in third["columns"] if c["name"] == "amount")["nulls"] == 2


def test_bad_input_from_the_command_line(tmp_path):
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    bad = tmp_path / "ragged.csv"
    bad.write_text("a,b,c\n1,2,3\n4,5\n", encoding="utf-8")
    p = run("add", "x", str(bad), "--datasets", str(datasets), check=False)
    assert p.returncode == 1
    assert p.stdout == "", "nothing on stdout but a summary"
    error = json.loads(p.stderr.strip().splitlines()[-1])["error"]
    assert error["kind"] == "bad_input"
    assert "ragged.csv, row 3: the row has 2 fields but the header (row 1) has 3" in error["message"]
    assert "hint" in error
    assert list(datasets.iterdir()) == [], "nothing written, nothing left behind"


def test_a_csv_dropped_into_datasets_says_how_to_convert_it(tmp_path):
    datasets = tmp_path / "datasets"
    (datasets / "named").mkdir(parents=True)
    (datasets / "named" / "dataset.yaml").write_text(
        'schema_version: "1"\ntitle: t\ndata_file: data.csv\nfields:\n- {name: a, role: id}\n', encoding="utf-8"
    )
    (datasets / "named" / "data.csv").write_text("a\n1\n", encoding="utf-8")
    (datasets / "beside").mkdir()
    (datasets / "beside" / "dataset.yaml").write_text('schema_version: "1"\ntitle: t\nfields:\n- {name: a, role: id}\n', encoding="utf-8")
    (datasets / "beside" / "survey.xlsx").write_bytes(b"PK\x03\x04")
    p = run("check", str(datasets), check=False)
    assert p.returncode != 0
    text = p.stdout + p.stderr
    assert "`data.csv` is a CSV file, not Parquet" in text, text
    assert "tally add named" in text, text
    assert "still being written" not in text, text
    assert "which holds `survey.xlsx`" in text and "tally add beside" in text, text


def test_workbooks_as_a_spreadsheet_program_writes_them(tmp_path):
    """A workbook written by openpyxl (numbers, dates, a formula's cached value absent), and
    the same workbook encrypted with a password as Excel does (msoffcrypto-tool)."""
    import datetime

    import openpyxl
    from msoffcrypto.format.ooxml import OOXMLFile

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "一覧"
    sheet.append(["令和6年度 集計"])
    sheet.append(["コード", "名称", "件数", "比率", "基準日"])
    sheet.append(["001", "申請", 12, 0.5, datetime.date(2024, 4, 1)])
    sheet.append(["002", "届出", 3, 0.25, datetime.date(2024, 10, 1)])
    other = book.create_sheet("メモ")
    other.append(["項目"])
    other.append(["二枚目"])
    plain = tmp_path / "plain.xlsx"
    book.save(plain)
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    out = json.loads(run("add", "book", str(plain), "--datasets", str(datasets)).stdout)
    types = {c["name"]: (c["data_type"], c.get("role")) for c in out["columns"]}
    assert out["input"]["sheet"] == "一覧" and out["input"]["header_rows"] == 2
    assert types["コード"][0] == "string", "codes with leading zeros stay text"
    assert types["件数"] == ("integer", "measure")
    assert types["比率"] == ("number", "measure")
    assert types["基準日"][0] == "date"
    named = json.loads(run("add", "memo", str(plain), "--sheet", "メモ", "--datasets", str(datasets)).stdout)
    assert named["input"]["sheet"] == "メモ" and named["rows"] == 1

    locked = tmp_path / "locked.xlsx"
    with plain.open("rb") as f, locked.open("wb") as out_file:
        OOXMLFile(f).encrypt("Passw0rd", out_file)
    p = run("add", "locked", str(locked), "--datasets", str(datasets), check=False)
    assert p.returncode == 1
    assert "locked.xlsx: the workbook is password-protected (encrypted)" in p.stderr, p.stderr
    assert "remove the password" in p.stderr
    assert not (datasets / "locked").exists()


async def test_a_running_server_reloads_once_per_add(tmp_path):
    """The server's own log counts the reloads: `tally add` of a new folder (data and a
    skeleton) is one `dataset added`, never a broken state; a second version of the data is
    one `dataset changed`."""
    import re

    need_reference()
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [tally_bin(), "serve", "--http", "127.0.0.1:0", "--datasets", str(datasets)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "TALLY_LOG": "info"},
        )
    try:
        port = None
        deadline = time.monotonic() + BOUND
        while port is None and time.monotonic() < deadline:
            m = re.search(r"serving MCP at http://127\.0\.0\.1:(\d+)/mcp", log.read_text())
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        assert port, log.read_text()
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", cache=None) as c:
            run("add", "survey", str(CSV), "--datasets", str(datasets))

            async def rows(want):
                r = await c.call_tool("summarize_records", {"dataset_id": "survey"})
                return not r.is_error and body(r)["data"]["rows"][0][0] == want

            await wait_for("added", lambda: rows(75071), BOUND)
            # A second version, converted by the skeleton the first one wrote.
            run("add", "survey", str(small_csv(tmp_path)), "--datasets", str(datasets))
            await wait_for("changed", lambda: rows(3), BOUND)
            await anyio.sleep(3)
        text = log.read_text()
        events = []
        for line in text.splitlines():
            if "survey" not in line:
                continue
            for kind in ("dataset added", "dataset changed", "dataset removed", "cannot be served"):
                if kind in line:
                    events.append(kind)
        assert events == ["dataset added", "dataset changed"], text
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_progress_is_a_bar_on_a_terminal_and_stdout_only_the_summary(tmp_path):
    """stderr on a pseudo-terminal gets indicatif's bar; stdout, a pipe, gets the JSON."""
    import pty

    need_reference()
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    main, secondary = pty.openpty()
    proc = subprocess.Popen(
        [tally_bin(), "add", "survey", str(CSV), "--datasets", str(datasets), "--compact"],
        stdout=subprocess.PIPE,
        stderr=secondary,
    )
    os.close(secondary)
    drawn = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk
    out, _ = proc.communicate(timeout=600)
    os.close(main)
    assert proc.returncode == 0, drawn.decode(errors="replace")
    assert json.loads(out)["rows"] == 75071, "stdout is the summary alone"
    text = drawn.decode(errors="replace")
    assert "converting [" in text and "MiB" in text and "rows" in text, text[-2000:]
    assert "tally add: converting" not in text, "no plain progress lines on a terminal"
