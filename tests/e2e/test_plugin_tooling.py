"""Plugin authoring as a third party does it, outside this workspace: `tally plugin new`
writes a project from the template into a temporary directory, `tally plugin build` builds
its component with cargo (release, wasm32-wasip2), `tally plugin test` runs it through the
sandbox on the example folder, and `tally serve` serves it to the Python MCP client. Then
`tally plugin test` on plugins that misbehave: every fault named with the plugin.

The build compiles the plugin's dependencies once into target/plugin-tooling (about a minute
on two cores, then cached); it runs offline, from the crates the workspace build fetched.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import ROOT, HttpServer, tally_bin, wait_for
from test_plugins import write_atomic

pytestmark = pytest.mark.anyio

WASM = Path(os.environ.get("TALLY_WASM_DIR", ""))
TIMEOUT = 120


def cargo_env() -> dict:
    env = {**os.environ, "CARGO_TARGET_DIR": str(ROOT / "target" / "plugin-tooling"), "CARGO_NET_OFFLINE": "true"}
    # A tally run by cargo test must not hand the outer build's settings to the plugin build.
    for var in ("CARGO_BUILD_TARGET", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "CARGO_ENCODED_RUSTFLAGS"):
        env.pop(var, None)
    return env


def tally(*args: str, cwd: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([tally_bin(), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=cargo_env())


async def test_a_new_plugin_builds_passes_its_test_and_is_served(tmp_path):
    # Made outside this repository, inside some other cargo workspace: the project is a
    # workspace of its own.
    assert ROOT not in tmp_path.resolve().parents
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "Cargo.toml").write_text('[workspace]\nmembers = []\nresolver = "3"\n')
    made = tally("plugin", "new", "my-lines", cwd=elsewhere)
    assert made.returncode == 0, made.stderr
    # Shared as a zip and unpacked somewhere else: it holds everything it builds from.
    archive = shutil.make_archive(str(tmp_path / "my-lines"), "zip", elsewhere, "my-lines")
    shutil.rmtree(elsewhere)
    shutil.unpack_archive(archive, tmp_path / "shared")
    project = tmp_path / "shared" / "my-lines"
    manifest = (project / "Cargo.toml").read_text()
    # Literal keys (nothing inherited), a component and a host library, a size-tuned release.
    assert ".workspace = true" not in manifest and "\n[workspace]\n" in manifest
    assert 'crate-type = ["cdylib", "rlib"]' in manifest and 'opt-level = "s"' in manifest
    # The plugin API crate this tally was built with, unpacked into the project; no file
    # names this repository.
    assert 'tally-plugin-api = { path = "vendor/tally-plugin-api", features = ["guest"] }' in manifest
    vendored = project / "vendor" / "tally-plugin-api"
    for source in [*(ROOT / "plugin-api" / "src").glob("*.rs"), *(ROOT / "plugin-api" / "wit").rglob("*.wit")]:
        copy = vendored / source.relative_to(ROOT / "plugin-api")
        assert copy.read_bytes() == source.read_bytes(), copy
    assert "workspace" not in (vendored / "Cargo.toml").read_text().split("\n", 2)[2]
    for path in project.rglob("*"):
        if path.is_file():
            assert str(ROOT) not in path.read_text(encoding="utf-8", errors="replace"), path

    built = tally("plugin", "build", str(project))
    assert built.returncode == 0, built.stderr[-4000:]
    print(built.stdout)
    wasm = Path(built.stdout.split("built ", 1)[1].split("\n", 1)[0].strip())
    assert wasm.name == "my_lines.wasm" and wasm.is_file()
    assert "plugin API 0.1.0" in built.stdout
    # A release build with the template's profile is small.
    assert wasm.stat().st_size < 2 * 1024 * 1024, wasm.stat().st_size

    # Built offline (CARGO_NET_OFFLINE), with its Cargo.lock resolved from the crates the
    # workspace build fetched: the plugin API's guest dependencies only.
    lock = (project / "Cargo.lock").read_text()
    assert 'name = "tally-plugin-api"' in lock and 'name = "datafusion"' not in lock

    tested = tally("plugin", "test", str(project), "--dataset", str(project / "example"))
    print(tested.stdout)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "passed every check" in tested.stdout and "warning" not in tested.stdout
    assert "hello.txt:1" in tested.stdout and "filter path = `hello.txt`" in tested.stdout

    # The definition checks of `tally check`, in the same words: an unquoted comma in a flow
    # mapping makes a key of its own (the template had this bug).
    comma = tmp_path / "comma" / "lines"
    shutil.copytree(project / "example", comma)
    yaml = comma / "dataset.yaml"
    yaml.write_text(yaml.read_text().replace('desc: "The line number, from 1"', "desc: The line number, from 1"))
    tested = tally("plugin", "test", str(wasm), "--dataset", str(comma))
    print(tested.stdout)
    [warned] = [line for line in tested.stdout.splitlines() if "warning" in line and "from 1" in line]
    assert "unknown key `from 1`" in warned
    assert tested.returncode == 0 and "passed every check, with 1 warning about dataset.yaml" in tested.stdout
    shutil.copyfile(wasm, comma / "my_lines.wasm")
    checked = tally("check", str(comma.parent))
    assert checked.returncode == 0, checked.stdout
    assert warned in checked.stdout.splitlines(), checked.stdout

    # Served as any dataset: the component copied into the folder its dataset.yaml names.
    datasets = tmp_path / "datasets"
    shutil.copytree(project / "example", datasets / "lines")
    shutil.copyfile(wasm, datasets / "lines" / "my_lines.wasm")
    server = HttpServer(datasets=str(datasets))
    try:
        with anyio.fail_after(TIMEOUT):
            async with Client(server.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
                r = await c.call_tool("query_records", {"dataset_id": "lines", "where": {"line": {"$gte": 2}}, "select": ["path", "line", "text"]})
                assert not r.is_error, r.content[0].text
                env = json.loads(r.content[0].text)
                assert env["data"]["rows"] == [["hello.txt", 2, "Every non-empty line is a row."], ["hello.txt", 4, "This one cites line 4."]]
                locators = {s.get("locator") for s in env["provenance"]["sources"]}
                assert {"hello.txt:2", "hello.txt:4"} <= locators, env["provenance"]["sources"]
                good = env["data"]["dataset_version"]

                # The author's next build cannot read the folder (it lists a subfolder that
                # is not there). Copied over the served one, it fails its probe scan: the
                # last good build keeps serving, and the broken list says why.
                lib = project / "src" / "lib.rs"
                lib.write_text(lib.read_text().replace(
                    'std::fs::read_dir(".")', '{ eprintln!("my-lines 0.2: listing texts/"); std::fs::read_dir("texts") }', 1
                ))
                rebuilt = tally("plugin", "build", str(project))
                assert rebuilt.returncode == 0, rebuilt.stderr[-4000:]
                write_atomic(datasets / "lines" / "my_lines.wasm", wasm.read_bytes())

                async def refused():
                    listed = json.loads((await c.call_tool("list_datasets", {})).content[0].text)["data"]
                    return [b for b in listed["broken_datasets"] if b["folder"] == "lines"]

                [broken] = await wait_for("the broken build refused", refused)
                print(json.dumps(broken, ensure_ascii=False))
                assert broken["serving_version"] == good
                reason = broken["problems"][0]["reason"]
                assert "the probe read of its data at registration failed" in reason and "could not list the dataset folder" in reason
                assert "it wrote to stderr: my-lines 0.2: listing texts/" in reason
                r = await c.call_tool("query_records", {"dataset_id": "lines", "select": ["path", "line"], "limit": 1})
                assert not r.is_error, r.content[0].text
                assert json.loads(r.content[0].text)["data"]["dataset_version"] == good
    finally:
        server.stop()


def hostile(stem: str) -> Path:
    path = WASM / f"{stem}.wasm"
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"TALLY_WASM_DIR has no {stem}.wasm")
        pytest.skip(f"TALLY_WASM_DIR has no {stem}.wasm (the cargo test wrapper sets it)")
    return path


FIELDS = "- {name: name, role: dim}\n- {name: n, role: attr, data_type: integer}\n"


@pytest.mark.parametrize(
    "case, component, mode, fields, said",
    [
        ("a panic", "tally_test_plugin_hostile", "trap", FIELDS,
         "plugin `hostile` 0.0.0 panicked while trying to scan: `hostile plugin: trap in the middle of a scan`"),
        ("a row source out of range", "tally_test_plugin_hostile", "bad-row-source", FIELDS,
         "plugin `hostile` 0.0.0, scan: row 3 names source 99, but there are 3 sources"),
        ("a column of another type", "tally_test_plugin_hostile", "wrong-type", FIELDS,
         "plugin `hostile` 0.0.0, scan: column `n` comes back as Arrow Utf8, but describe says integer"),
        ("a column missing from the output", "tally_test_plugin_hostile", "wrong-type", FIELDS,
         "plugin `hostile` 0.0.0, scan: column `name`, which describe lists, is missing from the rows"),
        ("a field the plugin does not produce", "tally_test_plugin_hostile", "ok", FIELDS + "- {name: extra, role: attr}\n",
         "field `extra` is not one of the columns plugin `hostile` 0.0.0 describes"),
        ("a field declared with another type", "tally_test_plugin_hostile", "ok", "- {name: name, role: dim, data_type: integer}\n",
         "field `name` is declared integer but the columns plugin `hostile` 0.0.0 describes has it as text"),
        ("another API version", "tally_test_plugin_wrong_version", "ok", FIELDS,
         "was built for plugin API 9.0.0, but this Tally speaks plugin API 0.1.0"),
    ],
)
def test_plugin_test_names_the_fault_and_the_plugin(tmp_path, case, component, mode, fields, said):
    folder = tmp_path / "h"
    folder.mkdir()
    (folder / "dataset.yaml").write_text(
        'title: H\nsource: {url: "https://example.org/"}\n'
        f"backend: {{kind: wasm, component: h.wasm, config: {{mode: {mode}}}}}\nfields:\n{fields}"
    )
    r = tally("plugin", "test", str(hostile(component)), "--dataset", str(folder), timeout=120)
    out = r.stdout + r.stderr
    print(case, "→", out)
    assert r.returncode == 1, out
    assert said in out
    # No advice a sandboxed plugin cannot follow, no Rust debug text.
    assert "RUST_BACKTRACE" not in out and "Some(" not in out
    if case == "a panic":
        # A scan that failed reports no rows it never read.
        assert "scan: failed after" in out and "scan: 0 rows" not in out, out


def test_plugin_test_writes_what_a_plugin_says_visibly(tmp_path):
    """`tally plugin test` printed a plugin's error and the end of its stderr with their raw ESC,
    BEL and CR (a plugin under test could rewrite its author's terminal); every control
    character of what a plugin says is now written visibly, its stderr's own lines kept."""
    from test_plugins import raw_controls

    folder = tmp_path / "h"
    folder.mkdir()
    (folder / "dataset.yaml").write_text(
        'title: H\nsource: {url: "https://example.org/"}\n'
        f"backend: {{kind: wasm, component: h.wasm, config: {{mode: controls}}}}\nfields:\n{FIELDS}"
    )
    r = tally("plugin", "test", str(hostile("tally_test_plugin_hostile")), "--dataset", str(folder), timeout=120)
    print(r.stdout)
    assert r.returncode == 1, r.stdout + r.stderr
    assert raw_controls(r.stdout) == [], r.stdout
    assert "Misbehaves on purpose \\u{1b}[5mblinking\\u{1b}[0m" in r.stdout
    assert "\\u{1b}]0;title\\u{7}bad\\r\\n2026-01-01T00:00:00Z ERROR forged from the error \\u{202e}desrever" in r.stdout
    assert "a bell \\u{7}, a return\\rover\n" in r.stdout


def test_the_built_in_plugins_pass_their_own_test(tmp_path):
    r = tally("plugin", "test", str(hostile("tally_plugin_documents")), "--dataset", str(ROOT / "datasets/guide"), timeout=120)
    print(r.stdout)
    assert r.returncode == 0 and "passed every check" in r.stdout, r.stdout + r.stderr
    # The law plugin over the reference e-Gov XML, with the definition of test_laws.py.
    from test_laws import LAWS_YAML, laws_dir

    laws = tmp_path / "laws"
    shutil.copytree(laws_dir(), laws / "xml")
    (laws / "dataset.yaml").write_text(LAWS_YAML, encoding="utf-8")
    r = tally("plugin", "test", str(hostile("tally_plugin_law")), "--dataset", str(laws), timeout=300)
    print(r.stdout)
    assert r.returncode == 0 and "passed every check" in r.stdout, r.stdout + r.stderr
    assert "第一条" in r.stdout


def test_a_missing_dataset_folder_is_a_setup_error(tmp_path):
    r = tally("plugin", "test", str(tmp_path), "--dataset", str(tmp_path / "nothing"), timeout=60)
    assert r.returncode == 5 and "has no dataset.yaml" in r.stderr
    r = tally("plugin", "new", "Bad Name", cwd=tmp_path, timeout=60)
    assert r.returncode == 1 and "lowercase" in r.stderr


def test_check_scan_finds_a_plugin_that_cannot_read(tmp_path):
    """`tally check` registers each plugin dataset as the server does, with its probe read of
    all its columns, so a wrong folder in a plugin's backend.config is found before a client
    finds it; `--scan` reads each plugin dataset as it is served, so a plugin that fails only
    on some reads is found
    too, with what it wrote to stderr."""
    datasets = tmp_path / "datasets"
    shutil.copytree(ROOT / "datasets" / "guide", datasets / "guide")
    yaml = datasets / "guide" / "dataset.yaml"
    yaml.write_text(yaml.read_text(encoding="utf-8").replace("folder: docs", "folder: no-such-folder"), encoding="utf-8")
    for flags in [(), ("--scan",)]:
        checked = tally("check", *flags, str(datasets), timeout=120)
        print(checked.stdout)
        assert checked.returncode == 1, checked.stdout
        assert "the probe read of its data at registration failed: plugin `documents`" in checked.stdout and "no-such-folder" in checked.stdout
    yaml.write_text(yaml.read_text(encoding="utf-8").replace("folder: no-such-folder", "folder: docs"), encoding="utf-8")
    late = datasets / "late"
    late.mkdir()
    shutil.copyfile(hostile("tally_test_plugin_hostile"), late / "h.wasm")
    (late / "dataset.yaml").write_text(
        'title: H\nsource: {url: "https://example.org/"}\n'
        "backend: {kind: wasm, component: h.wasm, config: {mode: late-error}}\nfields:\n" + FIELDS
    )
    plain = tally("check", str(datasets), timeout=120)
    assert plain.returncode == 0, plain.stdout
    scanned = tally("check", "--scan", str(datasets), timeout=120)
    print(scanned.stdout)
    assert scanned.returncode == 1, scanned.stdout
    # One line, with what the plugin wrote to stderr last.
    [line] = [line for line in scanned.stdout.splitlines() if line.startswith(f"{late / 'dataset.yaml'}: error")]
    assert "could not read part 2 of 3" in line and "part 2 of 3 is unreadable (bad header at byte 17)" in line, line
    assert "1 dataset(s) valid, 1 invalid" in scanned.stdout
    shutil.rmtree(late)
    # Columns a plugin produces that the definition leaves out are said (they are not served).
    hostile_folder = datasets / "h"
    hostile_folder.mkdir()
    shutil.copyfile(hostile("tally_test_plugin_hostile"), hostile_folder / "h.wasm")
    (hostile_folder / "dataset.yaml").write_text(
        'title: H\nsource: {url: "https://example.org/"}\n'
        "backend: {kind: wasm, component: h.wasm, config: {mode: ok}}\nfields:\n" + FIELDS
    )
    noted = tally("check", "--scan", str(datasets), timeout=120)
    assert noted.returncode == 0, noted.stdout
    assert "the plugin produces columns dataset.yaml does not declare, so they are not served: payload" in noted.stdout
