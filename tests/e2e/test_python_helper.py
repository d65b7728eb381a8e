"""The Python guest helper (`plugin-api/python/tally_plugin.py`) on this machine, with plain
CPython: the Arrow IPC stream it writes by hand read back by pyarrow (another implementation)
for every column type with nulls, projection and limit; rows that break the description,
integers out of range and a malformed config refused with the helper's words; pushed filters
compared as the Rust helper compares them. test_python_plugins.py runs it inside the
component, through the real sandbox."""

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugin-api" / "python"))

import tally_plugin as tp  # noqa: E402

COLUMNS = [tp.Column.text("t"), tp.Column.integer("i"), tp.Column.number("n"), tp.Column.boolean("b")]


def read(rows: tp.Rows) -> pa.Table:
    return pa.ipc.open_stream(rows.ipc()).read_all()


def test_every_type_with_nulls_reads_back_as_written():
    rows = tp.Rows(COLUMNS)
    written = [
        ["a", 1, 1.5, True],
        [None, None, None, None],
        ["日本語 — \u00e9", -(2**63), 2, False],
        ["", 2**63 - 1, float("inf"), True],
    ] + [[f"row {k}", k, k / 3, k % 2 == 0] for k in range(1000)]
    for cells in written:
        rows.push(cells)
    table = read(rows)
    assert table.schema == pa.schema([("t", pa.string()), ("i", pa.int64()), ("n", pa.float64()), ("b", pa.bool_())])
    expected = [dict(zip("tinb", [c if not (k == 2 and isinstance(c, int)) else float(c) for k, c in enumerate(cells)])) for cells in written]
    assert table.to_pylist() == expected


def test_projection_limit_and_no_columns():
    rows = tp.Rows(COLUMNS, ["b", "t"], 2)
    for k in range(5):
        rows.push([f"x{k}", k, 0.0, k == 1])
        if rows.is_full():
            break
    assert len(rows) == 2
    assert read(rows).to_pylist() == [{"b": False, "t": "x0"}, {"b": True, "t": "x1"}]
    rows = tp.Rows(COLUMNS, [])
    rows.push(["x", 1, 1.0, True])
    table = read(rows)
    assert table.num_rows == 1 and table.num_columns == 0
    assert read(tp.Rows(COLUMNS)).num_rows == 0


@pytest.mark.parametrize(
    "cells, said",
    [
        ([1, 1, 1.0, True], "column `t` is described as text but row 1 gives it int 1"),
        (["x", True, 1.0, True], "column `i` is described as an integer but row 1 gives it bool True"),
        (["x", 1.5, 1.0, True], "column `i` is described as an integer but row 1 gives it float 1.5"),
        (["x", 2**63, 1.0, True], "column `i` is a 64-bit integer but row 1 gives it 9223372036854775808, out of range"),
        (["x", 1, "1.0", True], "column `n` is described as a number but row 1 gives it str '1.0'"),
        (["x", 1, 1.0, 1], "column `b` is described as a boolean but row 1 gives it int 1"),
        (["x", 1, 1.0], "row 1 has 3 cells but the plugin describes 4 columns"),
    ],
)
def test_rows_that_break_the_description_are_the_plugins_fault(cells, said):
    rows = tp.Rows(COLUMNS)
    with pytest.raises(tp.PluginError) as refused:
        rows.push(cells)
    assert str(refused.value) == tp.PLUGIN_FAULT + said
    assert len(rows) == 0, "nothing of a refused row is kept"


def test_sources_are_all_or_none_and_kept_once():
    source = tp.RowSource("urn:x:a", "a", "document", locator="a:1", file="a.txt")
    rows = tp.Rows(COLUMNS)
    rows.push(["x", 1, 1.0, True], source)
    rows.push(["y", 2, 2.0, False], tp.RowSource("urn:x:a", "a", "document", locator="a:1", file="a.txt"))
    assert rows.sources == [source] and rows.row_sources == [0, 0]
    with pytest.raises(tp.PluginError, match="has no source but earlier rows have one"):
        rows.push(["z", 3, 3.0, True])
    rows = tp.Rows(COLUMNS)
    rows.push(["x", 1, 1.0, True])
    with pytest.raises(tp.PluginError, match="has a source but earlier rows have none"):
        rows.push(["y", 2, 2.0, False], source)


def test_a_projection_of_a_column_it_does_not_produce_is_refused():
    with pytest.raises(tp.PluginError, match="the host asked for column `nope`, which this plugin does not produce"):
        tp.Rows(COLUMNS, ["t", "nope"])


@pytest.mark.parametrize(
    "text, said",
    [("{", "the dataset's backend.config is not valid JSON"), ("[1, 2]", "is not a mapping of options")],
)
def test_a_malformed_config_is_the_datasets_fault(text, said):
    with pytest.raises(tp.PluginError, match=said):
        tp.Config.parse(text)
    config = tp.Config.parse('{"name": "x", "n": 3, "on": true}')
    assert (config.str("name"), config.int("n"), config.bool("on"), config.int("on"), config.str("n")) == ("x", 3, True, None, None)
    assert tp.Config.parse("  ").values == {}


def test_pushed_filters_compare_as_the_rust_helper_does():
    request = tp.Request("d", tp.Config(), filters=[tp.Filter("path", "in-list", ["a.txt", "b.txt"]), tp.Filter("n", "eq", [3])])
    assert request.admits("path", "a.txt") and not request.admits("path", "c.txt")
    assert request.admits("n", 3) and request.admits("n", "3") and not request.admits("n", "x") and not request.admits("n", True)
    assert request.admits("other", "anything") and request.filters_on("path") and not request.filters_on("other")
    flag = tp.Request("d", tp.Config(), filters=[tp.Filter("on", "eq", [True])])
    assert flag.admits("on", True) and flag.admits("on", "true") and not flag.admits("on", 1)


def test_export_without_bindings_leaves_the_module_importable():
    # On this machine there is no `wit_world`: the app module still imports, for its tests.
    assert tp.export(tp.Plugin) is None


def test_bitmaps_of_every_length_and_pattern():
    for n in (1, 7, 8, 9, 63, 64, 65, 1001):
        rows = tp.Rows(COLUMNS)
        cells = [[None if k % 3 == 0 else f"t{k}", None if k % 5 == 0 else k, None if k % 2 else k / 2, None if k % 7 == 0 else k % 4 == 1] for k in range(n)]
        for c in cells:
            rows.push(c)
        got = read(rows).to_pylist()
        assert got == [dict(zip("tinb", c)) for c in cells], n
