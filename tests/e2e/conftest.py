"""Shared fixtures: the real `tally` binary, served over stdio or streamable HTTP on 127.0.0.1."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]


def tally_bin() -> str:
    path = os.environ.get("TALLY_BIN") or str(ROOT / "target" / "debug" / "tally")
    if not Path(path).is_file():
        pytest.fail(f"tally binary not found at {path}; build it (cargo build) or set TALLY_BIN")
    return path


REFERENCE = Path(os.environ.get("TALLY_REFERENCE") or ROOT.parent / "shared" / "reference")


def reference_survey(tmp_path_factory, name: str) -> Path:
    """A datasets directory holding the real procedures survey as `survey` (skipped when the
    reference data is absent, failed under CI=true)."""
    import shutil

    parquet = REFERENCE / "procedures" / "procedures-survey-r6.parquet"
    if not parquet.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the reference survey is missing")
        pytest.skip("the reference survey is absent")
    datasets = tmp_path_factory.mktemp(name) / "datasets"
    (datasets / "survey").mkdir(parents=True)
    shutil.copyfile(parquet, datasets / "survey" / "data.parquet")
    shutil.copyfile(REFERENCE / "procedures-survey-r6.dataset.yaml", datasets / "survey" / "dataset.yaml")
    return datasets


def datasets_dir() -> str:
    return os.environ.get("TALLY_DATASETS") or str(ROOT / "datasets")


@pytest.fixture
def anyio_backend():
    return "asyncio"


class HttpServer:
    def __init__(self, *extra_args: str, datasets: str | None = None, env: dict | None = None):
        self.proc = subprocess.Popen(
            [tally_bin(), "serve", "--http", "127.0.0.1:0", "--datasets", datasets or datasets_dir(), *extra_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TALLY_LOG": "warn", **(env or {})},
        )
        self.port = None
        deadline = time.monotonic() + 60
        assert self.proc.stderr is not None
        # What the server said while starting is kept in `log` with the rest.
        early: list[str] = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            early.append(line)
            if not line:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"tally serve exited with {self.proc.returncode}")
                continue
            m = re.search(r"serving MCP at http://127\.0\.0\.1:(\d+)/mcp", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.stop()
            raise RuntimeError("tally serve did not report its address in time")
        # The log is read as it comes (the last lines kept in `log`): a pipe nobody reads
        # fills at 64 KiB, and the server would then block writing its next line.
        import collections
        import threading

        self.log = collections.deque((line for line in early if line), maxlen=10_000)
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen):
    """Ends a process started by a test: terminated, killed if it does not end in 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def http_server():
    # Many tests share this server from one address; rate limits are tested on their own.
    server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000")
    yield server
    server.stop()


def stdio_params(*extra_args: str):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=tally_bin(),
        args=["serve", "--datasets", datasets_dir(), *extra_args],
        # A clean environment, but the same cache of prepared data as the other servers.
        env={
            "TALLY_LOG": "warn",
            "PATH": os.environ.get("PATH", ""),
            **{k: os.environ[k] for k in ("HOME", "XDG_CACHE_HOME") if k in os.environ},
        },
    )


async def wait_for(what: str, probe, bound: float = 30.0):
    """Polls `probe` (async, returns truthy when done) every 100 ms until `bound` seconds;
    prints the time taken. Nothing asserts on time: the bound only ends a hung test."""
    started = time.monotonic()
    while True:
        value = await probe()
        if value:
            print(f"{what}: {time.monotonic() - started:.2f} s")
            return value
        if time.monotonic() - started > bound:
            pytest.fail(f"{what}: not seen within {bound} s")
        await anyio.sleep(0.1)


async def metrics(server: "HttpServer") -> dict[str, float]:
    """The server's unlabelled gauges and counters on `/metrics`, by name."""
    import httpx2

    async with httpx2.AsyncClient() as h:
        r = await h.get(server.base + "/metrics", timeout=10)
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(tally_[a-z_]+) ([0-9.e+-]+)$", r.text, re.MULTILINE)}


async def requests_in_flight(server: "HttpServer", at_least: int = 1):
    """Waits until the server counts `at_least` HTTP requests in flight (its
    `tally_requests_in_flight` gauge on `/metrics`): the event a test waits for before acting
    on a call it started, instead of sleeping and hoping the call has begun."""
    import httpx2

    async def in_flight():
        async with httpx2.AsyncClient() as h:
            r = await h.get(server.base + "/metrics", timeout=10)
        m = re.search(r"^tally_requests_in_flight (\d+)", r.text, re.MULTILINE)
        return m is not None and int(m.group(1)) >= at_least

    async def probe():
        # Seen twice 200 ms apart: a quick request of the same client (its `initialized`
        # notification) is answered within that; the long call is still in flight.
        if not await in_flight():
            return False
        await anyio.sleep(0.2)
        return await in_flight()

    await wait_for(f"{at_least} request(s) in flight", probe)


# ---- test accounting ---------------------------------------------------------------------
# Every test counts in the closing line of `.ci/run`, these too: the counts (and the skipped
# tests, with their reasons) are written to TALLY_PYTEST_REPORT when it is set. Under CI=true a
# skip fails the run unless `.ci/skips-allowed` names the test with why it may skip.

ALLOWED_SKIPS = ROOT / ".ci" / "skips-allowed"


def allowed_skips() -> set[str]:
    if not ALLOWED_SKIPS.is_file():
        return set()
    names = set()
    for line in ALLOWED_SKIPS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or "|" not in line:
            continue
        names.add(line.split("|", 1)[0].strip())
    return names


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    import json

    stats = terminalreporter.stats
    count = lambda key: len([r for r in stats.get(key, []) if getattr(r, "when", "call") in ("call", "setup")])
    skipped = []
    for report in stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        skipped.append({"test": report.nodeid, "reason": reason})
    unexplained = [s for s in skipped if s["test"] not in allowed_skips()]
    report = {
        "passed": count("passed"),
        "failed": count("failed"),
        "errors": count("error"),
        "skipped": len(skipped),
        "skipped_tests": skipped,
        "unexplained_skips": [s["test"] for s in unexplained],
    }
    path = os.environ.get("TALLY_PYTEST_REPORT")
    if path:
        Path(path).write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    if unexplained and os.environ.get("CI") == "true":
        terminalreporter.write_line(
            f"CI=true: {len(unexplained)} test(s) skipped that {ALLOWED_SKIPS.name} does not allow: "
            + ", ".join(s["test"] for s in unexplained),
            red=True,
        )


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("CI") != "true":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    allowed = allowed_skips()
    if any(r.nodeid not in allowed for r in skipped):
        session.exitstatus = 1
