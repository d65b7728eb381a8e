"""Datasets in object storage (`data: s3://bucket/prefix/`), against a local S3-compatible
server started here on 127.0.0.1: moto's, with its IAM checks on, so wrong credentials are
refused as a real store refuses them. Nothing leaves the loopback interface.

The real survey is uploaded as one object and as a Hive-partitioned tree (by ministry, written
by pyarrow: Parquet from another implementation); every answer must equal the one the same
data gives from local files. Then what goes wrong: wrong credentials, a missing bucket, an
object deleted under a registered version, and a store that stops answering, each a clear
error within the call deadline while the other datasets keep serving; and a changed object
seen by `--object-poll`, validated before it replaces the version served.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client

from conftest import REFERENCE, HttpServer, stop_process, wait_for

pytestmark = pytest.mark.anyio

SURVEY = REFERENCE / "procedures" / "procedures-survey-r6.parquet"
DEFINITION = REFERENCE / "procedures-survey-r6.dataset.yaml"
BUCKET = "tally-survey"
BOUND = 60.0


def need_reference():
    for p in (SURVEY, DEFINITION):
        if not p.is_file():
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true but the reference file {p} is missing")
            pytest.skip(f"the reference file {p} is not beside the repository")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3:
    """moto's S3 server on 127.0.0.1 with IAM authentication: the first three requests (made
    here, unsigned) create a user, its key and a policy; every request after must be signed
    with that key."""

    def __init__(self):
        import boto3

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the S3 server did not start")
                time.sleep(0.1)
        iam = boto3.client(
            "iam", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        iam.create_user(UserName="tally")
        key = iam.create_access_key(UserName="tally")["AccessKey"]
        iam.put_user_policy(
            UserName="tally",
            PolicyName="all",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
        self.key_id, self.secret = key["AccessKeyId"], key["SecretAccessKey"]
        self.client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.key_id,
            aws_secret_access_key=self.secret,
        )

    def env(self, secret: str | None = None) -> dict:
        """The server's environment: the usual AWS variables, pointing at this store."""
        return {
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": secret or self.secret,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def put(self, key: str, body: bytes, bucket: str = BUCKET):
        self.client.put_object(Bucket=bucket, Key=key, Body=body)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM
        stop_process(self.proc)


def partitioned_tree(out: Path) -> list[Path]:
    """The survey as a Hive-partitioned tree by ministry, as pyarrow writes it."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    table = pq.read_table(SURVEY)
    pads.write_dataset(
        table,
        out,
        format="parquet",
        partitioning=pads.partitioning(table.select(["所管府省庁"]).schema, flavor="hive"),
        existing_data_behavior="overwrite_or_ignore",
    )
    return sorted(p for p in out.rglob("*.parquet"))


def definition(data_line: str) -> str:
    """The published definition of the survey with its data named by `data_line`."""
    published = DEFINITION.read_text(encoding="utf-8").splitlines()
    return "\n".join([data_line] + [l for l in published if not l.startswith("data_file:")]) + "\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    need_reference()
    s3 = S3()
    s3.client.create_bucket(Bucket=BUCKET)
    s3.put("one/procedures-survey-r6.parquet", SURVEY.read_bytes())
    tree = tmp_path_factory.mktemp("tree") / "tree"
    files = partitioned_tree(tree)
    for f in files:
        s3.put("tree/" + f.relative_to(tree).as_posix(), f.read_bytes())
    s3.tree, s3.tree_files = tree, files
    yield s3
    s3.stop()


def datasets_with(tmp: Path, store: S3, extra: dict | None = None) -> Path:
    """Datasets: the survey from the store as one object and as a tree, the same two from
    local files, and a local dataset that has nothing to do with the store."""
    root = tmp / "datasets"
    folders = {
        "s3_one": definition(f"data: s3://{BUCKET}/one/procedures-survey-r6.parquet"),
        "s3_tree": definition(f"data: s3://{BUCKET}/tree/"),
        "local_one": definition("data_file: data.parquet"),
        "local_tree": definition("data_file: tree/"),
        **(extra or {}),
    }
    for name, text in folders.items():
        (root / name).mkdir(parents=True)
        (root / name / "dataset.yaml").write_text(text, encoding="utf-8")
    shutil.copyfile(SURVEY, root / "local_one" / "data.parquet")
    shutil.copytree(store.tree, root / "local_tree" / "tree")
    shutil.copytree(Path(__file__).resolve().parents[2] / "datasets" / "procedures", root / "procedures")
    return root


def body(result) -> dict:
    return json.loads(result.content[0].text)


async def ok(c, tool: str, args: dict) -> dict:
    r = await c.call_tool(tool, args)
    assert not r.is_error, body(r)
    return body(r)


CALLS = [
    ("summarize_records", {"group_by": ["所管府省庁"], "metrics": ["count", "sum:総手続件数"], "limit": 100}),
    ("summarize_records", {"group_by": ["手続類型"], "metrics": ["count", "avg:オンライン率"], "where": {"所管府省庁": ["デジタル庁", "総務省"]}}),
    ("summarize_records", {"metrics": ["count", "max:総手続件数", "min:総手続件数"], "where": {"総手続件数": {"$gte": 1000}}}),
    ("query_records", {"where": {"所管府省庁": ["総務省"]}, "select": ["手続ID", "手続名", "総手続件数"], "order_by": ["-総手続件数"], "limit": 20}),
    ("query_records", {"q": "届出", "select": ["手続ID", "手続名"], "limit": 30}),
]


def same_answers(a: dict, b: dict, what: str):
    for key in ("columns", "rows", "total", "total_group_count", "notes"):
        assert a["data"].get(key) == b["data"].get(key), f"{what}: `{key}` differs"


async def check_equal_to_local(c):
    for tool, args in CALLS:
        for remote, local in (("s3_one", "local_one"), ("s3_tree", "local_tree")):
            r = await ok(c, tool, {"dataset_id": remote, **args})
            l = await ok(c, tool, {"dataset_id": local, **args})
            same_answers(r, l, f"{tool} {args} on {remote}")


def object_source(envelope: dict) -> dict:
    [source] = [s for s in envelope["provenance"]["sources"] if s.get("objects")]
    return source


def extract_steps(envelope: dict) -> str:
    return " ".join(t["description"] for t in envelope["provenance"]["transformations"] if t["type"] == "extract")


async def test_answers_from_the_store_equal_those_from_local_files(tmp_path, store):
    datasets = datasets_with(tmp_path, store)
    server = HttpServer("--rate-limit", "100000", "--rate-burst", "100000", datasets=str(datasets), env=store.env())
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            listed = await ok(c, "list_datasets", {})
            counts = {d["dataset_id"]: d["record_count"] for d in listed["data"]["datasets"]}
            assert counts["s3_one"] == counts["s3_tree"] == counts["local_one"] == 75071, listed["data"]
            assert not listed["data"].get("broken_datasets"), listed["data"]["broken_datasets"]
            await check_equal_to_local(c)

            # Prepared from the whole objects: their bytes were hashed, and the answer says so.
            one = await ok(c, "summarize_records", {"dataset_id": "s3_one"})
            source = object_source(one)
            [obj] = source["objects"]
            assert obj["uri"] == f"s3://{BUCKET}/one/procedures-survey-r6.parquet"
            etag = store.client.head_object(Bucket=BUCKET, Key="one/procedures-survey-r6.parquet")["ETag"].strip('"')
            assert obj["etag"] == etag and obj["size"] == SURVEY.stat().st_size
            import hashlib

            digest = "sha256:" + hashlib.sha256(SURVEY.read_bytes()).hexdigest()
            assert obj["contentHash"] == digest and source["contentHash"] == digest
            assert f"ETag {etag}" in extract_steps(one) and "hashed" in extract_steps(one)

            tree = await ok(c, "summarize_records", {"dataset_id": "s3_tree", "where": {"所管府省庁": ["総務省"]}})
            source = object_source(tree)
            assert len(source["objects"]) == len(store.tree_files), "prepared once from every object"
            assert all(o["uri"].startswith(f"s3://{BUCKET}/tree/%E6%89%80%E7%AE%A1") for o in source["objects"])
            inspected = await ok(c, "inspect_dataset", {"dataset_id": "s3_tree"})
            assert f"s3://{BUCKET}/tree/" in json.dumps(inspected["data"], ensure_ascii=False)
    finally:
        server.stop()


async def test_streamed_from_the_store_by_byte_ranges(tmp_path, store):
    datasets = datasets_with(tmp_path, store)
    server = HttpServer(
        "--streaming", "always", "--rate-limit", "100000", "--rate-burst", "100000",
        datasets=str(datasets),
        # One `object request` line per request to the store.
        env={**store.env(), "TALLY_LOG": "warn,tally_storage::object=debug"},
    )
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            # Regression (issue 43): the first inspection read every object again for each
            # field, one object after another (1,584 ranged requests for the tree's 25
            # objects, 11.6 s against 3.6 s from local files). A call now reads each object's
            # chunks once, ahead, and its later scans take them from there.
            before = len(server.log)
            inspected = await ok(c, "inspect_dataset", {"dataset_id": "s3_tree", "detail": "full"})
            time.sleep(0.5)  # the log is read by a thread of its own
            requests = [line for line in list(server.log)[before:] if "object request" in line]
            assert len(server.log) < server.log.maxlen
            assert 0 < len(requests) <= 2 * len(store.tree_files), f"{len(requests)} requests to the store"
            local = await ok(c, "inspect_dataset", {"dataset_id": "local_tree", "detail": "full"})
            assert inspected["data"]["fields"] == local["data"]["fields"]
            assert inspected["data"]["quality_summary"] == local["data"]["quality_summary"]
            await check_equal_to_local(c)
            streamed = await ok(c, "summarize_records", {"dataset_id": "s3_tree", "group_by": ["所管府省庁"]})
            source = object_source(streamed)
            assert len(source["objects"]) == len(store.tree_files)
            assert "contentHash" not in source, "bytes read by ranges were not hashed: no hash is cited"
            assert all("contentHash" not in o and o["etag"] for o in source["objects"])
            steps = extract_steps(streamed)
            assert "read from the files at this call" in steps
            assert "not hashed" in steps and "If-Match" in steps, steps
            pruned = await ok(c, "summarize_records", {"dataset_id": "s3_tree", "where": {"所管府省庁": ["総務省"]}})
            [read] = object_source(pruned)["objects"]
            # pyarrow writes the value escaped (`%E7%B7%8F…` in the key); the URI escapes `%`.
            assert "%25E7%25B7%258F%25E5%258B%2599%25E7%259C%2581" in read["uri"], read["uri"]
            assert f"the other {len(store.tree_files) - 1} were not read" in extract_steps(pruned)
    finally:
        server.stop()


async def test_what_goes_wrong_is_said_and_the_rest_keeps_serving(tmp_path, store):
    store.client.create_bucket(Bucket="tally-changing")
    store.put("survey.parquet", SURVEY.read_bytes(), bucket="tally-changing")
    tree = sorted(store.tree_files)
    for f in tree:
        store.put("tree/" + f.relative_to(store.tree).as_posix(), f.read_bytes(), bucket="tally-changing")
    datasets = datasets_with(
        tmp_path,
        store,
        {
            "no_bucket": definition("data: s3://tally-no-such-bucket/survey/"),
            "no_key": definition(f"data: s3://{BUCKET}/nothing-here/"),
            "deleted": definition("data: s3://tally-changing/survey.parquet"),
            "thinned": definition("data: s3://tally-changing/tree/"),
        },
    )
    # Read at every call (never prepared), so each call asks the store.
    server = HttpServer(
        "--streaming", "always", "--object-poll", "off", "--rate-limit", "100000", "--rate-burst", "100000",
        datasets=str(datasets), env=store.env(),
    )
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            listed = await ok(c, "list_datasets", {})
            broken = {b["folder"]: b["problems"][0] for b in listed["data"]["broken_datasets"]}
            assert broken["no_bucket"]["key"] == "data"
            assert "tally-no-such-bucket" in broken["no_bucket"]["reason"] and "does not exist" in broken["no_bucket"]["reason"]
            assert "no Parquet object" in broken["no_key"]["reason"], broken["no_key"]
            r = await c.call_tool("summarize_records", {"dataset_id": "no_bucket"})
            assert r.is_error and "does not exist" in r.content[0].text

            # An object deleted under the registered version: the call lists again, and a
            # set without it answers from the objects left; a lone object is a clear error.
            # A count alone is answered from the footers registered; a sum reads the objects.
            reading = {"metrics": ["count", "sum:総手続件数"]}
            before = await ok(c, "summarize_records", {"dataset_id": "thinned", **reading})
            assert before["data"]["rows"][0][0] == 75071
            gone = tree[0].relative_to(store.tree).as_posix()
            store.client.delete_object(Bucket="tally-changing", Key="tree/" + gone)
            store.client.delete_object(Bucket="tally-changing", Key="survey.parquet")
            after = await ok(c, "summarize_records", {"dataset_id": "thinned", **reading})
            import pyarrow.parquet as pq

            assert after["data"]["rows"][0][0] == 75071 - pq.read_metadata(tree[0]).num_rows
            r = await c.call_tool("summarize_records", {"dataset_id": "deleted", **reading})
            assert r.is_error
            assert "survey.parquet" in r.content[0].text and "not in the store" in r.content[0].text, r.content[0].text

            # The store stops answering (stopped, not gone: connections hang): the call on it
            # fails, saying so, before the call deadline; local datasets answer meanwhile.
            os.kill(store.proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                r = await c.call_tool("summarize_records", {"dataset_id": "s3_tree", **reading})
                took = time.monotonic() - started
                print(f"a call on a store that stopped answering failed after {took:.1f} s: {r.content[0].text}")
                assert r.is_error
                text = r.content[0].text
                assert "did not answer" in text or "time budget" in text, text
                local = await ok(c, "summarize_records", {"dataset_id": "local_one"})
                assert local["data"]["rows"] == [[75071]]
                assert (await ok(c, "summarize_records", {"dataset_id": "procedures"}))["data"]["rows"]
            finally:
                os.kill(store.proc.pid, signal.SIGCONT)
            again = await ok(c, "summarize_records", {"dataset_id": "s3_one"})
            assert again["data"]["rows"] == [[75071]], "the store answers again: so does the dataset"
    finally:
        server.stop()


async def test_a_deleted_object_is_said_in_every_answer_and_as_a_deletion(tmp_path, store):
    """Regression (issue 43): an object deleted under a prepared dataset kept answering from
    the prepared copy, citing the deleted object's ETag with no warning (only
    list_datasets.broken_datasets knew); read at every call, a permanent deletion was reported
    as the dataset "being replaced … retry in a moment". Now every answer from the version
    whose object is gone says so (the object, since when, the version served), and a call
    that must read the deleted object is refused as a deletion, with what to do."""
    store.client.create_bucket(Bucket="tally-gone")
    store.put("survey.parquet", SURVEY.read_bytes(), bucket="tally-gone")
    datasets = datasets_with(tmp_path, store, {"gone": definition("data: s3://tally-gone/survey.parquet")})
    url = "s3://tally-gone/survey.parquet"
    calls = [
        ("summarize_records", {"dataset_id": "gone", "group_by": ["手続類型"]}),
        ("query_records", {"dataset_id": "gone", "limit": 2}),
        ("inspect_dataset", {"dataset_id": "gone"}),
    ]
    # Prepared (the default): the copy answers, and says its source is gone.
    server = HttpServer(
        "--object-poll", "500ms", "--rate-limit", "100000", "--rate-burst", "100000",
        datasets=str(datasets), env=store.env(),
    )
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            before = {tool: await ok(c, tool, args) for tool, args in calls}
            for tool, answer in before.items():
                assert not [w for w in answer["provenance"]["warnings"] if "deleted" in w], (tool, answer["provenance"]["warnings"])
            store.client.delete_object(Bucket="tally-gone", Key="survey.parquet")

            async def noticed():
                listed = await ok(c, "list_datasets", {})
                return [b for b in listed["data"]["broken_datasets"] if b["folder"] == "gone"]

            [broken] = await wait_for("the deletion is noticed", noticed, BOUND)
            print("broken:", broken)
            for tool, args in calls:
                after = await ok(c, tool, args)
                said = [w for w in after["provenance"]["warnings"] if url in w]
                assert said, (tool, after["provenance"]["warnings"])
                assert "no longer" in said[0] and "deleted" in said[0], said
                assert before[tool]["provenance"]["sources"][0]["datasetVersion"] in said[0], said
                assert after["provenance"]["sources"][0]["datasetVersion"] == before[tool]["provenance"]["sources"][0]["datasetVersion"]
                if tool != "inspect_dataset":
                    assert after["data"]["rows"] == before[tool]["data"]["rows"]
    finally:
        server.stop()

    # Read at every call: the object must be read, and is gone for good.
    store.put("survey.parquet", SURVEY.read_bytes(), bucket="tally-gone")
    server = HttpServer(
        "--streaming", "always", "--object-poll", "off", "--rate-limit", "100000", "--rate-burst", "100000",
        datasets=str(datasets), env=store.env(),
    )
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            await ok(c, "summarize_records", {"dataset_id": "gone", "metrics": ["count", "sum:総手続件数"]})
            store.client.delete_object(Bucket="tally-gone", Key="survey.parquet")
            r = await c.call_tool("summarize_records", {"dataset_id": "gone", "metrics": ["count", "sum:総手続件数"]})
            assert r.is_error
            error = body(r)["error"]
            print("read at every call:", error)
            assert error["code"] != "dataset_changing", error
            assert "deleted" in error["message"] and url in error["message"], error
            assert "retry" not in error.get("hint", ""), error
    finally:
        server.stop()


async def test_wrong_credentials_are_refused_with_what_to_do(tmp_path, store):
    datasets = datasets_with(tmp_path, store)
    server = HttpServer(datasets=str(datasets), env=store.env(secret="not-the-secret"))
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            listed = await ok(c, "list_datasets", {})
            broken = {b["folder"]: b["problems"][0] for b in listed["data"]["broken_datasets"]}
            for name in ("s3_one", "s3_tree"):
                assert "refused access" in broken[name]["reason"], broken[name]
                assert "HTTP 403" in broken[name]["reason"], broken[name]
                assert "AWS_SECRET_ACCESS_KEY" in broken[name]["fix"]
                assert "not-the-secret" not in json.dumps(broken[name])
            r = await c.call_tool("query_records", {"dataset_id": "s3_one"})
            assert r.is_error and "refused access" in r.content[0].text
            local = await ok(c, "summarize_records", {"dataset_id": "local_tree"})
            assert local["data"]["rows"] == [[75071]]
    finally:
        server.stop()


async def test_a_changed_object_is_seen_by_polling_and_validated_first(tmp_path, store):
    import pyarrow.parquet as pq

    store.client.create_bucket(Bucket="tally-reload")
    store.put("survey.parquet", SURVEY.read_bytes(), bucket="tally-reload")
    datasets = datasets_with(tmp_path, store, {"moving": definition("data: s3://tally-reload/survey.parquet")})
    server = HttpServer(
        "--object-poll", "500ms", "--rate-limit", "100000", "--rate-burst", "100000",
        datasets=str(datasets), env=store.env(),
    )
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            first = await ok(c, "summarize_records", {"dataset_id": "moving"})
            assert first["data"]["rows"] == [[75071]]
            # Not Parquet: refused, and the version registered keeps serving.
            store.put("survey.parquet", b"id,name\n1,x\n", bucket="tally-reload")

            async def refused():
                listed = await ok(c, "list_datasets", {})
                return [b for b in listed["data"]["broken_datasets"] if b["folder"] == "moving"]

            [broken] = await wait_for("a bad object is refused", refused, BOUND)
            assert broken["serving_version"] and "Parquet" in broken["problems"][0]["reason"], broken
            still = await c.call_tool("summarize_records", {"dataset_id": "moving"})
            # The registered version's bytes are gone from the store: a clear error, never
            # the new bytes under the old version's name.
            if still.is_error:
                assert "changed" in still.content[0].text or "replaced" in still.content[0].text
            # A valid new version replaces it: the first thousand records.
            head = tmp_path / "head.parquet"
            pq.write_table(pq.read_table(SURVEY).slice(0, 1000), head)
            store.put("survey.parquet", head.read_bytes(), bucket="tally-reload")

            async def replaced():
                r = await c.call_tool("summarize_records", {"dataset_id": "moving"})
                return not r.is_error and body(r)["data"]["rows"] == [[1000]]

            await wait_for("the new object is served", replaced, BOUND)
            listed = await ok(c, "list_datasets", {})
            assert not [b for b in listed["data"]["broken_datasets"] if b["folder"] == "moving"]
    finally:
        server.stop()


def test_check_reads_object_datasets_from_the_command_line(tmp_path, store):
    from conftest import tally_bin

    datasets = datasets_with(tmp_path, store, {"no_bucket": definition("data: s3://tally-no-such-bucket/x/")})
    env = {**os.environ, **store.env()}
    p = subprocess.run([tally_bin(), "check", str(datasets)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no_bucket" in p.stdout and "does not exist" in p.stdout, p.stdout
    assert "s3_tree" not in p.stdout.split("no_bucket")[0] or "valid" in p.stdout
    q = subprocess.run(
        [tally_bin(), "summarize", "s3_one", "--group-by", "オンライン化の実施状況", "--datasets", str(datasets)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert q.returncode == 0, q.stderr
    out = json.loads(q.stdout)
    assert out["provenance"]["sources"][0]["objects"][0]["uri"].startswith("s3://")
    # Without credentials nothing is asked of the network, and the error says what to set.
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    n = subprocess.run(
        [tally_bin(), "summarize", "s3_one", "--datasets", str(datasets)],
        capture_output=True, text=True, env={**bare, "HOME": str(tmp_path)}, timeout=120,
    )
    assert n.returncode != 0
    assert "no credentials" in n.stderr and "AWS_PROFILE" in n.stderr, n.stderr


class Forwarder:
    """A TCP port on 127.0.0.1 that, once started, forwards every connection to the store:
    where the server is told the store is, before and after it comes up."""

    def __init__(self, port: int, target: int):
        import threading

        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self.target = target
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self):
        self.listener.close()


async def test_a_store_down_at_start_is_tried_again_at_every_poll(tmp_path, store):
    """The server starts before its store answers: the dataset is listed broken with the
    reason while local ones serve, and the first poll after the store comes up serves it."""
    port = free_port()
    root = tmp_path / "datasets"
    (root / "late").mkdir(parents=True)
    (root / "late" / "dataset.yaml").write_text(
        definition(f"data: s3://{BUCKET}/one/procedures-survey-r6.parquet"), encoding="utf-8"
    )
    shutil.copytree(Path(__file__).resolve().parents[2] / "datasets" / "procedures", root / "procedures")
    env = {**store.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    server = HttpServer("--object-poll", "500ms", datasets=str(root), env=env)
    forwarder = None
    try:
        async with Client(server.url, mode="legacy", cache=None) as c:
            listed = await ok(c, "list_datasets", {})
            [broken] = listed["data"]["broken_datasets"]
            assert broken["folder"] == "late" and "did not answer" in broken["problems"][0]["reason"], broken
            r = await c.call_tool("summarize_records", {"dataset_id": "late"})
            assert r.is_error and "did not answer" in r.content[0].text
            assert (await ok(c, "summarize_records", {"dataset_id": "procedures"}))["data"]["rows"]
            forwarder = Forwarder(port, store.port)

            async def served():
                r = await c.call_tool("summarize_records", {"dataset_id": "late"})
                return not r.is_error and body(r)["data"]["rows"] == [[75071]]

            await wait_for("the dataset is served once its store answers", served, BOUND)
    finally:
        server.stop()
        if forwarder:
            forwarder.stop()
