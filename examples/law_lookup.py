"""From a number to the law behind it, through the real MCP client.

Serves two datasets with `tally serve` over stdio: the administrative-procedures survey
(its real definition and data) and the e-Gov law texts of ../shared/reference/laws read by the
built-in law plugin (examples/laws/dataset.yaml). Then it asks what a model would ask:
how many procedures rest on the My Number Act, which article one of them cites, and what
that article says, with the article-level source Tally cites.

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
        shutil.copyfile(reference / "procedures-survey-r6.dataset.yaml", datasets / "survey" / "dataset.yaml")
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
