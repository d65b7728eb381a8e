"""What signing in with OAuth and a row policy cost a call (issue 55): figures, not assertions.

    python3 tests/e2e/policy_bench.py --bin target/release/tally --datasets DIR [--calls 40]

DIR holds datasets of the survey's shape: the default `procedures` (75k records) and a large
one (`tally-synth --rows 7500000`), each folder's name its id. One `tally serve --http` on
127.0.0.1 takes three kinds of callers:

- `open`: a static token without a policy;
- `jwt`: an RS256 access token of an authorization server this script runs over https
  (tests/e2e/oauth_server.py), checked against its key set at every request, no policy;
- `team`: a static token granted a policy that keeps one ministry's records of every dataset
  (`所管府省庁: デジタル庁`) and hides the procedure names.

Per dataset it prints the median and p90 latency, over `--calls` calls each after a warm-up, of
`ping` (the cost of authentication alone) and of a summary by 手続類型 with a count and a sum:
for `open`, for `jwt`, for `team`, and for `open` asking the same records with an explicit
`where` (what the policy's answer would cost without one); the ratios `jwt / open` and
`team / open with where`; the first call of `team` (its restricted view of the dataset is made
and prepared then); DuckDB on the same Parquet with and without the condition as the
yardstick; and the server's peak memory. The totals of `team` are checked against DuckDB's.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
from oauth_server import AuthorizationServer  # noqa: E402

OPEN = "open-bench-token-0123456789abcdef"
TEAM = "team-bench-token-0123456789abcdef"
MINISTRY = "デジタル庁"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Session:
    """One MCP session over streamable HTTP with one bearer token (raw JSON-RPC)."""

    def __init__(self, url: str, token: str):
        self.url = url
        self.http = httpx2.Client(timeout=600, headers={**ACCEPT, "Authorization": f"Bearer {token}"})
        self.next_id = 0
        r = self.post({"method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "policy-bench", "version": "1"}}})
        self.http.headers["mcp-session-id"] = r.headers["mcp-session-id"]
        self.http.headers["mcp-protocol-version"] = "2025-11-25"
        self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message: dict) -> httpx2.Response:
        self.next_id += 1
        r = self.http.post(self.url, json={"jsonrpc": "2.0", "id": self.next_id, **message})
        r.raise_for_status()
        return r

    def request(self, method: str, params: dict) -> dict:
        r = self.post({"method": method, "params": params})
        text = r.text
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            for line in text.splitlines():
                if line.startswith("data:") and '"id"' in line:
                    text = line[5:]
        message = json.loads(text)
        if "error" in message:
            raise RuntimeError(message["error"])
        return message["result"]

    def call(self, tool: str, arguments: dict) -> dict:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        body = json.loads(result["content"][0]["text"])
        if "error" in body:
            raise RuntimeError(body["error"])
        return body["data"]


def timed(fn, calls: int) -> tuple[float, float]:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def interleaved(runs: dict, calls: int) -> dict:
    times = {name: [] for name in runs}
    names = list(runs)
    for round_ in range(calls):
        # Each in turn goes first: a call right after the client's pause pays for it.
        for name in names[round_ % len(names):] + names[: round_ % len(names)]:
            fn = runs[name]
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) * 1000)
    out = {}
    for name, ts in times.items():
        ts.sort()
        out[name] = (statistics.median(ts), ts[int(len(ts) * 0.9) - 1])
    return out


def duck(parquet: Path, where: str, calls: int) -> tuple[float, list]:
    import duckdb

    con = duckdb.connect()
    sql = f"SELECT 手続類型, count(*), sum(総手続件数) FROM read_parquet('{parquet}') {where} GROUP BY 1 ORDER BY 1"
    rows = con.execute(sql).fetchall()
    return timed(lambda: con.execute(sql).fetchall(), max(5, calls // 4))[0], rows


def totals(data: dict) -> list:
    return sorted((r[0], r[1], r[2]) for r in data["rows"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="target/release/tally")
    parser.add_argument("--datasets", required=True)
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    datasets = Path(args.datasets)
    ids = sorted(p.name for p in datasets.iterdir() if (p / "dataset.yaml").is_file())

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        auth = AuthorizationServer(tmp / "as").start()
        (tmp / "tokens").write_text(f"open {OPEN}\nteam {TEAM}\n", encoding="utf-8")
        restricted = "\n".join(f"      {i}:\n        hide: [手続名]\n        rows: {{所管府省庁: {MINISTRY}}}" for i in ids)
        (tmp / "policies.yaml").write_text(
            f"policies:\n  team:\n    datasets:\n{restricted}\n  all:\n    datasets: \"*\"\n"
            f"grants:\n  tokens: {{team: [team]}}\n  scopes: {{tally: [all]}}\n",
            encoding="utf-8",
        )
        proc = subprocess.Popen(
            [args.bin, "serve", "--http", "127.0.0.1:0", "--datasets", str(datasets), "--watch", "off",
             "--token-file", str(tmp / "tokens"), "--policy-file", str(tmp / "policies.yaml"),
             "--oauth-issuer", auth.issuer, "--oauth-ca-cert", str(auth.ca_file),
             "--rate-limit", "100000", "--rate-burst", "100000"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env={"TALLY_LOG": "warn", "PATH": "/usr/bin:/bin"},
        )
        port = None
        for line in proc.stderr:
            if "serving MCP at http://127.0.0.1:" in line:
                port = int(line.split("127.0.0.1:")[1].split("/")[0])
                break
        assert port, "the server did not start"
        url = f"http://127.0.0.1:{port}/mcp"
        jwt = auth.token(url, sub="bench", scope="tally", exp=int(time.time()) + 3600)
        sessions = {"open": Session(url, OPEN), "jwt": Session(url, jwt), "team": Session(url, TEAM)}

        print(f"{args.calls} calls each after a warm-up; milliseconds, median / p90; HTTP on 127.0.0.1.\n")
        ping = interleaved({who: (lambda s=s: s.request("ping", {})) for who, s in sessions.items()}, args.calls * 5)
        print("| ping | open | jwt | team |\n|---|---|---|---|")
        print("| median / p90 | " + " | ".join(f"{ping[w][0]:.2f} / {ping[w][1]:.2f}" for w in ("open", "jwt", "team")) + " |\n")

        print("| dataset | records | open | jwt | jwt/open | open + where | team (policy) | team/(open + where) | team's first call | DuckDB where | DuckDB all |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for dataset in ids:
            summary = {"dataset_id": dataset, "metrics": ["count", "sum:総手続件数"], "group_by": ["手続類型"]}
            with_where = {**summary, "where": {"所管府省庁": MINISTRY}}
            t = time.perf_counter()
            team_answer = sessions["team"].call("summarize_records", summary)
            first = (time.perf_counter() - t) * 1000
            for who in ("open", "jwt"):
                sessions[who].call("summarize_records", summary)
            where_answer = sessions["open"].call("summarize_records", with_where)
            # One call of each in turn, round after round: the machine's noise falls on all.
            runs = {
                "open": lambda: sessions["open"].call("summarize_records", summary),
                "jwt": lambda: sessions["jwt"].call("summarize_records", summary),
                "where": lambda: sessions["open"].call("summarize_records", with_where),
                "team": lambda: sessions["team"].call("summarize_records", summary),
            }
            figures = interleaved(runs, args.calls)
            parquet = datasets / dataset / "data.parquet"
            duck_where, expected = duck(parquet, f"WHERE 所管府省庁 = '{MINISTRY}'", args.calls)
            duck_all, _ = duck(parquet, "", args.calls)
            got = totals(team_answer)
            same = [(k, c, round(s or 0)) for k, c, s in got] == [(k, c, round(s or 0)) for k, c, s in sorted(expected)]
            assert same, ("the policy's totals differ from DuckDB's", got[:3], sorted(expected)[:3])
            assert totals(where_answer) == got, "the policy and the explicit where disagree"
            records = sessions["open"].call("summarize_records", {"dataset_id": dataset, "metrics": ["count"]})["rows"][0][0]
            fmt = lambda f: f"{f[0]:.1f} / {f[1]:.1f}"
            print(
                f"| {dataset} | {records:,} | {fmt(figures['open'])} | {fmt(figures['jwt'])} | {figures['jwt'][0] / figures['open'][0]:.2f} "
                f"| {fmt(figures['where'])} | {fmt(figures['team'])} | {figures['team'][0] / figures['where'][0]:.2f} "
                f"| {first:.0f} | {duck_where:.1f} | {duck_all:.1f} |"
            )
        print(f"\nThe team's totals equal DuckDB's with the condition on every dataset. Peak RSS of the server: {peak_rss_mib(proc.pid):,.0f} MiB.")
        proc.terminate()
        proc.wait(timeout=30)
        auth.stop()


if __name__ == "__main__":
    main()
