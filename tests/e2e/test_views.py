"""MCP Apps views (io.modelcontextprotocol/ui): declared to clients that announce the
extension, and to no other; each view drawn in headless Chromium by a small test host that
implements the host side of the spec's postMessage protocol, with real envelopes from the real
survey; the browser front of `tally serve --http` used as a person would."""

import http.server
import json
import os
import re
import shutil
import subprocess
import socketserver
import threading
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.extension import advertise

from conftest import ROOT, HttpServer, reference_survey, stdio_params, tally_bin

pytestmark = pytest.mark.anyio

TIMEOUT = 120
EXTENSION = "io.modelcontextprotocol/ui"
MIME = "text/html;profile=mcp-app"
TOOLS = ["list_datasets", "inspect_dataset", "query_records", "summarize_records", "cite_provisions", "verify_answer"]
ARTIFACTS = Path(os.environ.get("TALLY_ARTIFACTS", ROOT / "target" / "e2e-artifacts"))
HOST_DIR = Path(__file__).resolve().parent / "apps_host"


def apps_client(target, mode="legacy"):
    return Client(
        target,
        mode=mode,
        cache=None,
        read_timeout_seconds=TIMEOUT,
        extensions=[advertise(EXTENSION, {"mimeTypes": [MIME]})],
    )


def plain_client(target, mode="legacy"):
    return Client(target, mode=mode, cache=None, read_timeout_seconds=TIMEOUT)


def dump(model) -> dict:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


# ---- declarations, over both transports and both protocol eras ------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_views_are_declared_to_apps_clients_only(transport, mode, http_server):
    target = stdio_params() if transport == "stdio" else http_server.url
    with anyio.fail_after(TIMEOUT):
        async with apps_client(target, mode) as c:
            tools = {t.name: dump(t) for t in (await c.list_tools()).tools}
            # Every tool has a view: cite_provisions and verify_answer got theirs (issue 42),
            # as their answers were read as text in MCP Apps hosts (provisions with their
            # text and link, a check's changed values side by side).
            assert set(tools) == set(TOOLS)
            for name, t in tools.items():
                ui = t["_meta"]["ui"]
                assert ui["resourceUri"] == f"ui://tally/{name}"
                assert ui["visibility"] == ["model", "app"]
                assert t["_meta"]["ui/resourceUri"] == ui["resourceUri"]
            listed = {str(r.uri): dump(r) for r in (await c.list_resources()).resources}
            for name in TOOLS:
                r = listed[f"ui://tally/{name}"]
                assert r["mimeType"] == MIME
                assert r["_meta"]["ui"]["csp"]["connectDomains"] == []
            read = dump(await c.read_resource("ui://tally/summarize_records"))
            (content,) = read["contents"]
            assert content["mimeType"] == MIME
            assert content["text"].startswith("<!doctype html>")
            assert 'data-tool="summarize_records"' in content["text"]
            # Self-contained: nothing is loaded from anywhere.
            assert "src=" not in content["text"].split("<script>")[0]
            assert content["_meta"]["ui"]["csp"]["resourceDomains"] == []
            result = await c.call_tool("summarize_records", {"dataset_id": "procedures", "group_by": ["所管府省庁"]})
            assert not result.is_error
            assert dump(result)["_meta"]["ui"]["resourceUri"] == "ui://tally/summarize_records"

        # A client without the extension gets exactly what it got before: no _meta on the
        # tools or the result, no views in the list (it may still read one by its URI).
        async with plain_client(target, mode) as c:
            for t in (await c.list_tools()).tools:
                assert t.meta is None or "ui" not in t.meta, t.meta
            uris = [str(r.uri) for r in (await c.list_resources()).resources]
            assert not [u for u in uris if u.startswith("ui://")], uris
            result = await c.call_tool("summarize_records", {"dataset_id": "procedures", "group_by": ["所管府省庁"]})
            assert result.meta is None or "ui" not in result.meta
            assert len(result.content) == 1
            read = dump(await c.read_resource("ui://tally/query_records"))
            assert read["contents"][0]["mimeType"] == MIME


async def test_an_unknown_view_is_refused_with_the_names_that_exist():
    with anyio.fail_after(TIMEOUT):
        async with apps_client(stdio_params()) as c:
            with pytest.raises(Exception) as e:
                await c.read_resource("ui://tally/chart")
            assert "ui://tally/<tool>" in str(e.value)


# ---- the views in a real browser ----------------------------------------------------------


def chromium():
    """Headless Chromium through chromedriver, logging the console and the network."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        browser = None
    if not browser or not driver_path:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but Chromium, chromedriver or selenium is missing (.ci/run installs them)")
        pytest.skip("Chromium and chromedriver are not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-extensions", "--window-size=1200,900", "--lang=ja",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


def requests_made(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_until(driver, script: str, what: str, seconds: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.1).until(lambda d: d.execute_script(script))
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / ("failed-" + "".join(c if c.isalnum() else "-" for c in what) + ".png")
        driver.save_screenshot(str(shot))
        text = driver.execute_script("return document.body ? document.body.innerText.slice(0, 2000) : ''")
        pytest.fail(f"{what}: not seen in {seconds} s (screenshot {shot.name}); console: {console_errors(driver)}; page: {text}")


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    return reference_survey(tmp_path_factory, "views")


class HostSite:
    """The test host's page and the cases it draws, with `/mcp` passed through to a real
    server (same origin for the page, as a host's own back end would be)."""

    def __init__(self, cases: dict, upstream: str):
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, status, body: bytes, content_type: str, headers=()):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = self.path.split("?")[0]
                if path in ("/host.html", "/host.js"):
                    kind = "text/html" if path.endswith(".html") else "text/javascript"
                    self.send(200, (HOST_DIR / path[1:]).read_bytes(), kind + "; charset=utf-8")
                elif path.startswith("/case/") and path.endswith(".json"):
                    name = urllib.request.unquote(path[len("/case/") : -len(".json")])
                    self.send(200, json.dumps(site.cases[name]).encode(), "application/json")
                else:
                    self.send(404, b"not found", "text/plain")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept", "mcp-session-id", "mcp-protocol-version")}
                request = urllib.request.Request(upstream, data=body, headers=headers, method="POST")
                try:
                    with urllib.request.urlopen(request, timeout=120) as r:
                        extra = [("mcp-session-id", r.headers["mcp-session-id"])] if r.headers.get("mcp-session-id") else []
                        self.send(r.status, r.read(), r.headers.get("Content-Type", "application/json"), extra)
                except urllib.error.HTTPError as e:
                    self.send(e.code, e.read(), e.headers.get("Content-Type", "text/plain"))

        self.cases = cases
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, case: str) -> str:
        return f"http://127.0.0.1:{self.port}/host.html?case={urllib.request.quote(case)}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


# The calls drawn: each with the chart its shape gives (the rules of view.js `chooseChart`).
CASES = {
    "bar of a rate": ("summarize_records", {"dataset_id": "survey", "group_by": ["所管府省庁"], "metrics": ["avg:オンライン率", "count"]}, "bar"),
    "treemap of a count": ("summarize_records", {"dataset_id": "survey", "group_by": ["所管府省庁"]}, "treemap"),
    "pie of a count": ("summarize_records", {"dataset_id": "survey", "group_by": ["手続類型"]}, "pie"),
    "stacked bars": ("summarize_records", {"dataset_id": "survey", "group_by": ["所管府省庁", "手続類型"]}, "stacked"),
    "stacked bars of a page": ("summarize_records", {"dataset_id": "survey", "group_by": ["所管府省庁", "手続類型"], "limit": 50}, "stacked"),
    "heatmap of a rate": ("summarize_records", {"dataset_id": "survey", "group_by": ["所管府省庁", "手続類型"], "metrics": ["avg:オンライン率"]}, "heatmap"),
    # Issue 61: pages that hold a fraction of their groups; the chart asks for the largest.
    "heatmap of many pairs": ("summarize_records", {"dataset_id": "survey", "group_by": ["所管府省庁", "法令名"]}, "heatmap"),
    "treemap of many groups": ("summarize_records", {"dataset_id": "survey", "group_by": ["法令名"]}, "treemap"),
    "bar of parts": ("summarize_records", {"dataset_id": "survey", "explode": "申請等における本人確認手法", "group_by": ["申請等における本人確認手法"], "limit": 8}, "bar"),
    "figures": ("summarize_records", {"dataset_id": "survey", "metrics": ["count", "avg:オンライン率"], "where": {"所管府省庁": ["総務省"]}}, "card"),
    "records": ("query_records", {"dataset_id": "survey", "select": ["手続名", "所管府省庁"], "limit": 25}, None),
    "fields": ("inspect_dataset", {"dataset_id": "survey"}, None),
    "datasets": ("list_datasets", {}, None),
}


@pytest.fixture(scope="module")
def views(survey, tmp_path_factory):
    """Real envelopes from the real survey, with the views as the server sends them."""
    server = HttpServer("--call-timeout-ms", "60000", datasets=str(survey))

    async def collect():
        cases = {}
        async with apps_client(server.url) as c:
            tools_meta = {t.name: dump(t)["_meta"]["ui"] for t in (await c.list_tools()).tools if t.name in TOOLS}
            resources = {}
            for name in TOOLS:
                (resources[name],) = dump(await c.read_resource(f"ui://tally/{name}"))["contents"]
            for case, (tool, args, kind) in CASES.items():
                for _ in range(600):
                    result = dump(await c.call_tool(tool, args))
                    # A dataset just copied in may still be settling or being prepared.
                    if not result.get("isError") or not any(
                        w in result["content"][0]["text"] for w in ("dataset_changing", "dataset_preparing", "limit_exceeded")
                    ):
                        break
                    await anyio.sleep(0.1)
                assert not result.get("isError"), (case, result)
                cases[case] = {"tool": tool, "arguments": args, "result": result, "kind": kind,
                               "resource": resources[tool], "toolsMeta": tools_meta}
        return cases

    cases = anyio.run(collect)
    site = HostSite(cases, server.url)
    yield site
    site.stop()
    server.stop()


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


# ---- the shared table of chart cases, read by the Rust charts too -------------------------

SHARED_CASES = ROOT / "tests" / "cases" / "charts.json"
CHOOSE_ALL = """
return arguments[0].map(function (c) {
  var ch = window.TallyView.chooseChart(c.data, c.metric);
  var m = ch.metric || null;
  return { chart: ch.kind, alternatives: ch.kinds, share: !!ch.share,
           kind: m && m.kind, additive: m && m.additive, unit: m && m.unit };
});
"""


def shared_summary(metrics: dict, case: dict) -> dict:
    """A summary's `data` as the table describes it (its `about` says how)."""
    groups = case["groups"]
    metas = [metrics[k] for k in case["metrics"]]
    parameters = {"dataset_id": "procedures", "metrics": [m["column"] for m in metas], "group_by": groups,
                  "where": [], "having": [], "explode": [], "order_by": [], "limit": 200}
    parameters.update(case.get("parameters", {}))
    data = {
        "columns": groups + [m["column"] for m in metas] + case.get("extra_columns", []),
        "rows": case["rows"],
        "metrics": metas,
        "field_metadata": [{"name": g, "role": "dim", "data_type": "string"} for g in groups],
        "parameters": parameters,
    }
    if "truncated" in case:
        data["truncated"] = case["truncated"]
    return data


def test_the_shared_chart_cases_choose_as_the_rust_charts_do(browser, tmp_path):
    """tests/cases/charts.json, the table host/chart's tests read too: view.js chooses the same
    chart and reads the same metric kind and unit from `metrics[]` in every case."""
    table = json.loads(SHARED_CASES.read_text(encoding="utf-8"))
    view_js = (ROOT / "host" / "mcp" / "ui" / "view.js").read_text(encoding="utf-8")
    page = tmp_path / "view.html"
    page.write_text("<!doctype html><meta charset=utf-8><body><script>" + view_js + "</script>", encoding="utf-8")
    browser.get(page.as_uri())
    cases = table["cases"]
    assert len(cases) >= 30, len(cases)
    got = browser.execute_script(CHOOSE_ALL, [{"data": shared_summary(table["metrics"], c), "metric": c["metric"]} for c in cases])
    differ = [f"{c['name']}: expected {c['expect']}, chose {g}" for c, g in zip(cases, got, strict=True) if g != c["expect"]]
    assert not differ, "\n".join(differ)


def fresh_logs(browser):
    """Forgets what earlier tests left in the browser's console and network logs."""
    browser.get_log("browser")
    browser.get_log("performance")


def open_case(browser, site, case):
    fresh_logs(browser)
    browser.get(site.url(case))
    wait_until(browser, "return window.hostLog && window.hostLog.initialized", f"{case}: the view initialized")
    frame = wait_until(browser, "return document.querySelector('iframe')", f"{case}: the frame")
    browser.switch_to.frame(frame)
    wait_until(browser, "return document.querySelector('#view[data-tool]') && !document.getElementById('waiting')", f"{case}: the view drew")


CHART_FACTS = """
var el = document.querySelector('.chart');
if (!el) return null;
var chart = echarts.getInstanceByDom(el);
var option = chart.getOption();
var marks = 0, drawn = 0;
var names = [];
option.series.forEach(function (s, i) {
  var data = chart.getModel().getSeriesByIndex(i).getData();
  s.data.forEach(function (item, k) {
    var v = item !== null && typeof item === 'object' && !Array.isArray(item) ? item.value : item;
    if (item !== null && item.name !== undefined) names.push(item.name);
    if (v === null || v === undefined || (Array.isArray(v) && v[2] === null)) return;
    marks++;
  });
  // What was rendered: a graphic element per datum (a treemap's data also holds its root).
  for (var k = 0; k < data.count(); k++) {
    var el2 = data.getItemGraphicEl(k);
    if (el2 && !(s.type === 'treemap' && k === 0 && data.count() === s.data.length + 1)) drawn++;
  }
});
var axis = (option.yAxis && option.yAxis[0] && option.yAxis[0].data) || null;
return { kind: el.dataset.kind, marks: marks, drawn: drawn, names: names, axis: axis, svg: el.querySelectorAll('svg path').length };
"""


def chart_drawn(browser, what: str):
    """Waits until the chart is drawn: at once from the answer, or after its own calls."""
    wait_until(browser, "return document.querySelector('.chart-scope, .cards, table.data')", what, 90)


@pytest.mark.parametrize("case", [c for c, v in CASES.items() if v[0] == "summarize_records"])
def test_summary_views_draw_one_mark_per_group(case, views, browser):
    data = views.cases[case]["result"]["structuredContent"]["data"]
    expected_kind = views.cases[case]["kind"]
    # A page that does not hold every group: the chart asks for its own (the largest), and
    # the tests below check what it draws; here, that it did.
    page_cut = "group_by" in views.cases[case]["arguments"] and data["total_group_count"] > len(data["rows"])
    open_case(browser, views, case)
    try:
        chart_drawn(browser, f"{case}: the chart")
        drawn = browser.execute_script("return document.getElementById('view').dataset.kind")
        assert drawn == expected_kind, (case, drawn)
        groups = [c for c in data["columns"] if c in {f["name"] for f in data["field_metadata"]} and c not in {m["column"] for m in data["metrics"]}]
        labels = lambda v: "(no value)" if v in (None, "") else str(v)  # noqa: E731
        if expected_kind == "card":
            cards = browser.execute_script("return [].map.call(document.querySelectorAll('.card .figure'), function (e) { return e.textContent; })")
            assert len(cards) == len(data["metrics"])
            assert any("%" in c for c in cards), cards  # the rate as a percentage
        else:
            facts = browser.execute_script(CHART_FACTS)
            assert facts and facts["kind"] == expected_kind, facts
            assert facts["svg"] > 0, "nothing was drawn"
            scope = browser.execute_script("return document.querySelector('.chart-scope').dataset.from")
            assert scope == ("calls" if page_cut else "answer"), (case, scope)
            if not page_cut:
                present = [r for r in data["rows"] if r[data["columns"].index(data["metrics"][0]["column"])] is not None]
                assert facts["marks"] == len(present), (case, facts["marks"], len(data["rows"]))
                # Each datum has its own element in the drawing (bars, cells, slices, tiles).
                assert facts["drawn"] >= len(present), (case, facts)
                first = data["columns"].index(groups[0])
                want = {labels(r[first]) for r in data["rows"]}
                got = set(facts["axis"] or facts["names"])
                assert got == want, (case, got ^ want)
        # Warnings are shown, above the chart.
        # The survey states no retrieval date: every answer warns about that.
        warnings = views.cases[case]["result"]["structuredContent"]["provenance"]["warnings"]
        assert warnings
        shown = browser.execute_script(
            "var w = document.querySelector('.warnings'); var b = document.querySelector('.body');"
            "return w && w.offsetHeight > 0 && w.getBoundingClientRect().bottom <= b.getBoundingClientRect().top ? w.textContent : null")
        assert shown, shown
        for w in warnings:
            # A chart drawn from calls of its own says what it shows instead of the page's cut.
            assert (page_cut and page_warning(w)) != (w[:20] in shown), (w, shown)
        source = browser.execute_script("return document.querySelector('.provenance .source').textContent")
        assert "retrieved" in source
        # The table is one click away, with every group of the page.
        browser.execute_script("document.querySelector('button[data-kind=\"table\"]').click()")
        rows = browser.execute_script("return document.querySelectorAll('table.data tbody tr').length")
        assert rows == len(data["rows"])
        # Every view is kept as a picture (test artefacts; README shows two).
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.execute_script(f"document.querySelector('button[data-kind={expected_kind}]').click()")
        wait_until(browser, "return document.querySelector('.chart svg, .cards')", "the chart again")
        browser.switch_to.default_content()
        browser.save_screenshot(str(ARTIFACTS / f"view-{case.replace(' ', '-')}.png"))
    finally:
        browser.switch_to.default_content()
    assert console_errors(browser) == []
    outside = [u for u in requests_made(browser) if not u.startswith(f"http://127.0.0.1:{views.port}/") and not u.startswith(("data:", "about:"))]
    assert outside == [], outside


def warning_texts(browser, scope: str = "") -> list[str]:
    return browser.execute_script(f"return [].map.call(document.querySelectorAll('{scope} .warnings li'), function (l) {{ return l.textContent; }})")


def page_warning(w: str) -> bool:
    return re.match(r"\d+ of \d+ groups returned \(limit \d+\)", w) is not None


def test_a_chart_says_plainly_what_it_leaves_out(views, survey, tmp_path, browser):
    """Regression (issue 42, "a misleading stacked chart"): a summary cut by its limit (50 of
    147 pairs) drew ministries missing and bars short with only the answer's warning above.
    Issue 61: a view that can call tools asks for the chart's groups itself and draws all 147
    pairs, the warnings above saying what the chart shows (not "50 of 147 groups returned",
    which is about the table's page); a chart that cannot (a file, no server) says under it
    what the answer did not hold."""
    data = views.cases["stacked bars of a page"]["result"]["structuredContent"]["data"]
    whole = views.cases["stacked bars"]["result"]["structuredContent"]["data"]
    assert data["total_group_count"] > data["returned"] == 50, data["total_group_count"]
    assert whole["returned"] == whole["total_group_count"] == data["total_group_count"]
    open_case(browser, views, "stacked bars of a page")
    try:
        chart_drawn(browser, "the chart's own groups")
        facts = browser.execute_script(CHART_FACTS)
        assert facts["kind"] == "stacked" and facts["marks"] == whole["total_group_count"], facts
        assert set(facts["axis"]) == {r[0] for r in whole["rows"]}
        scope = browser.execute_script("var p = document.querySelector('.chart-scope'); return p && { complete: p.dataset.complete, from: p.dataset.from, text: p.textContent };")
        assert scope["complete"] == "true" and scope["from"] == "calls", scope
        total = data["total_group_count"]
        assert f"({total} of {total} pairs)" in scope["text"] and "Not drawn" not in scope["text"], scope
        warnings = warning_texts(browser)
        ministries, kinds = {r[0] for r in whole["rows"]}, {r[1] for r in whole["rows"]}
        assert warnings[0] == (f"The chart shows {len(ministries)} 所管府省庁 × {len(kinds)} 手続類型 ({total} of {total} pairs). "
                               f"It was asked in 3 calls of its own; the table is the page asked for: 50 of {total} groups."), warnings
        assert not [w for w in warnings if page_warning(w)], warnings
        # The table is the page, with the page's own warning.
        browser.execute_script("document.querySelector('button[data-kind=\"table\"]').click()")
        assert [w for w in warning_texts(browser) if page_warning(w)] == [f"50 of {total} groups returned (limit 50); raise limit or add having to see the rest"]
    finally:
        browser.switch_to.default_content()
    calls = browser.execute_script("return window.hostLog.toolCalls")
    assert [c["name"] for c in calls] == ["summarize_records"] * 3, calls
    open_case(browser, views, "stacked bars")
    try:
        scope = browser.execute_script("var p = document.querySelector('.chart-scope'); return { complete: p.dataset.complete, from: p.dataset.from, text: p.textContent };")
        assert scope["complete"] == "true" and scope["from"] == "answer" and "Not drawn" not in scope["text"], scope
        assert f"({whole['returned']} of {whole['total_group_count']} pairs)" in scope["text"], scope
    finally:
        browser.switch_to.default_content()
    assert browser.execute_script("return window.hostLog.toolCalls") == [], "a page holding every group asks nothing"
    assert console_errors(browser) == []

    # A chart file holds the answer and calls nothing: drawn from the page, it says what the
    # page lacks, and the page's warning stays above it.
    page = tmp_path / "page.html"
    r = subprocess.run(
        [tally_bin(), "summarize", "survey", "--datasets", str(survey), "--compact", "--chart", str(page),
         "--group-by", "所管府省庁", "--group-by", "手続類型", "--limit", "50"],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    fresh_logs(browser)
    browser.get(page.as_uri())
    wait_until(browser, "return document.querySelector('.chart-scope')", "the chart of the page")
    scope = browser.execute_script("var p = document.querySelector('.chart-scope'); return { complete: p.dataset.complete, from: p.dataset.from, text: p.textContent };")
    missing = total - 50
    assert scope["complete"] == "false" and scope["from"] == "answer", scope
    assert f"(50 of {total} pairs)" in scope["text"], scope
    assert f"Not drawn: {missing} of the {total} groups that the answer did not hold" in scope["text"], scope
    assert "may be short" in scope["text"], scope
    assert [w for w in warning_texts(browser) if page_warning(w)], warning_texts(browser)
    assert console_errors(browser) == []


def independent_counts(survey: Path, *groups: str) -> list:
    """Every group of a count of the survey, computed apart from the server the chart asked:
    by the command line, with a result budget that holds them all."""
    r = subprocess.run(
        [tally_bin(), "summarize", "survey", "--datasets", str(survey), "--compact", "--limit", "10000",
         "--max-result-tokens", "100000000", *[a for g in groups for a in ("--group-by", g)]],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)["data"]
    assert data["returned"] == data["total_group_count"] and data["columns"][-1] == "count", data["columns"]
    return data["rows"]


# The heatmap as drawn: its rows and columns, and every cell with its value ("others" cells
# are a series of their own, marked with how many groups they stand for).
HEATMAP_CELLS = """
var el = document.querySelector(arguments[0] + ' .chart');
var option = echarts.getInstanceByDom(el).getOption();
var rows = option.yAxis[0].data, columns = option.xAxis[0].data, cells = [];
option.series.forEach(function (s) {
  s.data.forEach(function (d) {
    var v = Array.isArray(d) ? d : d.value;
    cells.push({ row: rows[v[1]], column: columns[v[0]], value: v[2], others: Array.isArray(d) ? 0 : d.others || 0 });
  });
});
return { kind: el.dataset.kind, rows: rows, columns: columns, cells: cells };
"""

OTHERS = re.compile(r"\((\d[\d,]*) others\)")


def check_largest_pairs(chart: dict, survey: Path):
    """Issue 61: a chart of 所管府省庁 × 法令名 (thousands of pairs, a page holding a few
    hundred) draws every ministry (they fit the heatmap's 60 rows), the 39 laws with the
    most records (of the 40 columns it draws) and one "others" column, whose cell for each
    ministry is exactly its records outside those laws: checked against the ministries' own
    totals (a summary without the second grouping) and against every pair, both computed
    apart from the server the chart asked."""
    pairs = {(m, law): n for m, law, n in independent_counts(survey, "所管府省庁", "法令名")}
    ministries = {m: n for m, n in independent_counts(survey, "所管府省庁")}
    laws: dict = {}
    for (_, law), n in pairs.items():
        laws[law] = laws.get(law, 0) + n
    assert len(pairs) > 60 * 40 and len(laws) > 40, (len(pairs), len(laws))
    assert chart["kind"] == "heatmap", chart["kind"]
    # Every ministry: 25 fit the rows.
    assert sorted(chart["rows"]) == sorted(ministries), set(chart["rows"]) ^ set(ministries)
    *drawn, others = chart["columns"]
    assert len(drawn) == 39 and OTHERS.fullmatch(others), chart["columns"]
    assert int(OTHERS.fullmatch(others).group(1).replace(",", "")) == len(laws) - 39
    # The largest: no law left in "others" has more records than a law drawn apart.
    folded = [law for law in laws if law not in drawn]
    assert min(laws[law] for law in drawn) >= max(laws[law] for law in folded), (drawn, others)
    apart = [c for c in chart["cells"] if not c["others"]]
    folded_cells = [c for c in chart["cells"] if c["others"]]
    assert {(c["row"], c["column"]): c["value"] for c in apart} == {k: n for k, n in pairs.items() if k[1] in drawn}
    for c in folded_cells:
        assert c["column"] == others and c["others"] == len(folded), c
        kept = sum(pairs.get((c["row"], law), 0) for law in drawn)
        assert c["value"] == ministries[c["row"]] - kept, c
        assert c["value"] == sum(n for (m, law), n in pairs.items() if m == c["row"] and law not in drawn), c
    assert {c["row"] for c in folded_cells} == {m for m, n in ministries.items() if n > sum(pairs.get((m, law), 0) for law in drawn)}
    return pairs


def test_a_view_of_thousands_of_pairs_draws_the_largest_and_folds_the_rest(views, survey, browser):
    """Issue 61 in an MCP Apps view: the answer's page (200 of the pairs) is not what the
    heatmap draws; it asks for the largest through the host."""
    data = views.cases["heatmap of many pairs"]["result"]["structuredContent"]["data"]
    assert data["total_group_count"] > data["returned"], data["total_group_count"]
    open_case(browser, views, "heatmap of many pairs")
    try:
        chart_drawn(browser, "the heatmap's own groups")
        chart = browser.execute_script(HEATMAP_CELLS, "")
        warnings = warning_texts(browser)
    finally:
        browser.switch_to.default_content()
    pairs = check_largest_pairs(chart, survey)
    assert data["total_group_count"] == len(pairs)
    assert warnings[0].startswith("The chart shows 25 所管府省庁 × the 39 largest of "), warnings
    assert not [w for w in warnings if page_warning(w)], warnings
    calls = browser.execute_script("return window.hostLog.toolCalls")
    assert 3 <= len(calls) <= 40 and {c["name"] for c in calls} == {"summarize_records"}, calls
    assert console_errors(browser) == []


def test_a_view_of_thousands_of_groups_folds_the_smallest_into_one_exact_tile(views, survey, browser):
    """One grouping: 法令名 alone has thousands of groups; the treemap draws the 199 largest
    and one "others" tile whose value is every other record, exactly."""
    data = views.cases["treemap of many groups"]["result"]["structuredContent"]["data"]
    laws = {law: n for law, n in independent_counts(survey, "法令名")}
    assert data["total_group_count"] == len(laws) > 200
    open_case(browser, views, "treemap of many groups")
    try:
        chart_drawn(browser, "the treemap's own groups")
        facts = browser.execute_script(CHART_FACTS)
        items = browser.execute_script("return echarts.getInstanceByDom(document.querySelector('.chart')).getOption().series[0].data.map(function (d) { return [d.name, d.value, d.others || 0]; })")
    finally:
        browser.switch_to.default_content()
    assert facts["kind"] == "treemap" and facts["marks"] == 200, facts
    *apart, (others, value, n) = items
    assert OTHERS.fullmatch(others) and n == len(laws) - 199, items[-1]
    assert {name: v for name, v, _ in apart} == {name: laws[name] for name, _, _ in apart}
    assert min(v for _, v, _ in apart) >= max(v for law, v in laws.items() if law not in {a[0] for a in apart})
    assert value == sum(laws.values()) - sum(v for _, v, _ in apart) == data["total_records"] - sum(v for _, v, _ in apart)
    assert console_errors(browser) == []


def test_the_view_follows_the_host_theme_and_lifecycle(views, browser):
    open_case(browser, views, "bar of a rate")
    browser.switch_to.default_content()
    assert browser.execute_script("return window.hostLog.sizes.length") > 0, "the view reported no size"
    browser.execute_script("hostSend({jsonrpc: '2.0', method: 'ui/notifications/host-context-changed', params: {theme: 'dark'}})")
    frame = browser.find_element("css selector", "iframe")
    browser.switch_to.frame(frame)
    try:
        wait_until(browser, "return document.documentElement.dataset.theme === 'dark' && document.querySelector('.chart svg')", "the dark theme, chart redrawn")
        # The chart's text took the dark theme's colour (it is read when drawing).
        fill = browser.execute_script("var t = echarts.getInstanceByDom(document.querySelector('.chart')).getOption().textStyle; return (Array.isArray(t) ? t[0] : t).color")
        assert fill == browser.execute_script("return getComputedStyle(document.documentElement).getPropertyValue('--fg').trim()")
    finally:
        browser.switch_to.default_content()
    browser.execute_script("hostSend({jsonrpc: '2.0', id: 99, method: 'ui/resource-teardown', params: {}})")
    wait_until(browser, "return window.hostLog.received.some(function (m) { return m && m.id === 99 && m.result; })", "the teardown answered")
    browser.execute_script("hostSend({jsonrpc: '2.0', id: 100, method: 'ui/no-such-thing', params: {}})")
    wait_until(browser, "return window.hostLog.received.some(function (m) { return m && m.id === 100 && m.error && m.error.code === -32601; })", "an unknown request refused")
    browser.execute_script("hostSend({jsonrpc: '2.0', method: 'ui/notifications/tool-cancelled', params: {reason: 'the user stopped it'}})")
    browser.switch_to.frame(browser.find_element("css selector", "iframe"))
    try:
        wait_until(browser, "return /cancelled: the user stopped it/.test(document.getElementById('view').textContent)", "the cancellation shown")
    finally:
        browser.switch_to.default_content()
    assert console_errors(browser) == []


def test_query_view_pages_through_the_host(views, browser):
    data = views.cases["records"]["result"]["structuredContent"]["data"]
    open_case(browser, views, "records")
    try:
        assert browser.execute_script("return document.querySelectorAll('table.data tbody tr').length") == data["returned"]
        titles = browser.execute_script("return [].map.call(document.querySelectorAll('table.data th'), function (t) { return t.title; })")
        assert all(titles) and any("（" in t or len(t) > 5 for t in titles), titles
        first = browser.execute_script("return document.querySelector('table.data tbody td').textContent")
        browser.execute_script("document.querySelector('button[data-page=next]').click()")
        wait_until(browser, "return /^records 26/.test(document.querySelector('.subtitle').textContent)", "the second page")
        assert browser.execute_script("return document.querySelector('table.data tbody td').textContent") != first
        browser.execute_script("document.querySelector('button[data-page=previous]').click()")
        wait_until(browser, "return /^records 1–/.test(document.querySelector('.subtitle').textContent)", "back to the first page")
    finally:
        browser.switch_to.default_content()
    calls = browser.execute_script("return window.hostLog.toolCalls")
    assert [c["name"] for c in calls] == ["query_records", "query_records"]
    assert calls[0]["arguments"]["cursor"] == data["next_cursor"]
    assert console_errors(browser) == []


def test_inspect_and_list_views(views, browser):
    data = views.cases["fields"]["result"]["structuredContent"]["data"]
    open_case(browser, views, "fields")
    try:
        fields = browser.execute_script("return document.querySelectorAll('.field').length")
        assert fields == len(data["fields"])
        meters = browser.execute_script("return [].map.call(document.querySelectorAll('.fill'), function (m) { return Number(m.getAttribute('aria-valuenow')); })")
        assert len(meters) == len(data["fields"]) and all(0 <= m <= 100 for m in meters)
        assert browser.execute_script("return document.querySelectorAll('details.codes').length") > 0
    finally:
        browser.switch_to.default_content()
    assert console_errors(browser) == []
    listed = views.cases["datasets"]["result"]["structuredContent"]["data"]
    open_case(browser, views, "datasets")
    try:
        assert browser.execute_script("return document.querySelectorAll('.card').length") == len(listed["datasets"])
        # A card opens the dataset through the host (tools/call from the view).
        browser.execute_script("document.querySelector('.card[data-dataset=survey]').click()")
        wait_until(browser, "return document.getElementById('view').dataset.tool === 'inspect_dataset'", "the dataset opened")
    finally:
        browser.switch_to.default_content()
    assert console_errors(browser) == []


def test_inspect_view_lists_the_values_of_auto_codelist_fields(views, browser):
    """Regression (issue 42, "values of codelist: auto fields never show"): the compact answer
    sent its most frequent values as `top` while view.js read `top_values`, so 所管府省庁 showed
    no values. The real compact answer has them under `top_values` as [value, count] pairs,
    and the fields view lists them."""
    data = views.cases["fields"]["result"]["structuredContent"]["data"]
    field = next(f for f in data["fields"] if f["name"] == "所管府省庁")
    assert field["codelist"]["kind"] == "auto"
    assert "top" not in field["codelist"], field
    top = field["codelist"]["top_values"]
    assert top and all(isinstance(t, list) and len(t) == 2 for t in top), top
    open_case(browser, views, "fields")
    try:
        items = browser.execute_script(
            "return [].map.call(document.querySelectorAll('.field[data-field=\"所管府省庁\"] details.codes li'), function (l) { return l.textContent; })")
        assert len(items) == len(top), items
        for (value, count), text in zip(top, items, strict=True):
            assert text.startswith(value) and f"({count:,})" in text, (value, count, text)
        summary = browser.execute_script("return document.querySelector('.field[data-field=\"所管府省庁\"] details.codes summary').textContent")
        assert summary == f"the {len(top)} most frequent of {field['codelist']['distinct_count']} values", summary
    finally:
        browser.switch_to.default_content()
    assert console_errors(browser) == []


# ---- the views of cite_provisions and verify_answer ---------------------------------------

LINK = "links: [{to: laws, on: {法令番号: law_num, 根拠条項号: locator}}]\n"
SMALL_YAML = """title: Small counts
publisher: Tally tests
retrieved_at: 2026-12-01
fields:
  - {name: id, role: id, data_type: string}
  - {name: grp, role: dim, data_type: string}
  - {name: n, role: measure, data_type: integer}
"""


def write_small(folder: Path, bump: int = 0):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 60
    table = pa.table({
        "id": [f"r{i:02}" for i in range(rows)],
        "grp": [f"g{i % 3}" for i in range(rows)],
        # `bump` changes one value of group g0.
        "n": [i + (bump if i == 0 else 0) for i in range(rows)],
    })
    pq.write_table(table, folder / "data.parquet")


@pytest.fixture(scope="module")
def law_views(survey, tmp_path_factory):
    """Real cite_provisions answers (the survey linked to the reference laws) and real
    verify_answer answers (identical, altered, data changed), with their views as served."""
    from conftest import REFERENCE

    laws = REFERENCE / "laws"
    if not laws.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the reference laws are missing")
        pytest.skip("the reference laws are absent")
    root = tmp_path_factory.mktemp("law-views") / "datasets"
    shutil.copytree(survey / "survey", root / "survey")
    yaml = root / "survey" / "dataset.yaml"
    yaml.write_text(LINK + yaml.read_text(encoding="utf-8"), encoding="utf-8")
    (root / "laws" / "xml").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples" / "laws" / "dataset.yaml", root / "laws" / "dataset.yaml")
    for p in laws.glob("*.xml"):
        shutil.copyfile(p, root / "laws" / "xml" / p.name)
    (root / "small").mkdir()
    (root / "small" / "dataset.yaml").write_text(SMALL_YAML, encoding="utf-8")
    write_small(root / "small")
    server = HttpServer("--call-timeout-ms", "60000", datasets=str(root))

    async def collect():
        async with apps_client(server.url) as c:
            tools_meta = {t.name: dump(t)["_meta"]["ui"] for t in (await c.list_tools()).tools}
            resources = {name: dump(await c.read_resource(f"ui://tally/{name}"))["contents"][0] for name in ("cite_provisions", "verify_answer")}

            async def call(tool, args):
                for _ in range(600):
                    result = dump(await c.call_tool(tool, args))
                    if not result.get("isError") or not any(
                        w in result["content"][0]["text"] for w in ("dataset_changing", "dataset_preparing")
                    ):
                        break
                    await anyio.sleep(0.1)
                assert not result.get("isError"), (tool, result)
                return result

            cases = {}

            def case(name, tool, args, result):
                cases[name] = {"tool": tool, "arguments": args, "result": result, "kind": None,
                               "resource": resources[tool], "toolsMeta": tools_meta}

            args = {"dataset_id": "survey", "where": {"法令名": ["行政手続法"]}, "group_by": ["所管府省庁"], "limit": 5}
            case("provisions", "cite_provisions", args, await call("cite_provisions", args))
            # A law the laws dataset does not serve: its references are counted by reason.
            args = {"dataset_id": "survey", "where": {"法令名": ["行政手続法", "建築基準法"]}, "limit": 3}
            case("provisions and references not found", "cite_provisions", args, await call("cite_provisions", args))

            answer = (await call("summarize_records", {"dataset_id": "small", "group_by": ["grp"], "metrics": ["count", "sum:n"]}))["structuredContent"]
            case("identical", "verify_answer", {"envelope": "…"}, await call("verify_answer", {"envelope": answer}))
            edited = json.loads(json.dumps(answer))
            edited["data"]["rows"][0][edited["data"]["columns"].index("sum:n")] += 1000
            case("altered", "verify_answer", {"envelope": "…"}, await call("verify_answer", {"envelope": edited}))
            write_small(root / "small", bump=7)
            for _ in range(600):
                changed = await call("verify_answer", {"envelope": answer})
                if changed["structuredContent"]["data"]["status"] == "data_changed":
                    break
                await anyio.sleep(0.1)
            assert changed["structuredContent"]["data"]["status"] == "data_changed", changed
            case("data changed", "verify_answer", {"envelope": "…"}, changed)
            return cases

    site = HostSite(anyio.run(collect), server.url)
    yield site
    site.stop()
    server.stop()


def test_cite_provisions_view_shows_each_provision_with_its_text_link_and_records(law_views, browser):
    data = law_views.cases["provisions"]["result"]["structuredContent"]["data"]
    col = data["columns"].index
    assert data["returned"] == 5 and data["next_cursor"], data
    open_case(browser, law_views, "provisions")
    try:
        shown = browser.execute_script("""
return [].map.call(document.querySelectorAll('li.provision'), function (li) {
  var a = li.querySelector('.revision a');
  return { head: li.querySelector('.provision-head').textContent, text: li.querySelector('blockquote.text').textContent,
           revision: li.querySelector('.revision').textContent, href: a && a.getAttribute('href'),
           records: li.querySelector('.records').textContent, groups: (li.querySelector('.groups') || {}).textContent };
});""")
        assert len(shown) == len(data["rows"])
        for row, li in zip(data["rows"], shown, strict=True):
            assert row[col("law")] in li["head"] and row[col("provision")] in li["head"], li
            assert li["text"] == row[col("text")]
            assert row[col("revision")] in li["revision"]
            assert li["href"] == row[col("uri")] and li["href"].startswith("https://laws.e-gov.go.jp/")
            assert li["records"].startswith(str(row[col("records")]))
            assert li["groups"] == "所管府省庁: " + row[col("所管府省庁")]
        subtitle = browser.execute_script("return document.querySelector('.subtitle').textContent")
        assert f"{data['records_matched']} of {data['records_total']} records" in subtitle and f"1–5 of {data['total_provisions']}" in subtitle, subtitle
        # The next page through the host, as the records view pages.
        browser.execute_script("document.querySelector('button[data-page=next]').click()")
        wait_until(browser, "return /provisions 6–/.test(document.querySelector('.subtitle').textContent)", "the second page of provisions")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.switch_to.default_content()
        browser.save_screenshot(str(ARTIFACTS / "view-cite-provisions.png"))
    finally:
        browser.switch_to.default_content()
    calls = browser.execute_script("return window.hostLog.toolCalls")
    assert [c["name"] for c in calls] == ["cite_provisions"]
    assert calls[0]["arguments"]["cursor"] == data["next_cursor"]
    assert console_errors(browser) == []
    outside = [u for u in requests_made(browser) if not u.startswith(f"http://127.0.0.1:{law_views.port}/") and not u.startswith(("data:", "about:"))]
    assert outside == [], outside

    data = law_views.cases["provisions and references not found"]["result"]["structuredContent"]["data"]
    assert data["unmatched"], data
    open_case(browser, law_views, "provisions and references not found")
    try:
        reasons = browser.execute_script(
            "return [].map.call(document.querySelectorAll('details.unmatched-reason summary'), function (s) { return s.textContent; })")
        assert reasons == [f"{u['reason']}: {u['records']:,} record{'s' if u['records'] != 1 else ''}" for u in data["unmatched"]], reasons
    finally:
        browser.switch_to.default_content()
    assert console_errors(browser) == []


@pytest.mark.parametrize("case", ["identical", "altered", "data changed"])
def test_verify_answer_view_shows_the_status_and_changed_values_side_by_side(case, law_views, browser):
    data = law_views.cases[case]["result"]["structuredContent"]["data"]
    open_case(browser, law_views, case)
    try:
        verdict = browser.execute_script("var v = document.querySelector('.verdict'); return v && { status: v.dataset.status, text: v.textContent };")
        assert verdict["status"] == data["status"], verdict
        # The badge says the status once; the summary follows without repeating it
        # ("Identical identical: …" read twice).
        badge, _, rest = data["summary"].partition(": ")
        assert rest and rest in verdict["text"], verdict
        assert verdict["text"].lower().count(badge.lower() + " ") <= 1 and f"{badge}: " not in verdict["text"], verdict
        rows = browser.execute_script("""
return [].map.call(document.querySelectorAll('table.changes tbody tr'), function (tr) {
  return { at: tr.cells[0].textContent, old: tr.cells[1].getAttribute('title') || tr.cells[1].textContent,
           now: tr.cells[2].getAttribute('title') || tr.cells[2].textContent,
           side: tr.cells[1].getBoundingClientRect().top === tr.cells[2].getBoundingClientRect().top };
});""")
        assert len(rows) == len(data["changes"])
        for change, row in zip(data["changes"], rows, strict=True):
            assert row["at"] == change["at"] and row["side"], row
            assert row["old"] == str(change["old"]) and row["now"] == str(change["new"]), (change, row)
        if case == "identical":
            assert data["changes"] == [] and data["result_hash_matches"]
        else:
            assert data["changes"], data
        changed = browser.execute_script("return [].map.call(document.querySelectorAll('table.sources tr.changed'), function (tr) { return tr.dataset.source; })")
        assert changed == [s["id"] for s in data["sources"] if s["changed"]], changed
        if case == "data changed":
            assert changed
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.switch_to.default_content()
        browser.save_screenshot(str(ARTIFACTS / f"view-verify-{case.replace(' ', '-')}.png"))
    finally:
        browser.switch_to.default_content()
    assert console_errors(browser) == []


# ---- the browser front ----------------------------------------------------------------------


def test_browser_front_lists_inspects_charts_and_links(survey, tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    tokens = tmp_path / "tokens"
    tokens.write_text("analyst front-test-token-0123456789\n")
    server = HttpServer("--token-file", str(tokens), "--call-timeout-ms", "60000", datasets=str(survey))
    try:
        # The page itself needs no token; it is strict about where scripts come from.
        with urllib.request.urlopen(server.base + "/") as r:
            csp = r.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "connect-src 'self'" in csp
        fresh_logs(browser)
        browser.get(server.base + "/")
        wait_until(browser, "return !document.getElementById('login').classList.contains('hidden')", "the token is asked for")
        browser.find_element(By.ID, "token").send_keys("not-the-token-0123456789")
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait_until(browser, "return !document.getElementById('login-error').classList.contains('hidden')", "a wrong token is refused")
        assert "not valid" in browser.find_element(By.ID, "login-error").text
        browser.get_log("browser")  # the refused requests' 401s, expected
        browser.find_element(By.ID, "token").send_keys("front-test-token-0123456789")
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait_until(browser, "return document.querySelector('.card[data-dataset=survey]')", "the datasets")
        browser.find_element(By.CSS_SELECTOR, ".card[data-dataset=survey]").click()
        wait_until(browser, "return document.querySelectorAll('#inspect .field').length > 30", "the fields")
        Select(browser.find_element(By.ID, "group1")).select_by_value("所管府省庁")
        browser.find_element(By.ID, "limit").clear()
        browser.find_element(By.ID, "limit").send_keys("50")
        metrics = Select(browser.find_element(By.ID, "metrics"))
        metrics.deselect_all()
        metrics.select_by_value("avg:オンライン率")
        metrics.select_by_value("count")
        browser.find_element(By.ID, "run").click()
        wait_until(browser, "return document.querySelector('#result .chart svg')", "the chart")
        facts = browser.execute_script(CHART_FACTS.replace("document.querySelector('.chart')", "document.querySelector('#result .chart')"))
        assert facts["kind"] == "bar" and facts["marks"] > 10, facts
        call = json.loads(browser.find_element(By.ID, "call-json").get_attribute("textContent"))
        assert call["params"] == {"name": "summarize_records", "arguments": {"dataset_id": "survey", "metrics": ["avg:オンライン率", "count"], "group_by": ["所管府省庁"], "limit": 50}}
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.set_window_size(1200, 1500)
        browser.save_screenshot(str(ARTIFACTS / "front-summary.png"))
        browser.set_window_size(1200, 900)
        link = browser.find_element(By.ID, "permalink").get_attribute("href")
        # The permalink, opened afresh: the token is asked again (memory only), then the
        # same chart is drawn.
        browser.get("about:blank")
        browser.get(link)
        wait_until(browser, "return !document.getElementById('login').classList.contains('hidden')", "the token is asked again")
        browser.find_element(By.ID, "token").send_keys("front-test-token-0123456789")
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait_until(browser, "return document.querySelector('#result .chart svg')", "the chart again")
        browser.get_log("browser")  # the first request of the reloaded page had no token yet: 401
        again = browser.execute_script(CHART_FACTS.replace("document.querySelector('.chart')", "document.querySelector('#result .chart')"))
        assert again["axis"] == facts["axis"] and again["marks"] == facts["marks"]
        assert console_errors(browser) == []
        outside = [u for u in requests_made(browser) if not u.startswith(server.base + "/") and not u.startswith(("data:", "about:"))]
        assert outside == [], outside
    finally:
        server.stop()


def test_browser_front_offers_coded_values_draws_every_pair_and_warns_once(tmp_path, browser):
    """Issue 42 on the shipped `procedures` dataset, read by the front from the real binary:

    - the condition picker offers 所管府省庁 (codelist: auto) with its values, as the full
      inspect_dataset answer lists them (the 25 ministries, most frequent first);
    - a summary by 所管府省庁 × 手続類型 with the table's page of 50 draws all 147 pairs (the
      chart asks its groups in a call of its own), every ministry on the axis, and says so;
    - the dataset's own warning (no retrieval date) is shown once for the dataset, not with
      each answer, and a records page folds its left-out columns into one line."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    server = HttpServer("--call-timeout-ms", "60000", "--rate-limit", "100000", "--rate-burst", "100000")
    try:
        async def expected():
            async with plain_client(server.url) as c:
                for _ in range(600):
                    inspect = await c.call_tool("inspect_dataset", {"dataset_id": "procedures", "detail": "full"})
                    if not inspect.is_error:
                        break
                    await anyio.sleep(0.1)
                pairs = await c.call_tool("summarize_records", {"dataset_id": "procedures", "group_by": ["所管府省庁", "手続類型"], "limit": 1000})
                return dump(inspect)["structuredContent"], dump(pairs)["structuredContent"]["data"]

        inspect, pairs = anyio.run(expected)
        field = next(f for f in inspect["data"]["fields"] if f["name"] == "所管府省庁")
        values = [t["value"] for t in field["codelist"]["top_values"]]
        assert len(values) == min(30, field["codelist"]["distinct_count"]) > 5, field
        dataset_warnings = inspect["provenance"]["warnings"]
        assert dataset_warnings, "the shipped dataset states no retrieval date"
        assert pairs["total_group_count"] == pairs["returned"] > 50, pairs["total_group_count"]
        ministries = {r[0] for r in pairs["rows"]}

        fresh_logs(browser)
        browser.get(server.base + "/#/d/procedures")
        wait_until(browser, "return document.querySelectorAll('#inspect .field').length > 10", "the fields")
        offered = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "where-field")).options]
        assert "所管府省庁" in offered and "法令名" in offered, offered
        Select(browser.find_element(By.ID, "where-field")).select_by_value("所管府省庁")
        picked = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "where-value")).options]
        assert picked == values, picked
        # The inspect panel lists them too.
        listed = browser.execute_script("return document.querySelectorAll('#inspect .field[data-field=\"所管府省庁\"] details.codes li').length")
        assert listed == len(values)
        Select(browser.find_element(By.ID, "where-field")).select_by_value("")

        Select(browser.find_element(By.ID, "group1")).select_by_value("所管府省庁")
        Select(browser.find_element(By.ID, "group2")).select_by_value("手続類型")
        browser.find_element(By.ID, "limit").clear()
        browser.find_element(By.ID, "limit").send_keys("50")
        browser.find_element(By.ID, "run").click()
        wait_until(browser, "return document.querySelector('#result .chart svg') && document.querySelector('#result .chart-scope')", "the stacked chart")
        facts = browser.execute_script(CHART_FACTS.replace("document.querySelector('.chart')", "document.querySelector('#result .chart')"))
        assert facts["kind"] == "stacked", facts
        assert facts["marks"] == pairs["total_group_count"], facts["marks"]
        assert set(facts["axis"]) == ministries, set(facts["axis"]) ^ ministries
        scope = browser.execute_script("var p = document.querySelector('#result .chart-scope'); return { complete: p.dataset.complete, text: p.textContent };")
        assert scope["complete"] == "true" and f"({pairs['total_group_count']} of {pairs['total_group_count']} pairs)" in scope["text"], scope
        # The call shown (and its permalink) is the one asked: the table's page of 50.
        call = json.loads(browser.find_element(By.ID, "call-json").get_attribute("textContent"))
        assert call["params"]["arguments"]["limit"] == 50
        # Above the chart, what the chart shows (issue 61: it said "50 of 147 groups returned",
        # the table's page, above all 147 pairs drawn); the table keeps the page's warning.
        chart_warnings = warning_texts(browser, "#result")
        kinds = {r[1] for r in pairs["rows"]}
        assert chart_warnings[0].startswith(
            f"The chart shows {len(ministries)} 所管府省庁 × {len(kinds)} 手続類型 ({pairs['total_group_count']} of {pairs['total_group_count']} pairs)."), chart_warnings
        assert chart_warnings[0].endswith(f"the table is the page asked for: 50 of {pairs['total_group_count']} groups."), chart_warnings
        assert not [w for w in chart_warnings if page_warning(w)], chart_warnings
        browser.execute_script("document.querySelector('#result button[data-kind=\"table\"]').click()")
        assert [w for w in warning_texts(browser, "#result") if page_warning(w)], warning_texts(browser, "#result")
        browser.execute_script("document.querySelector('#result button[data-kind=\"stacked\"]').click()")

        def shown_once():
            texts = browser.execute_script("return [].map.call(document.querySelectorAll('.warnings li'), function (l) { return l.textContent; })")
            for w in dataset_warnings:
                assert texts.count(w) == 1, (w, texts)
            assert browser.execute_script("return document.querySelectorAll('#dataset-warnings .warnings li').length") == len(dataset_warnings)

        shown_once()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.set_window_size(1200, 1500)
        browser.save_screenshot(str(ARTIFACTS / "front-stacked.png"))
        browser.set_window_size(1200, 900)

        browser.find_element(By.ID, "tab-query").click()
        browser.find_element(By.ID, "run").click()
        wait_until(browser, "return document.querySelector('#result table.data') && document.querySelector('#result').dataset.tool === 'query_records'", "the records")
        shown_once()
        folded = browser.execute_script("return [].map.call(document.querySelectorAll('#result details.omitted'), function (d) { return d.querySelector('summary').textContent; })")
        assert len(folded) == 1 and folded[0].endswith("columns left out"), folded
        assert not browser.execute_script("return [].some.call(document.querySelectorAll('#result p'), function (p) { return /^Column .* left out/.test(p.textContent); })")
        assert console_errors(browser) == []
        outside = [u for u in requests_made(browser) if not u.startswith(server.base + "/") and not u.startswith(("data:", "about:"))]
        assert outside == [], outside
    finally:
        server.stop()


def test_browser_front_charts_the_largest_of_thousands_of_pairs(survey, browser):
    """Issue 61, as a new user met it: the front's summary 所管府省庁 × 法令名 (a page of 50 of
    thousands of pairs) drew "40 of 3,027 pairs", the first 40 law names in code order, a
    nearly empty grid with ministries missing, under a warning about the table's page. Its
    chart now draws every ministry, the laws with the most records and the rest as one exact
    "others" column, and the warnings above it say what it shows."""
    server = HttpServer("--call-timeout-ms", "60000", datasets=str(survey))
    try:
        call = {"name": "summarize_records", "arguments": {"dataset_id": "survey", "group_by": ["所管府省庁", "法令名"], "limit": 50}}
        fresh_logs(browser)
        browser.get(server.base + "/#/d/survey?call=" + urllib.request.quote(json.dumps(call, ensure_ascii=False)))
        wait_until(browser, "return document.querySelector('#result .chart-scope')", "the heatmap", 120)
        chart = browser.execute_script(HEATMAP_CELLS, "#result")
        pairs = check_largest_pairs(chart, survey)
        laws = len({law for _, law in pairs})
        warnings = warning_texts(browser, "#result")
        assert warnings[0].startswith(f"The chart shows 25 所管府省庁 × the 39 largest of {laws:,} 法令名 and “({laws - 39:,} others)”, their exact total"), warnings
        assert warnings[0].endswith(f"the table is the page asked for: 50 of {len(pairs):,} groups."), warnings
        assert not [w for w in warnings if page_warning(w)], warnings
        scope = browser.execute_script("var p = document.querySelector('#result .chart-scope'); return { complete: p.dataset.complete, from: p.dataset.from, text: p.textContent };")
        assert scope["complete"] == "true" and scope["from"] == "calls", scope
        # The table is the page asked for, and the call shown is the one asked.
        assert json.loads(browser.find_element("id", "call-json").get_attribute("textContent"))["params"] == call
        browser.execute_script("document.querySelector('#result button[data-kind=\"table\"]').click()")
        assert browser.execute_script("return document.querySelectorAll('#result table.data tbody tr').length") == 50
        assert [w for w in warning_texts(browser, "#result") if page_warning(w)] == [f"50 of {len(pairs)} groups returned (limit 50); raise limit or add having to see the rest"]
        browser.execute_script("document.querySelector('#result button[data-kind=\"heatmap\"]').click()")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.set_window_size(1200, 1500)
        browser.save_screenshot(str(ARTIFACTS / "front-largest-pairs.png"))
        browser.set_window_size(1200, 900)
        assert console_errors(browser) == []
        outside = [u for u in requests_made(browser) if not u.startswith(server.base + "/") and not u.startswith(("data:", "about:"))]
        assert outside == [], outside
    finally:
        server.stop()


def test_a_chart_file_opens_in_a_browser_with_nothing_from_outside(survey, tmp_path, browser):
    import subprocess

    from conftest import tally_bin

    page = tmp_path / "chart.html"
    r = subprocess.run(
        [tally_bin(), "summarize", "survey", "--datasets", str(survey), "--compact", "--chart", str(page),
         "--group-by", "所管府省庁", "--group-by", "手続類型"],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)["data"]
    fresh_logs(browser)
    browser.get(page.as_uri())
    wait_until(browser, "return document.querySelector('.chart svg')", "the chart in the file")
    facts = browser.execute_script(CHART_FACTS)
    assert facts["kind"] == "stacked" and facts["marks"] == len(data["rows"]), facts
    assert console_errors(browser) == []
    outside = [u for u in requests_made(browser) if not u.startswith(("file:", "data:", "about:"))]
    assert outside == [], outside
