"""Tally and DuckDB side by side on one Parquet file of the survey's shape (issue 17's five
workloads and issue 39's `$contains` on one field, each returning its total), in one run. Prints Markdown tables
(docs/benchmarks.md keeps the figures).

    python3 tests/e2e/scale.py --bin target/release/tally --datasets DIR --dataset ID \\
        [--runs 5] [--duckdb-python PYTHON] [--files-only] [--no-duckdb] [--cold-start]

For Tally: a server started with an empty cache directory (its first answer: read from the
file at once when the dataset is large, while it is prepared into the cache in the
background), then, once an answer says the table is prepared, the workloads warm
(median of --runs after one warm-up); a second server on the kept entry (first answer
mapped); and a third with `--streaming always`, the workloads read from the file at
every call as DuckDB reads it. Memory from /proc (Linux): peak resident, and resident
anonymous and file-backed memory after the workloads. Talks JSON-RPC over stdio directly
(no SDK).

With --cold-start, first: a server with an empty cache and the default 10 s deadline, asked
the workloads one after another from its first second until a whole round is answered from
the prepared table; every call's time and path (read from the files, waited for the
preparation, prepared), and a run with a refused call fails.

For DuckDB: the same questions in SQL on the same file, in a process of its own (the
`duckdb` module of --duckdb-python), each run reading the Parquet file (DuckDB keeps no
prepared copy), with that process's peak resident memory.

With --as-task: the `q` workload read from the files (minutes at 75M rows) asked by a client
that declares the MCP tasks extension, with the call budget of --call-timeout-ms (10 s): it
must become a task, which is polled to its answer past the budget, printing what its status
said along the way; then the same call from a client that did not declare the extension,
which must end at its deadline with `limit_exceeded`.

With --files-only (data larger than the memory budget, such as 75M rows): one server with the
default settings and no cache, which must answer from the files at every call (checked), its
memory, and the workloads. --no-duckdb leaves DuckDB out (it takes minutes a query at
75M rows).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TEXT_SEARCH = "電子"
CONTAINS = "届出"
# How many searches a prepared table keeps (`SEARCHES_KEPT` in host/storage/src/dataset.rs).
SEARCHES_KEPT = 8

WORKLOADS = [
    (
        "summarize with a computed rate",
        {"group_by": ["所管府省庁"], "metrics": ["count", "avg:オンライン率"]},
        """SELECT 所管府省庁, count(*) AS n,
                  avg(CASE WHEN オンライン化の実施状況 = '1 実施済' THEN 1.0 ELSE 0.0 END) AS rate,
                  count(*) OVER () AS groups
           FROM t GROUP BY 1 ORDER BY n DESC, 1 LIMIT 200""",
    ),
    (
        "two dimensions with having",
        {"group_by": ["所管府省庁", "手続類型"], "metrics": ["count", "sum:総手続件数"], "having": {"count": {"$gt": 100}}},
        """SELECT 所管府省庁, 手続類型, count(*) AS n, sum(総手続件数) AS s, count(*) OVER () AS groups
           FROM t GROUP BY 1, 2 HAVING count(*) > 100 ORDER BY n DESC, 1, 2 LIMIT 200""",
    ),
    (
        "explode a multi-value field",
        {"group_by": ["手続が行われるイベント(個人)"], "metrics": ["count"]},
        """SELECT k, count(*) AS n, count(*) OVER () AS groups FROM (
             SELECT trim(unnest(string_split("手続が行われるイベント(個人)", ';'))) AS k FROM t
           ) WHERE k <> '' GROUP BY 1 ORDER BY n DESC, 1 LIMIT 200""",
    ),
    (
        f"q over all text (`{TEXT_SEARCH}`)",
        {"q": TEXT_SEARCH, "limit": 20},
        None,  # built from the text columns of the file
    ),
    (
        f"`$contains` on one field (手続名 `{CONTAINS}`)",
        {"where": {"手続名": {"$contains": CONTAINS}}, "limit": 20},
        f"""SELECT *, count(*) OVER () AS total FROM t
           WHERE lower(手続名) LIKE '%{CONTAINS}%' LIMIT 20""",
    ),
    (
        "filtered, ordered query",
        {"where": {"所管府省庁": ["国土交通省"], "総手続件数": {"$gt": 100}}, "order_by": ["-総手続件数"], "limit": 20},
        """SELECT *, count(*) OVER () AS total FROM t
           WHERE 所管府省庁 = '国土交通省' AND 総手続件数 > 100
           ORDER BY 総手続件数 DESC LIMIT 20""",
    ),
]

DUCKDB_RUNNER = r"""
import json, resource, statistics, sys, time
import duckdb
parquet, runs, queries = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{parquet}')")
out = []
for sql in queries:
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        rows = con.execute(sql).fetchall()
        times.append(time.perf_counter() - start)
    out.append({"first": times[0], "median": statistics.median(times[1:]), "total": rows[0][-1] if rows else 0})
print(json.dumps({"results": out, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


# What the extract step of an answer from the table this server prepared into the cache says
# (and nothing else does: an answer read from the files meanwhile says "read from the files …
# while the table was being prepared").
PREPARED_HERE = "prepared and kept in the cache"


def status(pid):
    fields = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) * 1024
    return fields


class Server:
    def __init__(self, binary, datasets, cache, extra=(), timeout_ms=600000, capabilities=None, prefix=()):
        """`prefix`: what runs the binary (`taskset -c 0` to pin it to a core)."""
        self.start = time.perf_counter()
        kept = ["--cache-dir", cache] if cache else ["--no-cache"]
        # The server's log, read for what preparing reported (the text index's size).
        self.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
        self.proc = subprocess.Popen(
            [*prefix, binary, "serve", "--datasets", datasets, "--call-timeout-ms", str(timeout_ms), "--watch", "off", *kept, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            encoding="utf-8",
        )
        self.next_id = 1
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities or {}, "clientInfo": {"name": "scale", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        id_ = self.next_id
        self.send({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("the server ended without answering")
            message = json.loads(line)
            if message.get("id") == id_:
                return message

    def answer(self, dataset, arguments):
        tool = "summarize_records" if "group_by" in arguments or "metrics" in arguments else "query_records"
        start = time.perf_counter()
        answer = self.request("tools/call", {"name": tool, "arguments": {"dataset_id": dataset, **arguments}})
        elapsed = time.perf_counter() - start
        result = answer.get("result", {})
        if result.get("isError") or "error" in answer:
            raise SystemExit(f"{tool} failed: {json.dumps(answer, ensure_ascii=False)[:600]}")
        return elapsed, result.get("structuredContent", {})

    def call(self, dataset, arguments):
        elapsed, content = self.answer(dataset, arguments)
        return elapsed, content.get("data", {})

    def extract(self, dataset, arguments):
        """How an answer's data was read (its extract step)."""
        _, content = self.answer(dataset, arguments)
        for t in content.get("provenance", {}).get("transformations", []):
            if t.get("type") == "extract" or t.get("description", "").startswith("read "):
                return t.get("description", "")
        return ""

    def stop(self):
        memory = status(self.proc.pid)
        self.proc.stdin.close()
        self.proc.wait(timeout=600)
        return memory

    def logged(self, key):
        """The last number the log gave for `key` (`key=123` in a log line), or None."""
        self.log.seek(0)
        found = None
        for line in self.log:
            m = re.search(rf"{key}\W{{0,3}}(\d+)", line)
            if m:
                found = int(m.group(1))
        return found


def extract_steps(content):
    """Every extract step of an answer, joined: how its data was read ("prepared in memory",
    "mapped from the cache", "read from the files at this call", "by the cluster at …")."""
    return " ".join(
        t.get("description", "") for t in content.get("provenance", {}).get("transformations", []) if t.get("type") == "extract"
    )


def must_say(label, content, phrase):
    """A figure is labelled with the path that produced it (prepared, read from the files, the
    cluster): an answer that was read otherwise ends the run instead of filling the wrong column."""
    said = extract_steps(content)
    if phrase not in said:
        sys.exit(f"{label}: expected the answer's extract step to say {phrase!r}, it says: {said or '(no extract step)'}")


def parquet_of(datasets, dataset):
    folder = os.path.join(datasets, dataset)
    name = "data.parquet"
    with open(os.path.join(folder, "dataset.yaml"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("data_file:"):
                name = line.split(":", 1)[1].strip().strip("\"'")
    return os.path.abspath(os.path.join(folder, name))


def text_columns(python, parquet):
    script = (
        "import duckdb, json, sys; "
        "print(json.dumps([r[0] for r in duckdb.sql(f\"DESCRIBE SELECT * FROM read_parquet('{sys.argv[1]}')\").fetchall() "
        "if r[1] == 'VARCHAR']))"
    )
    return json.loads(subprocess.run([python, "-c", script, parquet], capture_output=True, text=True, check=True).stdout)


def run_workloads(server, dataset, runs, said=None):
    """The median time and the total of each workload; with `said`, every answer's extract
    step must contain that phrase (checked, see `must_say`)."""
    out = []
    for label, arguments, _ in WORKLOADS:
        times = []
        for _ in range(runs + 1):
            elapsed, content = server.answer(dataset, arguments)
            if said is not None:
                must_say(label, content, said)
            data = content.get("data", {})
            times.append(elapsed)
        total = data.get("total", data.get("total_group_count"))
        out.append((statistics.median(times[1:]), total))
    return out


def cold_start(args, extra):
    """Issue 39: calls from the first second of a cold start (empty cache, the default 10 s
    deadline), the workloads in turn until a whole round is answered from the prepared table.
    Every call is timed and its path read from its extract step; a refused call is counted,
    never skipped."""
    cache = tempfile.mkdtemp(prefix="tally-scale-cold-")
    calls = []
    try:
        server = Server(args.bin, args.datasets, cache, extra, timeout_ms=10000)
        prepared_rounds = 0
        while prepared_rounds < 1:
            paths = []
            for label, arguments, _ in WORKLOADS:
                tool = "summarize_records" if "group_by" in arguments or "metrics" in arguments else "query_records"
                issued = time.perf_counter() - server.start
                answer = server.request("tools/call", {"name": tool, "arguments": {"dataset_id": args.dataset, **arguments}})
                took = time.perf_counter() - server.start - issued
                result = answer.get("result", {})
                content = result.get("structuredContent", {})
                said = extract_steps(content)
                if result.get("isError") or "error" in answer:
                    path = "refused: " + json.dumps(answer, ensure_ascii=False)[:300]
                elif "for the table's preparation" in said:
                    path = "waited"
                elif "read from the files" in said:
                    path = "files"
                elif PREPARED_HERE in said:
                    path = "prepared"
                else:
                    raise SystemExit(f"cold start: an answer that says no path: {said}")
                paths.append(path)
                calls.append((issued, took, label, path))
            if all(p == "prepared" for p in paths):
                prepared_rounds += 1
            if time.perf_counter() - server.start > 900:
                raise SystemExit("cold start: the table was not prepared within 15 minutes")
        memory = server.stop()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return calls, memory


def print_cold_start(calls, memory):
    refused = [c for c in calls if c[3].startswith("refused")]
    print(f"Cold start (empty cache, default 10 s deadline, calls issued one after another from the first second): "
          f"{len(calls)} calls, {len(refused)} refused, peak RSS {mib(memory.get('VmHWM', 0))}.")
    print()
    print("| path | calls | slowest | median |")
    print("|---|---|---|---|")
    for path in ("files", "waited", "prepared"):
        took = [c[1] for c in calls if c[3] == path]
        if took:
            print(f"| {path} | {len(took)} | {max(took):,.2f} s | {statistics.median(took):,.2f} s |")
    print()
    for issued, took, label, path in calls:
        if path != "prepared":
            print(f"- {issued:6.2f} s + {took:6.2f} s  {label}: {path}")
    print()
    for c in refused:
        print(f"REFUSED: {c}")
    if refused:
        raise SystemExit("a call was refused during the cold start")


def mib(n):
    return f"{n / (1 << 20):,.0f} MiB"


def serve_args(args):
    extra = ["--memory-budget", args.memory_budget] if args.memory_budget else []
    if args.max_explode_rows:
        extra += ["--max-explode-rows", args.max_explode_rows]
    return extra


def files_only(args):
    """Data over the memory budget, no cache: every call reads the files (checked), and memory
    must stay bounded."""
    extra = serve_args(args)
    server = Server(args.bin, args.datasets, None, extra)
    server.call(args.dataset, WORKLOADS[0][1])
    first = time.perf_counter() - server.start
    said = server.extract(args.dataset, WORKLOADS[0][1])
    if "read from the files" not in said:
        raise SystemExit(f"expected the data to be read from its files, the extract step says: {said}")
    tally = run_workloads(server, args.dataset, args.runs, said="read from the files")
    said_last = server.extract(args.dataset, WORKLOADS[0][1])
    if "read from the files" not in said_last:
        raise SystemExit(f"the data was prepared after all: {said_last}")
    memory = server.stop()
    duck = None
    if not args.no_duckdb:
        duck = duckdb_figures(args)
    size = os.path.getsize(parquet_of(args.datasets, args.dataset))
    print(f"Parquet: {size / 1e6:,.0f} MB; runs: {args.runs} after one warm-up; no cache")
    print(f"Extract step: {said}")
    print()
    print(f"First answer {first:.2f} s after the start; peak RSS {mib(memory.get('VmHWM', 0))}, "
          f"anonymous after {mib(memory.get('RssAnon', 0))}, file-backed after {mib(memory.get('RssFile', 0))}")
    print()
    print("| workload | Tally read from the files (median) | DuckDB first / median | ratio | totals: Tally / DuckDB |")
    print("|---|---|---|---|---|")
    for i, ((label, _, _), (median, total)) in enumerate(zip(WORKLOADS, tally)):
        if duck:
            d = duck["results"][i]
            print(f"| {label} | {median * 1000:,.1f} ms | {d['first'] * 1000:,.1f} / {d['median'] * 1000:,.1f} ms | {median / d['median']:.2f} | {total} / {d['total']} |")
        else:
            print(f"| {label} | {median * 1000:,.1f} ms | | | {total} |")
    if duck:
        print()
        print(f"DuckDB process peak RSS: {mib(duck['peak'])}")
        totals_agree([
            (label, [("Tally read from the files", total), ("DuckDB", duck["results"][i]["total"])])
            for i, ((label, _, _), (_, total)) in enumerate(zip(WORKLOADS, tally))
        ])


TASKS = "io.modelcontextprotocol/tasks"


def as_task(args):
    """A call past the call budget as an MCP task, and the same call without opting in."""
    extra = serve_args(args)
    arguments = {"dataset_id": args.dataset, "q": TEXT_SEARCH, "limit": 20}
    call = {"name": "query_records", "arguments": arguments}
    budget_ms = args.call_timeout_ms
    server = Server(args.bin, args.datasets, None, extra, timeout_ms=budget_ms, capabilities={"extensions": {TASKS: {}}})
    began = time.perf_counter()
    created = server.request("tools/call", call).get("result", {})
    if created.get("resultType") != "task":
        raise SystemExit(f"the call did not become a task: {json.dumps(created, ensure_ascii=False)[:600]}")
    print(f"Call budget {budget_ms} ms. Task created in {(time.perf_counter() - began) * 1000:.0f} ms: {created.get('statusMessage')}")
    last_print = -10.0
    while True:
        got = server.request("tasks/get", {"taskId": created["taskId"]}).get("result", {})
        elapsed = time.perf_counter() - began
        if got.get("status") not in ("working", "input_required") or elapsed - last_print >= 5:
            last_print = elapsed
            print(f"  {elapsed:7.1f} s  {got.get('status')}: {got.get('statusMessage')}")
        if got.get("status") not in ("working", "input_required"):
            break
        time.sleep(got.get("pollIntervalMs", 500) / 1000)
    took = time.perf_counter() - began
    if got.get("status") != "completed" or got["result"].get("isError"):
        raise SystemExit(f"the task did not answer: {json.dumps(got, ensure_ascii=False)[:800]}")
    total = got["result"]["structuredContent"]["data"]["total"]
    memory = server.stop()
    print(f"Answered as a task in {took:.1f} s ({took * 1000 / budget_ms:.1f}× the call budget): total {total}; peak RSS {mib(memory.get('VmHWM', 0))}")
    plain = Server(args.bin, args.datasets, None, extra, timeout_ms=budget_ms)
    began = time.perf_counter()
    answer = plain.request("tools/call", call).get("result", {})
    took = time.perf_counter() - began
    plain.stop()
    if "taskId" in answer:
        raise SystemExit("a client that did not declare the extension was given a task")
    if answer.get("isError"):
        refusal = json.loads(answer["content"][0]["text"])["error"]
        print(f"Without the extension: {refusal['code']} after {took:.1f} s: {refusal['message']}")
    else:
        # A dataset being prepared is waited for rather than refused (issue 39): data that
        # fits the memory budget is answered, past the deadline, once it is prepared.
        print(f"Without the extension: answered in {took:.1f} s (the call waited for the dataset's preparation)")


def totals_agree(rows):
    """The figures compare the same work only if every path answered with the same total: a
    disagreement ends the run with an error instead of a table that reads as a comparison.
    `rows`: (workload, [(path, total), …])."""
    wrong = [
        f"{label}: " + ", ".join(f"{path} {total}" for path, total in totals)
        for label, totals in rows
        if len({total for _, total in totals}) != 1
    ]
    if wrong:
        sys.exit("the totals disagree, so these times do not compare the same work:\n" + "\n".join(wrong))
    print(f"totals agree on all {len(rows)} workloads")


def duckdb_figures(args):
    """The workloads in DuckDB, in a process of its own."""
    parquet = parquet_of(args.datasets, args.dataset)
    text = text_columns(args.duckdb_python, parquet)
    joined = ", ".join(f'coalesce("{c}", \'\')' for c in text)
    q_sql = f"""SELECT *, count(*) OVER () AS total FROM t
                WHERE lower(concat_ws(chr(31), {joined})) LIKE '%{TEXT_SEARCH}%' LIMIT 20"""
    queries = [sql or q_sql for _, _, sql in WORKLOADS]
    ran = subprocess.run(
        [args.duckdb_python, "-c", DUCKDB_RUNNER, parquet, str(args.runs), json.dumps(queries)],
        capture_output=True,
        text=True,
    )
    if ran.returncode != 0:
        raise SystemExit(f"DuckDB failed: {ran.stderr[-2000:]}")
    return json.loads(ran.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/tally")
    ap.add_argument("--datasets", default="datasets")
    ap.add_argument("--dataset", default="procedures")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duckdb-python", default=sys.executable)
    ap.add_argument("--memory-budget", help="passed to tally serve (MiB)")
    ap.add_argument("--max-explode-rows", help="passed to tally serve (at 75M rows, exploding one field makes more rows than the default cap)")
    ap.add_argument(
        "--files-only",
        action="store_true",
        help="only a server with the default settings, which must read the data from its files "
        "at every call (data over the memory budget, e.g. 75M rows); no cache is kept",
    )
    ap.add_argument("--no-duckdb", action="store_true", help="Tally's figures only")
    ap.add_argument("--skip-q", action="store_true", help="leave out the `q` workload (minutes a call for DuckDB at 75M rows)")
    ap.add_argument(
        "--cold-start",
        action="store_true",
        help="first, calls from the first second of a cold start with the default deadline, until the table is prepared: every call's time and path, and none refused",
    )
    ap.add_argument("--as-task", action="store_true", help="the `q` workload read from the files as an MCP task past the call budget, and the same call without opting in (see above)")
    ap.add_argument("--call-timeout-ms", type=int, default=10000, help="the call budget of --as-task")
    args = ap.parse_args()
    if args.as_task:
        as_task(args)
        return
    if args.skip_q:
        WORKLOADS[:] = [w for w in WORKLOADS if w[2] is not None]
    if args.files_only:
        files_only(args)
        return

    parquet = parquet_of(args.datasets, args.dataset)
    cold = cold_start(args, serve_args(args)) if args.cold_start else None
    cache = tempfile.mkdtemp(prefix="tally-scale-cache-")
    try:
        extra = serve_args(args)
        server = Server(args.bin, args.datasets, cache, extra)
        first_time, _ = server.call(args.dataset, WORKLOADS[0][1])
        cold_first = time.perf_counter() - server.start
        # Until the table is prepared (a large dataset is read from its file meanwhile, and
        # an answer says "while the table was being prepared").
        while PREPARED_HERE not in server.extract(args.dataset, WORKLOADS[0][1]):
            time.sleep(0.5)
        prepared_after = time.perf_counter() - server.start
        tally = run_workloads(server, args.dataset, args.runs, said=PREPARED_HERE)
        cold_memory = server.stop()
        index_bytes = server.logged("search_index_bytes")
        dictionary_bytes = server.logged("dictionary_bytes")
        entry_bytes = sum(
            os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(cache) for f in files
        )

        server = Server(args.bin, args.datasets, cache, extra)
        _, warm_content = server.answer(args.dataset, WORKLOADS[0][1])
        warm_first = time.perf_counter() - server.start
        must_say(f"kept entry, {WORKLOADS[0][0]}", warm_content, "mapped from the cache")
        warm_data = warm_content.get("data", {})
        warm_total = warm_data.get("total", warm_data.get("total_group_count"))
        # The first search of a process on the kept entry: its dictionaries and folded forms
        # read from the map.
        # (Left out with `--skip-q`: then the first search timed is `$contains`'s below.)
        searched = next((w for w in WORKLOADS if "q" in w[1]), None)
        warm_q = searched and (searched[0], server.answer(args.dataset, searched[1])[0])
        # A prepared table keeps its last searches (a repeat, such as the next page, is
        # answered from them), so the warm medians above of the search workloads are repeats;
        # here each is timed as a new search: before every run, other searches push it out.
        unkept = {}
        for label, arguments, _ in WORKLOADS:
            if "q" not in arguments and "$contains" not in json.dumps(arguments):
                continue
            times = []
            for run in range(args.runs):
                for k in range(SEARCHES_KEPT):
                    server.answer(args.dataset, {"q": f"{run}番{k}", "limit": 1})
                elapsed, content = server.answer(args.dataset, arguments)
                must_say(f"kept entry, {label}", content, "mapped from the cache")
                times.append(elapsed)
            unkept[label] = statistics.median(times)
        warm_memory = server.stop()

        server = Server(args.bin, args.datasets, cache, [*extra, "--streaming", "always"])
        server.call(args.dataset, WORKLOADS[0][1])
        streamed_first = time.perf_counter() - server.start
        streamed = run_workloads(server, args.dataset, args.runs, said="read from the files")
        streamed_memory = server.stop()
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    duck = None if args.no_duckdb else duckdb_figures(args)

    size = os.path.getsize(parquet)
    print(f"Parquet: {size / 1e6:,.0f} MB; runs: {args.runs} after one warm-up")
    print()
    print("| start | first answer | peak RSS | anonymous after | file-backed after |")
    print("|---|---|---|---|---|")
    for label, elapsed, memory in (
        ("empty cache (answered at once, prepared and kept in the background)", cold_first, cold_memory),
        ("kept entry (mapped)", warm_first, warm_memory),
        ("`--streaming always` (read from the file at every call)", streamed_first, streamed_memory),
    ):
        print(f"| {label} | {elapsed:.2f} s | {mib(memory.get('VmHWM', 0))} | {mib(memory.get('RssAnon', 0))} | {mib(memory.get('RssFile', 0))} |")
    print()
    print(f"Prepared into the cache {prepared_after:.1f} s after the start.")
    print(f"Cache entry: {entry_bytes / 1e6:,.0f} MB ({entry_bytes / size:.2f}× the Parquet file).")
    if index_bytes is not None and dictionary_bytes is not None:
        print(
            f"Text index (folded forms beside the dictionaries): {index_bytes / 1e6:,.1f} MB, "
            f"{index_bytes / max(dictionary_bytes, 1) * 100:.1f} % of the dictionaries ({dictionary_bytes / 1e6:,.1f} MB), "
            f"{index_bytes / size * 100:.1f} % of the Parquet file; built while preparing."
        )
    else:
        print("Text index size: not reported in the server's log")
    if warm_q:
        print(f"First {warm_q[0]} on the kept entry (its first search in that process): {warm_q[1] * 1000:,.1f} ms")
    print()
    if unkept:
        print("Searches timed as new ones (not kept from an earlier call), on the kept entry:")
        print()
        print("| workload | Tally prepared, a new search (median) | DuckDB median | ÷ DuckDB |")
        print("|---|---|---|---|")
        for i, (label, _, _) in enumerate(WORKLOADS):
            if label in unkept:
                d = f"{duck['results'][i]['median'] * 1000:,.1f} ms" if duck else ""
                r = f"{unkept[label] / duck['results'][i]['median']:.3f}" if duck else ""
                print(f"| {label} | {unkept[label] * 1000:,.1f} ms | {d} | {r} |")
        print()
    print("| workload | Tally prepared (median) | Tally read from the file (median) | DuckDB first / median | prepared ÷ DuckDB | from the file ÷ DuckDB | totals: prepared / file / DuckDB |")
    print("|---|---|---|---|---|---|---|")
    for i, ((label, _, _), (median, total), (s_median, s_total)) in enumerate(zip(WORKLOADS, tally, streamed)):
        if duck is None:
            print(f"| {label} | {median * 1000:,.1f} ms | {s_median * 1000:,.1f} ms | | | | {total} / {s_total} / |")
            continue
        d = duck["results"][i]
        print(
            f"| {label} | {median * 1000:,.1f} ms | {s_median * 1000:,.1f} ms | {d['first'] * 1000:,.1f} / {d['median'] * 1000:,.1f} ms "
            f"| {median / d['median']:.2f} | {s_median / d['median']:.2f} | {total} / {s_total} / {d['total']} |"
        )
    if duck is not None:
        print()
        print(f"DuckDB process peak RSS: {mib(duck['peak'])}")
    if cold is not None:
        print()
        print_cold_start(*cold)
    # The kept entry answered the first workload only: its total is compared on that row.
    totals_agree([
        (
            label,
            [("Tally prepared", total), ("Tally read from the file", s_total)]
            + ([("DuckDB", duck["results"][i]["total"])] if duck is not None else [])
            + ([("Tally on the kept entry", warm_total)] if i == 0 else []),
        )
        for i, ((label, _, _), (_, total), (_, s_total)) in enumerate(zip(WORKLOADS, tally, streamed))
    ])


if __name__ == "__main__":
    main()
