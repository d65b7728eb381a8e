"""A second generator for tests/e2e/scale.py: the survey's columns with another profile of
distinct values, so the file path is measured on data the project's generator (`tally-synth`,
which follows the survey's statistics) does not make.

    python3 tests/e2e/wide_synth.py --like scale/r7500000/procedures --out scale/wide7500000/procedures \\
        --rows 7500000 [--python .venv/bin/python]

`--like` is a dataset folder made by `tally-synth` (its `dataset.yaml` is copied, and its
coded columns' values are the ones drawn from). Each row is drawn independently and
uniformly (`tally-synth` draws the survey's skew), and the columns the survey keeps narrow are
made wide:

- `所管府省庁`: 2,000 values (25 in the survey's profile), `法令名` and `法令番号` 200,000,
  the first of them the values `--like` holds (so a condition on a real ministry finds its
  records, one in 2,000) and the rest made up;
- `手続名`: unique per row, one in ten containing `届出`;
- the multi-value `手続が行われるイベント(個人)`: one to four parts of 2,000, so nearly every
  record has a combination of its own (distinct cells in the millions);
- a text column of one value in twenty holding `電子`;
- every other coded column uniform over the values `--like` holds; numbers uniform, one in
  twenty null.

DuckDB (the `duckdb` module of `--python`) writes the Parquet file: zstd, in row groups of
122,880 rows (DuckDB's default).
"""

import argparse
import os
import shutil
import subprocess
import sys

# Columns made wide, with how many distinct values they take.
WIDE = {"所管府省庁": 2_000, "法令名": 200_000, "法令番号": 200_000}
UNIQUE = "手続名"
MULTI = "手続が行われるイベント(個人)"
PARTS = 2_000
SEARCHED = "申請書等に記載させる情報"

SCRIPT = r'''
import json, sys
import duckdb
like, out, rows, spec = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
c = duckdb.connect()
c.sql("SET preserve_insertion_order = false")
source = f"read_parquet('{like}/data.parquet')"
columns = c.sql(f"DESCRIBE SELECT * FROM {source}").fetchall()
exprs = []
for k, (name, kind, *_) in enumerate(columns):
    q = '"' + name.replace('"', '""') + '"'
    h = f"hash(i, {k})"
    if kind != "VARCHAR":
        e = f"CASE WHEN {h} % 20 = 0 THEN NULL ELSE ({h} % 100000)::BIGINT END"
    elif name == spec["unique"]:
        e = f"CASE WHEN {h} % 10 = 0 THEN '届出' ELSE '手続' END || i::VARCHAR"
    elif name == spec["multi"]:
        parts = spec["parts"]
        e = (f"array_to_string(list_transform(range(1 + ({h} % 4)::BIGINT), "
             f"lambda x: 'イベント' || (hash(i, {k}, x) % {parts})::VARCHAR), '; ')")
    elif name in spec["wide"]:
        # The first values are the survey's own (so a condition naming one, such as
        # scale.py's 国土交通省, finds its records), the rest made up.
        wide = spec["wide"][name]
        real = [v for (v,) in c.sql(f"SELECT DISTINCT {q} FROM {source} WHERE {q} IS NOT NULL ORDER BY 1 LIMIT {wide // 2}").fetchall()]
        listed = "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in real) + "]"
        made = f"'{name[:2]}' || ({h} % {wide})::VARCHAR"
        e = f"CASE WHEN {h} % {wide} < {len(real)} THEN {listed}[1 + ({h} % {wide})::BIGINT] ELSE {made} END" if real else made
    elif name == spec["searched"]:
        e = f"CASE WHEN {h} % 20 = 0 THEN '電子' ELSE '書面' END || ({h} % 1000)::VARCHAR"
    elif name == columns[0][0]:
        e = "'ID' || i::VARCHAR"
    else:
        values = [v for (v,) in c.sql(f"SELECT DISTINCT {q} FROM {source} WHERE {q} IS NOT NULL LIMIT 1000").fetchall()]
        if not values:
            e = "NULL::VARCHAR"
        else:
            listed = "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"
            e = f"CASE WHEN {h} % 10 = 0 THEN NULL ELSE {listed}[1 + ({h} % {len(values)})::BIGINT] END"
    exprs.append(f"{e} AS {q}")
c.sql(f"COPY (SELECT {', '.join(exprs)} FROM range({rows}) t(i)) TO '{out}/data.parquet' (FORMAT parquet, COMPRESSION zstd)")
print(json.dumps(list(c.sql(f"SELECT count(*), count(DISTINCT \"{spec['multi']}\") FROM '{out}/data.parquet'").fetchall()[0])))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--like", required=True, help="a dataset folder made by tally-synth")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--python", default=sys.executable, help="a Python with the duckdb module")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shutil.copy(os.path.join(args.like, "dataset.yaml"), os.path.join(args.out, "dataset.yaml"))
    import json

    spec = {"wide": WIDE, "unique": UNIQUE, "multi": MULTI, "parts": PARTS, "searched": SEARCHED}
    done = subprocess.run(
        [args.python, "-c", SCRIPT, os.path.abspath(args.like), os.path.abspath(args.out), str(args.rows), json.dumps(spec, ensure_ascii=False)],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"duckdb failed: {done.stderr[-2000:]}")
    rows, cells = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{rows:,} rows in {args.out}/data.parquet; {cells:,} distinct cells of {MULTI}")


if __name__ == "__main__":
    main()
