"""From a number to the law behind it, through the real MCP client.

Serves two datasets with `tally serve` over stdio: the administrative-procedures survey
(its real definition, with a link from its law number and article to the law texts) and the
e-Gov law texts of ../shared/reference/laws read by the built-in law plugin
(examples/laws/dataset.yaml). Then it asks what a model would ask: how many procedures rest on
the My Number Act, on which of its provisions (cite_provisions: each provision with its text,
revision, e-Gov URI and the procedures resting on it), what one of them says, and how the
Administrative Procedure Act's provisions read in 2020, before its 2024 revision.

    cargo build --bin tally
    .venv/bin/python examples/law_lookup.py [--reference ../shared/reference]

A recorded run is in examples/law_lookup.md.
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
LAW = "行政手続における特定の個人を識別するための番号の利用等に関する法律"
LINK = "links: [{to: laws, on: {法令番号: law_num, 根拠条項号: locator}}]\n"


def call(c, tool: str, args: dict) -> dict:
    async def run():
        print(f"\n> {tool} {json.dumps(args, ensure_ascii=False)}")
        r = await c.call_tool(tool, args)
        env = json.loads(r.content[0].text)
        if r.is_error:
            raise SystemExit(f"error: {env['error']['message']}")
        return env

    return run()


async def main(reference: Path, tally: str):
    with tempfile.TemporaryDirectory() as tmp:
        datasets = Path(tmp)
        (datasets / "survey").mkdir()
        # The published definition, unchanged, with one line more: its link to the laws.
        published = (reference / "procedures-survey-r6.dataset.yaml").read_text(encoding="utf-8")
        (datasets / "survey" / "dataset.yaml").write_text(LINK + published, encoding="utf-8")
        shutil.copyfile(reference / "procedures" / "procedures-survey-r6.parquet", datasets / "survey" / "data.parquet")
        (datasets / "laws" / "xml").mkdir(parents=True)
        shutil.copyfile(ROOT / "examples" / "laws" / "dataset.yaml", datasets / "laws" / "dataset.yaml")
        for p in (reference / "laws").glob("*.xml"):
            shutil.copyfile(p, datasets / "laws" / "xml" / p.name)

        params = StdioServerParameters(command=tally, args=["serve", "--datasets", str(datasets)], env={"TALLY_LOG": "warn"})
        async with Client(params, mode="legacy", cache=None, read_timeout_seconds=120) as c:
            env = await call(c, "summarize_records", {
                "dataset_id": "survey",
                "where": {"法令名": [LAW]},
                "group_by": ["オンライン化の実施状況"],
                "metrics": ["count"],
            })
            for value, count in env["data"]["rows"]:
                print(f"  {value or '(blank)'}: {count} procedures")

            env = await call(c, "cite_provisions", {
                "dataset_id": "survey",
                "where": {"法令名": [LAW]},
                "limit": 5,
            })
            data = env["data"]
            print(f"  {data['records_matched']} of {data['records_total']} procedures found their provisions; {data['total_provisions']} provisions in all")
            sources = {s["id"]: s for s in env["provenance"]["sources"]}
            # Each row points at the law it was read from (cited once); the row names the provision.
            for (law, provision, text, revision, uri, records), [ref] in zip(data["rows"], data["rowSourceRefs"]):
                print(f"  {provision}: {records} procedures — {text[:40]}…  ({sources[ref]['uri']}, locator {provision})")
            for u in data["unmatched"]:
                print(f"  unmatched: {u['reason']}: {u['records']} records")

            env = await call(c, "cite_provisions", {
                "dataset_id": "survey",
                "where": {"法令名": ["行政手続法"]},
                "as_of": "2020-01-01",
                "limit": 3,
            })
            for law, provision, text, revision, uri, records in env["data"]["rows"]:
                print(f"  {law} {provision} (revision {revision}): {records} procedures")
            print("  " + next(t["description"] for t in env["provenance"]["transformations"] if "in force" in t["description"]))

            env = await call(c, "query_records", {
                "dataset_id": "survey",
                "where": {"法令名": [LAW], "手続名": {"$contains": "個人番号の通知"}},
                "select": ["手続名", "根拠条項号"],
                "limit": 3,
            })
            name, basis = env["data"]["rows"][0]
            print(f"  {name}: 根拠条項号 {basis}")

            env = await call(c, "query_records", {
                "dataset_id": "laws",
                "where": {"law_title": [LAW], "locator": basis, "unit": ["paragraph"]},
                "select": ["locator", "article_caption", "text"],
            })
            for r in env["data"]["resolved_fields"]:
                print(f"  Tally read `{r['input']}` as `{r['canonical']}` ({r['parameter']})")
            sources = {s["id"]: s for s in env["provenance"]["sources"]}
            for (locator, caption, text), [ref] in zip(env["data"]["rows"], env["data"]["rowSourceRefs"]):
                s = sources[ref]
                print(f"  {locator} {caption or ''}\n  {text}")
                print(f"  source: {s['title']} {s['locator']} — {s['uri']} (publisher {s['publisher']}, effective {s.get('effectiveAt', 'unknown')}, {s['contentHash']})")
            for w in env["provenance"]["warnings"]:
                print(f"  warning: {w}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference")
    parser.add_argument("--tally", default=str(ROOT / "target" / "debug" / "tally"))
    args = parser.parse_args()
    if not (args.reference / "laws").is_dir():
        sys.exit(f"no reference laws under {args.reference}; pass --reference DIR")
    anyio.run(main, args.reference, args.tally)
