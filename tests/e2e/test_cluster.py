"""Calls whose physical work runs on an Apache Arrow Ballista cluster (`tally serve --cluster`):
a scheduler and two executors (`tally-scheduler`, `tally-executor`, built in this workspace)
started here as separate processes on 127.0.0.1.

The real survey over MCP through the cluster gives the answers one server gives alone; a
dataset in object storage is read by the executors themselves; a scheduler that is not there
at start is refused (or, when asked, the server computes alone and says so); a dataset whose
reads cannot leave the server says so in the extract step; and an executor killed in the
middle of a long query leaves either the right answer (Ballista runs the lost tasks again) or a
clear error within the call's deadline, and the server keeps serving.
"""

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from mcp import Client

from conftest import REFERENCE, ROOT, HttpServer, stop_process, tally_bin
from test_object_store import BUCKET, S3, body, definition, free_port, ok, partitioned_tree
from test_object_store import extract_steps as extract

pytestmark = pytest.mark.anyio

SURVEY = REFERENCE / "procedures" / "procedures-survey-r6.parquet"
DEFINITION = REFERENCE / "procedures-survey-r6.dataset.yaml"


def binary(name: str) -> str:
    path = ROOT / "target" / "debug" / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: build the workspace (cargo build --workspace) first")
    return str(path)


def need_cluster_client():
    """The tally binary must have the cluster client (`--features tally/cluster`, as the test
    command in README.md builds it)."""
    probe = subprocess.run(
        [tally_bin(), "list", "--cluster", "df://127.0.0.1:1"], capture_output=True, text=True, timeout=60
    )
    if "built without the cluster client" in probe.stderr:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but tally was built without the cluster client (--features tally/cluster)")
        pytest.skip("tally was built without the cluster client (cargo test --workspace --features tally/cluster)")


def need_reference():
    for p in (SURVEY, DEFINITION):
        if not p.is_file():
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true but the reference file {p} is missing")
            pytest.skip(f"the reference file {p} is not beside the repository")


class Log:
    """The lines a process writes to stderr, read in the background."""

    def __init__(self, proc: subprocess.Popen, name: str):
        self.lines: list[str] = []
        self.name = name
        self.seen = threading.Condition()

        def read():
            for line in proc.stderr:
                with self.seen:
                    self.lines.append(line)
                    self.seen.notify_all()
                if os.environ.get("TALLY_CLUSTER_LOGS"):
                    print(f"[{name}] {line}", end="")

        threading.Thread(target=read, daemon=True).start()

    def wait_for(self, pattern: str, count: int = 1, bound: float = 60.0) -> bool:
        deadline = time.monotonic() + bound
        with self.seen:
            while sum(1 for l in self.lines if re.search(pattern, l)) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.seen.wait(left)
        return True


class LocalCluster:
    """tally-scheduler and `executors` tally-executors on ports picked free."""

    def __init__(self, work: Path, executors: int = 2, env: dict | None = None):
        self.port = free_port()
        self.env = {**os.environ, "RUST_LOG": "warn,ballista=info", **(env or {})}
        self.scheduler = subprocess.Popen(
            [binary("tally-scheduler"), "--bind-port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self.env,
        )
        self.scheduler_log = Log(self.scheduler, "scheduler")
        assert self.scheduler_log.wait_for(r"listening on"), "the scheduler did not start"
        self.executors: list[subprocess.Popen] = []
        self.logs: list[Log] = []
        for i in range(executors):
            folder = work / f"executor-{i}"
            folder.mkdir(parents=True, exist_ok=True)
            proc = subprocess.Popen(
                [
                    binary("tally-executor"), "--scheduler-port", str(self.port),
                    "--bind-port", str(free_port()), "--bind-grpc-port", str(free_port()),
                    "--bind-health-port", str(free_port()), "--vcores", "2", "--work-dir", str(folder),
                ],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self.env,
            )
            self.executors.append(proc)
            self.logs.append(Log(proc, f"executor {i}"))
        assert self.scheduler_log.wait_for(r"register executor request", count=executors), (
            "the executors did not register with the scheduler"
        )

    @property
    def address(self) -> str:
        return f"df://127.0.0.1:{self.port}"

    def kill(self, i: int):
        self.executors[i].send_signal(signal.SIGKILL)
        self.executors[i].wait()

    def stop(self):
        for p in [*self.executors, self.scheduler]:
            stop_process(p)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    need_cluster_client()
    c = LocalCluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def survey(tmp_path_factory) -> Path:
    need_reference()
    root = tmp_path_factory.mktemp("survey") / "datasets"
    (root / "survey").mkdir(parents=True)
    shutil.copyfile(SURVEY, root / "survey" / "data.parquet")
    shutil.copyfile(DEFINITION, root / "survey" / "dataset.yaml")
    # A dataset whose reads cannot be sent: the built-in documents plugin (wasm).
    shutil.copytree(ROOT / "datasets" / "guide", root / "guide")
    return root


def stdio(datasets: Path, *extra_args: str):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=tally_bin(),
        args=["serve", "--datasets", str(datasets), *extra_args],
        env={"TALLY_LOG": "warn", "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")},
    )


# Every kind of work the planner sends: grouping, codes, computed measures, multi-value parts
# (explode), folded substrings, numeric ranges, ordering, `having`, pages.
CALLS = [
    ("summarize_records", {"group_by": ["所管府省庁"], "metrics": ["count", "sum:総手続件数", "avg:オンライン率"], "limit": 100}),
    ("summarize_records", {"group_by": ["手続類型"], "metrics": ["count"], "where": {"オンライン化の実施状況": ["実施済"]}}),
    ("summarize_records", {"group_by": ["手続が行われるイベント(個人)"], "explode": ["手続が行われるイベント(個人)"], "metrics": ["count"], "limit": 50}),
    ("summarize_records", {"group_by": ["所管府省庁"], "metrics": ["count"], "having": {"count": {"$gte": 1000}}, "order_by": ["-count"]}),
    ("summarize_records", {"metrics": ["count", "max:総手続件数", "min:総手続件数"], "where": {"総手続件数": {"$gte": 1000}}}),
    ("query_records", {"where": {"所管府省庁": ["総務省"]}, "select": ["手続ID", "手続名", "総手続件数"], "order_by": ["-総手続件数"], "limit": 20}),
    ("query_records", {"q": "ＰＤＦ", "select": ["手続ID", "手続名"], "limit": 30}),
    ("query_records", {"where": {"手続名": {"$contains": "届出"}, "手続類型": {"$ne": "1 申請等"}}, "select": ["手続ID"], "limit": 10}),
]


def unsigned(data):
    """`data` with the signatures of cursors left out: each server signs with its own key."""
    if isinstance(data, dict):
        return {
            k: v.split(".")[0] if k in ("cursor", "next_cursor") and isinstance(v, str) else unsigned(v)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [unsigned(v) for v in data]
    return data


async def answers(c) -> list[dict]:
    out = []
    for tool, args in CALLS:
        out.append(await ok(c, tool, {"dataset_id": "survey", **args}))
    # The next page of the last query, by its cursor.
    first = out[-3]
    if first["data"].get("next_cursor"):
        out.append(await ok(c, "query_records", {"dataset_id": "survey", **CALLS[-3][1], "cursor": first["data"]["next_cursor"]}))
    return out


async def test_the_survey_through_the_cluster_answers_as_one_server(cluster, survey):
    async with Client(stdio(survey, "--streaming", "always"), mode="legacy", cache=None) as c:
        alone = await answers(c)
    async with Client(stdio(survey, "--cluster", cluster.address), mode="legacy", cache=None) as c:
        through = await answers(c)
    assert len(alone) == len(through) == len(CALLS) + 1
    for a, b, what in zip(alone, through, [*CALLS, "the next page"]):
        assert unsigned(a["data"]) == unsigned(b["data"]), f"{what}: the data differ"
        assert a["provenance"]["sources"] == b["provenance"]["sources"], f"{what}: the sources differ"
        said = extract(b)
        assert f"by the cluster at {cluster.address}" in said and "ran on its executors" in said, said
        assert re.search(r"ran on its executors in \d+ tasks?\b", said), said
        assert "computed on this server" not in said, said
        assert "by the cluster" not in extract(a)


async def test_over_http_a_dataset_that_cannot_be_sent_says_so(cluster, survey):
    server = HttpServer("--cluster", cluster.address, datasets=str(survey))
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            counted = await ok(c, "summarize_records", {"dataset_id": "survey", "group_by": ["手続類型"]})
            assert f"by the cluster at {cluster.address}" in extract(counted)
            guide = await ok(c, "query_records", {"dataset_id": "guide", "q": "tally", "limit": 3})
            said = extract(guide)
            assert "computed on this server" in said and cluster.address in said, said
            assert "a plugin's records are read by this server" in said, said
    finally:
        server.stop()


def test_a_scheduler_that_is_not_there_at_start(survey, tmp_path):
    need_cluster_client()
    nowhere = f"df://127.0.0.1:{free_port()}"
    started = time.monotonic()
    refused = subprocess.run(
        [tally_bin(), "serve", "--http", "127.0.0.1:0", "--datasets", str(survey), "--cluster", nowhere],
        capture_output=True, text=True, timeout=60,
    )
    print(f"refused in {time.monotonic() - started:.2f} s")
    assert refused.returncode == 5, refused.stderr
    assert nowhere in refused.stderr and "--cluster-fallback local" in refused.stderr, refused.stderr
    # The same from the command line.
    once = subprocess.run(
        [tally_bin(), "summarize", "survey", "--datasets", str(survey), "--cluster", nowhere],
        capture_output=True, text=True, timeout=60,
    )
    assert once.returncode == 5 and nowhere in once.stderr, once.stderr
    bad = subprocess.run(
        [tally_bin(), "summarize", "survey", "--datasets", str(survey), "--cluster", "127.0.0.1:50050"],
        capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 5 and "df://127.0.0.1:50050" in bad.stderr, bad.stderr


async def test_with_fallback_asked_a_server_computes_alone_and_says_so(survey):
    need_cluster_client()
    nowhere = f"df://127.0.0.1:{free_port()}"
    server = HttpServer("--cluster", nowhere, "--cluster-fallback", "local", datasets=str(survey))
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            counted = await ok(c, "summarize_records", {"dataset_id": "survey", "group_by": ["手続類型"]})
            said = extract(counted)
            assert "computed on this server, not on the cluster" in said and "(--cluster-fallback local)" in said, said
            assert nowhere in said, said
            assert sum(r[1] for r in counted["data"]["rows"]) == 75071
            # inspect_dataset and verify_answer say it too.
            inspected = await ok(c, "inspect_dataset", {"dataset_id": "survey"})
            said = extract(inspected)
            assert "computed on this server, not on the cluster" in said and "(--cluster-fallback local)" in said, said
            assert nowhere in said, said
            checked = await ok(c, "verify_answer", {"envelope": counted})
            assert checked["data"]["status"] == "identical", checked["data"]
            said = extract(checked)
            assert "the call run again" in said and "(--cluster-fallback local)" in said and nowhere in said, said
    finally:
        server.stop()


async def test_inspect_and_verify_through_the_cluster_say_where_they_ran(cluster, survey):
    """inspect_dataset sends its plans to the executors (its statistics, the values of each
    field) and says so, as query_records and summarize_records do; verify_answer says where
    the call it ran again ran. Its answer equals one server's. The deadline is raised: this
    test is about what the answer says, and a debug build's full inspection through a cluster
    on two cores takes 7-8 s quiet, past the default 10 s once the machine is busy (the speed
    is measured by tests/e2e/cluster_bench.py, not here)."""
    patient = ("--call-timeout-ms", "120000")
    async with Client(stdio(survey, "--streaming", "always", *patient), mode="legacy", cache=None) as c:
        started = time.monotonic()
        alone = await ok(c, "inspect_dataset", {"dataset_id": "survey", "detail": "full"})
        took_alone = time.monotonic() - started
    async with Client(stdio(survey, "--cluster", cluster.address, *patient), mode="legacy", cache=None) as c:
        started = time.monotonic()
        through = await ok(c, "inspect_dataset", {"dataset_id": "survey", "detail": "full"})
        took_through = time.monotonic() - started
        print(f"inspect_dataset of the survey: {took_alone:.2f} s on one server, {took_through:.2f} s through the cluster")
        assert through["data"]["fields"] == alone["data"]["fields"]
        said = extract(through)
        m = re.search(r"by the cluster at (\S+): (\d+) plans? ran on its executors in (\d+) tasks?", said)
        assert m and m.group(1) == cluster.address, said
        assert int(m.group(3)) >= int(m.group(2)), said
        print(f"inspect_dataset sent {m.group(2)} plans to the cluster, run in {m.group(3)} tasks")
        assert "computed on this server" not in said, said
        # Asked again, from the answer kept for this version: still said.
        again = await ok(c, "inspect_dataset", {"dataset_id": "survey"})
        assert f"by the cluster at {cluster.address}" in extract(again)
        counted = await ok(c, "summarize_records", {"dataset_id": "survey", "group_by": ["手続類型"]})
        checked = await ok(c, "verify_answer", {"envelope": counted})
        assert checked["data"]["status"] == "identical", checked["data"]
        said = extract(checked)
        assert f"the call run again: read 75071 records" in said and f"by the cluster at {cluster.address}" in said, said
    assert "by the cluster" not in extract(alone)


async def test_cite_provisions_says_where_each_read_ran(cluster, survey, tmp_path):
    """cite_provisions reads the survey's records on the cluster and the linked laws (a
    plugin's records) on the server: each read step says which; with the scheduler missing and
    the fallback asked, both say they were computed on the server."""
    if not (REFERENCE / "laws").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the reference laws are missing")
        pytest.skip("the reference laws are not beside the repository")
    root = tmp_path / "datasets"
    (root / "survey").mkdir(parents=True)
    link = "links: [{to: laws, on: {法令番号: law_num, 根拠条項号: locator}}]\n"
    (root / "survey" / "dataset.yaml").write_text(link + DEFINITION.read_text(encoding="utf-8"), encoding="utf-8")
    shutil.copyfile(SURVEY, root / "survey" / "data.parquet")
    (root / "laws" / "xml").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples" / "laws" / "dataset.yaml", root / "laws" / "dataset.yaml")
    for p in (REFERENCE / "laws").glob("*.xml"):
        shutil.copyfile(p, root / "laws" / "xml" / p.name)
    args = {"dataset_id": "survey", "where": {"法令名": ["行政手続法"]}, "limit": 20}
    nowhere = f"df://127.0.0.1:{free_port()}"
    async with Client(stdio(root, "--cluster", cluster.address), mode="legacy", cache=None) as c:
        through = await ok(c, "cite_provisions", args)
    async with Client(stdio(root, "--cluster", nowhere, "--cluster-fallback", "local"), mode="legacy", cache=None) as c:
        fallback = await ok(c, "cite_provisions", args)
    assert unsigned(through["data"]) == unsigned(fallback["data"])
    steps = [t["description"] for t in through["provenance"]["transformations"] if t["type"] == "extract"]
    [records] = [s for s in steps if "dataset `survey`" in s]
    [laws] = [s for s in steps if "dataset `laws`" in s]
    assert f"by the cluster at {cluster.address}" in records and "ran on its executors" in records, records
    assert f"computed on this server, not on the cluster at {cluster.address}" in laws, laws
    said = extract(fallback)
    assert said.count(f"computed on this server, not on the cluster at {nowhere}") == 2, said
    assert "(--cluster-fallback local)" in said, said


# A `Debug` dump of a Rust error chain left in a message (`DataFusionError(Shared(…`,
# `Backend { dataset: … }`): no answer may hold one.
DEBUG_DUMP = re.compile(r"\b[A-Z][A-Za-z]*(Error)?\((?:[A-Z][A-Za-z]*\(|\\?\")|\b[A-Z][A-Za-z]* \{ [a-z_]+: ")


def readable(message: str):
    assert not DEBUG_DUMP.search(message), f"a Debug dump reached the client: {message}"


def small_dataset(folder: Path, rows: int, version: str) -> Path:
    """A dataset of `rows` records; `version` goes in the file's key-value metadata, so two
    versions of the same rows are files of the same size with different footers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [f"r{i}" for i in range(rows)], "grp": [f"g{i % 3}" for i in range(rows)]})
    pq.write_table(table.replace_schema_metadata({"version": version}), folder / "data.parquet")
    if (folder / "dataset.yaml").exists():
        return folder / "data.parquet"
    (folder / "dataset.yaml").write_text(
        'schema_version: "1"\ntitle: Moving\nid_field: id\nfields:\n'
        "  - {name: id, role: id, data_type: string}\n  - {name: grp, role: dim, data_type: string}\n",
        encoding="utf-8",
    )
    return folder / "data.parquet"


async def test_a_file_replaced_under_the_cluster_is_dataset_changing(cluster, tmp_path):
    """A local file replaced between registration and a call: the executors refuse the new
    bytes, and the server hears it as its own error (dataset_changing naming the file), not as
    a dump of the executor's error. The server reads the folder again and retries, as alone:
    a replacement it sees is answered from the new version; one it cannot see (the same size
    and modification time, another footer) is refused as dataset_changing."""
    datasets = tmp_path / "datasets"
    data = small_dataset(datasets / "moving", 30, "1")
    # No watcher event in time: the replacement is met by the executors first.
    server = HttpServer("--cluster", cluster.address, "--watch", "poll", "--poll-interval-ms", "3600000", datasets=str(datasets))
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            first = await ok(c, "summarize_records", {"dataset_id": "moving"})
            assert first["data"]["rows"] == [[30]]
            assert f"by the cluster at {cluster.address}" in extract(first)
            # The same rows with another footer, the size and time of the file kept.
            before = data.stat()
            small_dataset(datasets / "moving", 30, "2")
            assert data.stat().st_size == before.st_size
            os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
            r = await c.call_tool("summarize_records", {"dataset_id": "moving"})
            assert r.is_error, "an answer from another version of a file than the one registered"
            error = body(r)["error"]
            print(f"a file replaced unseen: {error['message']}")
            assert error["code"] == "dataset_changing", error
            assert "`data.parquet`" in error["message"] and "moving" in error["message"], error
            assert cluster.address in error["message"], error
            readable(r.content[0].text)
            # A replacement the server sees when it reads the folder again: answered from the
            # new version, as one server answers.
            small_dataset(datasets / "moving", 45, "3")
            again = await ok(c, "summarize_records", {"dataset_id": "moving"})
            assert again["data"]["rows"] == [[45]]
            assert f"by the cluster at {cluster.address}" in extract(again)
    finally:
        server.stop()


def big_dataset(root: Path, rows: int) -> tuple[Path, int]:
    """A dataset of `rows` records (written by pyarrow, in many row groups) and how many of
    them hold `needle` in `text`: a folded substring search over all of them is long enough to
    kill an executor in the middle of it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / "big"
    folder.mkdir(parents=True)
    words = ["届出", "申請", "登録", "報告", "交付", "認定", "許可", "変更"]
    text = [f"{words[i % 8]}の手続 {i} {words[(i * 7) % 8]}" for i in range(rows)]
    table = pa.table({
        "id": pa.array([f"r{i}" for i in range(rows)]),
        "grp": pa.array([f"g{i % 40}" for i in range(rows)]),
        "text": pa.array(text),
        "n": pa.array([i % 1000 for i in range(rows)], type=pa.int64()),
    })
    pq.write_table(table, folder / "data.parquet", row_group_size=100_000)
    (folder / "dataset.yaml").write_text(
        "\n".join([
            'schema_version: "1"',
            "title: Many records",
            "id_field: id",
            "fields:",
            "  - {name: id, role: id, data_type: string}",
            "  - {name: grp, role: dim, data_type: string}",
            "  - {name: text, role: attr, data_type: string}",
            "  - {name: n, role: measure, data_type: integer}",
        ]) + "\n",
        encoding="utf-8",
    )
    hits = sum(1 for t in text if "報告" in t)
    return folder, hits


async def test_an_executor_killed_in_the_middle_of_a_long_query(tmp_path):
    need_cluster_client()
    datasets = tmp_path / "datasets"
    _, hits = big_dataset(datasets, 2_000_000)
    c_ = LocalCluster(tmp_path / "cluster")
    deadline_ms = 60_000
    server = HttpServer("--cluster", c_.address, "--call-timeout-ms", str(deadline_ms), datasets=str(datasets))
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            killed = threading.Event()

            def kill_when_busy():
                # The first task executor 0 runs: kill it there, mid-query.
                if c_.logs[0].wait_for(r"Execute task", bound=120):
                    c_.kill(0)
                    killed.set()

            threading.Thread(target=kill_when_busy, daemon=True).start()
            started = time.monotonic()
            r = await c.call_tool("summarize_records", {"dataset_id": "big", "where": {"text": "報告"}, "group_by": ["grp"]})
            took = time.monotonic() - started
            print(f"the call with an executor killed: {took:.2f} s, error={r.is_error}")
            assert killed.is_set(), "executor 0 was never given a task"
            assert took < deadline_ms / 1000 + 5, "the call ended within its deadline"
            if r.is_error:
                # Failing is allowed, clearly: it names the cluster and what went wrong.
                message = r.content[0].text
                assert c_.address in message or "time budget" in message, message
            else:
                got = body(r)
                assert sum(row[1] for row in got["data"]["rows"]) == hits, "the tasks run again count every record once"
                assert f"by the cluster at {c_.address}" in extract(got)
            # The server keeps serving, and the cluster with its other executor answers.
            again = await ok(c, "summarize_records", {"dataset_id": "big", "metrics": ["count"]})
            assert again["data"]["rows"] == [[2_000_000]]
    finally:
        server.stop()
        c_.stop()


async def test_a_call_past_its_deadline_cancels_its_job(tmp_path):
    """A call that stops waiting (its deadline) cancels its job at the scheduler: the
    executors do not go on working for nobody."""
    need_cluster_client()
    datasets = tmp_path / "datasets"
    big_dataset(datasets, 2_000_000)
    # One executor, whose search of 2M records takes it 1.3 s on two quiet cores (a debug
    # build), past the call's 1 s; the job is submitted within the first tenth of a second.
    # (Two executors and 1.5 s let the job end just as the deadline came: nothing to cancel.)
    c_ = LocalCluster(tmp_path / "cluster", executors=1)
    server = HttpServer("--cluster", c_.address, "--call-timeout-ms", "1000", datasets=str(datasets))
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            r = await c.call_tool("query_records", {"dataset_id": "big", "q": "報告", "limit": 1})
            assert r.is_error and "time budget" in r.content[0].text, r.content[0].text
        assert c_.scheduler_log.wait_for(r"Received cancellation request for job", bound=30), (
            "the job of the stopped call was not cancelled"
        )
        assert c_.scheduler_log.wait_for(r"Job cancelled", bound=30)
    finally:
        server.stop()
        c_.stop()


async def test_a_dataset_in_object_storage_is_read_by_the_executors(tmp_path, survey):
    """The executors read the objects with their own credentials, pinned to the ETags the
    server registered."""
    need_cluster_client()
    store = S3()
    try:
        store.client.create_bucket(Bucket=BUCKET)
        tree = tmp_path / "tree"
        for f in partitioned_tree(tree):
            store.put("tree/" + f.relative_to(tree).as_posix(), f.read_bytes())
        datasets = tmp_path / "datasets"
        (datasets / "s3_tree").mkdir(parents=True)
        (datasets / "s3_tree" / "dataset.yaml").write_text(definition(f"data: s3://{BUCKET}/tree/"), encoding="utf-8")
        shutil.copytree(survey / "survey", datasets / "survey")
        c_ = LocalCluster(tmp_path / "cluster", env=store.env())
        server = HttpServer("--cluster", c_.address, datasets=str(datasets), env=store.env())
        try:
            async with Client(server.url, mode="legacy", cache=None) as c:
                for tool, args in CALLS[:3]:
                    remote = await ok(c, tool, {"dataset_id": "s3_tree", **args})
                    local = await ok(c, tool, {"dataset_id": "survey", **args})
                    for key in ("columns", "rows", "total", "total_group_count"):
                        assert remote["data"].get(key) == local["data"].get(key), f"{tool} {args}: `{key}` differs"
                    said = extract(remote)
                    assert f"by the cluster at {c_.address}" in said and "computed on this server" not in said, said
                # An object replaced under the version the server registered: the executors
                # read it pinned to that version (its ETag), so they refuse the new one.
                import pyarrow.parquet as pq

                [first, *_] = sorted(tree.rglob("*.parquet"))
                rewritten = tmp_path / "rewritten.parquet"
                pq.write_table(pq.read_table(first), rewritten, compression="gzip")
                store.put("tree/" + first.relative_to(tree).as_posix(), rewritten.read_bytes())
                changed = await c.call_tool("summarize_records", {"dataset_id": "s3_tree", "group_by": ["手続類型"]})
                print(f"an object replaced under the cluster: {changed.content[0].text[:300]}")
                if changed.is_error:
                    message = changed.content[0].text
                    assert body(changed)["error"]["code"] == "dataset_changing", message
                    assert "s3_tree" in message and "changed" in message, message
                    readable(message)
                else:
                    # Heard as dataset_changing, the server listed the objects again and
                    # answered from their new version (the same rows, gzip-compressed).
                    assert sum(row[1] for row in body(changed)["data"]["rows"]) == 75071
                    assert f"by the cluster at {c_.address}" in extract(body(changed))
        finally:
            server.stop()
            c_.stop()
    finally:
        store.stop()


async def test_executors_without_credentials_are_named_not_the_server(tmp_path, survey):
    """The server's environment has the store's credentials, the executors' has none: the
    error says the executors lack them (their environment), as backend_failed in words."""
    need_cluster_client()
    store = S3()
    try:
        store.client.create_bucket(Bucket=BUCKET)
        store.put("one/survey.parquet", SURVEY.read_bytes())
        datasets = tmp_path / "datasets"
        (datasets / "s3_one").mkdir(parents=True)
        (datasets / "s3_one" / "dataset.yaml").write_text(definition(f"data: s3://{BUCKET}/one/survey.parquet"), encoding="utf-8")
        bare = {k: v for k, v in store.env().items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        c_ = LocalCluster(tmp_path / "cluster", env={**bare, "HOME": str(tmp_path)})
        server = HttpServer("--cluster", c_.address, datasets=str(datasets), env=store.env())
        try:
            async with Client(server.url, mode="legacy", cache=None) as c:
                r = await c.call_tool("summarize_records", {"dataset_id": "s3_one", "group_by": ["手続類型"]})
                assert r.is_error
                error = body(r)["error"]
                print(f"executors without credentials: {error['message']}")
                assert error["code"] == "backend_failed", error
                message = error["message"]
                assert "this executor's environment" in message and "tally-executor" in message, message
                assert "server's environment" not in message, message
                assert c_.address in message, message
                assert store.secret not in r.content[0].text
                readable(r.content[0].text)
        finally:
            server.stop()
            c_.stop()
    finally:
        store.stop()
