"""The Python side of a Tally wasm source plugin: write rows and their sources, not IPC plumbing.

A plugin subclasses `Plugin` (`describe`, `scan`) and exports it with `export`; this module
turns the rows it pushes into one Arrow IPC stream, keeps the distinct sources with a per-row
index, projects and limits as the host asked, and answers the WIT calls. It is the Python
twin of the Rust guest helper (tally-plugin-api's `guest` feature), pure Python, so that
componentize-py can compile it with the plugin into one WebAssembly component.

    from tally_plugin import Column, Description, Plugin, export

    class Hello(Plugin):
        def describe(self, config):
            return Description("hello", "0.1.0", "One greeting.").column(
                Column.text("greeting", "What the plugin says"))

        def scan(self, request, rows):
            rows.push(["hello"])

    Source = export(Hello)   # componentize-py looks for `Source` in the app module

The plugin runs in the sandbox described in the WIT file: its dataset folder is mounted
read-only at `/`, so `open()` with relative paths reads the dataset's own files and nothing
else; there is no network and no environment. What it writes to stderr (`print(...,
file=sys.stderr)`, a traceback) is shown when a call fails.

Errors: raise `PluginError("what is wrong and what would work")` for a fault of the dataset's
files or config (the caller is told to fix them); any other exception is a fault of the plugin
itself: its traceback goes to stderr and the call fails as a Rust panic does.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence

#: The plugin API version this helper speaks (the version of its WIT package).
API_VERSION = "0.1.0"

#: How an error begins that is the plugin's own fault (rows that do not match what it
#: described), so the host tells the user it is not their files.
PLUGIN_FAULT = "the plugin broke its own description: "

TYPES = ("text", "integer", "number", "boolean")
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class PluginError(Exception):
    """A fault of the dataset's files or config, said to the caller as it is written: what is
    wrong and what would work (`could not read "a.txt": it is not UTF-8; save it as UTF-8`)."""


class Config:
    """The dataset's `backend.config` (a JSON object; empty when the dataset gives none)."""

    def __init__(self, values: Optional[dict] = None):
        self.values = values or {}

    @staticmethod
    def parse(text: str) -> "Config":
        if not text.strip():
            return Config()
        try:
            values = json.loads(text)
        except ValueError as e:
            raise PluginError(f"the dataset's backend.config is not valid JSON: {e}") from None
        if not isinstance(values, dict):
            raise PluginError("the dataset's backend.config is not a mapping of options")
        return Config(values)

    def str(self, key: str) -> Optional[str]:
        """A text option (None when absent or not text)."""
        v = self.values.get(key)
        return v if isinstance(v, str) else None

    def bool(self, key: str) -> Optional[bool]:
        v = self.values.get(key)
        return v if isinstance(v, bool) else None

    def int(self, key: str) -> Optional[int]:
        v = self.values.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value of an option."""
        return self.values.get(key, default)


@dataclass
class Column:
    """A column the plugin produces: `text`, `integer` (64-bit), `number` (64-bit float) or
    `boolean`."""

    name: str
    type: str
    description: Optional[str] = None

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"column `{self.name}`: type `{self.type}` is not one of {', '.join(TYPES)}")

    @staticmethod
    def text(name: str, description: str = "") -> "Column":
        return Column(name, "text", description or None)

    @staticmethod
    def integer(name: str, description: str = "") -> "Column":
        return Column(name, "integer", description or None)

    @staticmethod
    def number(name: str, description: str = "") -> "Column":
        return Column(name, "number", description or None)

    @staticmethod
    def boolean(name: str, description: str = "") -> "Column":
        return Column(name, "boolean", description or None)


@dataclass
class Description:
    """What the plugin says about itself: a short name, its own version, one sentence on what
    it reads, its columns in order and the columns it filters itself."""

    name: str
    version: str
    summary: str
    columns: List[Column] = field(default_factory=list)
    filterable_columns: List[str] = field(default_factory=list)

    def column(self, column: Column) -> "Description":
        self.columns.append(column)
        return self

    def filterable(self, name: str) -> "Description":
        """Declares that the plugin applies equality filters (`eq`, `in-list`) on a column: the
        host then pushes such conditions down (and applies them again itself)."""
        self.filterable_columns.append(name)
        return self


@dataclass
class RowSource:
    """Where a row comes from. `source_type` is `law`, `document`, `dataset`, `official-page`
    or `official-api`; `locator` is where inside the source (`guide.md#Install`, `a.txt:4`);
    dates are as the source gives them (`YYYY-MM-DD`), never invented; `file` is the file in
    the dataset folder the row was read from (the host cites the SHA-256 of its bytes)."""

    uri: str
    title: str
    source_type: str
    publisher: Optional[str] = None
    locator: Optional[str] = None
    published_at: Optional[str] = None
    effective_at: Optional[str] = None
    file: Optional[str] = None

    def key(self) -> tuple:
        return (self.uri, self.title, self.publisher, self.source_type, self.locator,
                self.published_at, self.effective_at, self.file)


@dataclass
class Filter:
    """A condition the host pushed down: `op` is `eq` or `in-list`, `values` are Python values
    (str, int, float or bool)."""

    column: str
    op: str
    values: List[Any]


@dataclass
class Request:
    """One call to `scan`: the dataset id (for URNs and messages), its config, the columns
    wanted (None: all), the pushed-down filters (all must hold) and the most rows needed."""

    dataset: str
    config: Config
    projection: Optional[List[str]] = None
    filters: List[Filter] = field(default_factory=list)
    limit: Optional[int] = None

    def admits(self, column: str, value: Any) -> bool:
        """Whether every pushed-down filter on `column` admits this value (True when there is
        none). A text value is compared with numbers and booleans as the Rust helper does."""
        for f in self.filters:
            if f.column == column and not any(_same(v, value) for v in f.values):
                return False
        return True

    def filters_on(self, column: str) -> bool:
        return any(f.column == column for f in self.filters)


def _same(wanted: Any, value: Any) -> bool:
    if isinstance(value, str):
        if isinstance(wanted, str):
            return wanted == value
        if isinstance(wanted, bool):
            return value == ("true" if wanted else "false")
        try:
            return (int(value) if isinstance(wanted, int) else float(value)) == wanted
        except ValueError:
            return False
    if isinstance(wanted, bool) or isinstance(value, bool):
        return isinstance(wanted, bool) and isinstance(value, bool) and wanted == value
    return wanted == value


class Rows:
    """The rows of one scan, projected and limited as the host asked."""

    def __init__(self, columns: Sequence[Column], projection: Optional[Sequence[str]] = None,
                 limit: Optional[int] = None):
        self.columns = list(columns)
        names = [c.name for c in self.columns]
        if projection is None:
            self._selected = list(range(len(self.columns)))
        else:
            self._selected = []
            for n in projection:
                if n not in names:
                    raise PluginError(
                        f"{PLUGIN_FAULT}the host asked for column `{n}`, which this plugin does not "
                        f"produce (it produces: {', '.join(names)})")
                self._selected.append(names.index(n))
        self._columns = [_Builder(self.columns[i].type) for i in self._selected]
        self._plan = [(i, self.columns[i], b) for i, b in zip(self._selected, self._columns)]
        self.limit = limit
        self.rows = 0
        self.sources: List[RowSource] = []
        self._source_index: dict = {}
        self.row_sources: List[int] = []
        self.files: List[str] = []
        self.notes: List[str] = []

    def is_full(self) -> bool:
        """Whether the limit is reached (further rows are dropped): stop reading early."""
        return self.limit is not None and self.rows >= self.limit

    def __len__(self) -> int:
        return self.rows

    def push(self, cells: Sequence[Any], source: Optional["RowSource"] = None) -> None:
        """Adds a row: one cell per described column, in order (None is a missing value, not
        zero, not ""), and where the row comes from. Either every row has a source or none has."""
        if self.is_full():
            return
        row = self.rows + 1
        if len(cells) != len(self.columns):
            raise PluginError(
                f"{PLUGIN_FAULT}row {row} has {len(cells)} cells but the plugin describes "
                f"{len(self.columns)} columns")
        if source is not None and self.rows > 0 and not self.row_sources:
            raise PluginError(
                f"{PLUGIN_FAULT}row {row} has a source but earlier rows have none (either every "
                "row has a source or none has)")
        if source is None and self.row_sources:
            raise PluginError(
                f"{PLUGIN_FAULT}row {row} has no source but earlier rows have one (either every "
                "row has a source or none has)")
        # Every cell checked before any is kept: a refused row leaves nothing behind.
        checked = [builder.checked(column, cells[i], row) for i, column, builder in self._plan]
        for builder, value in zip(self._columns, checked):
            builder.append(value)
        if source is not None:
            key = source.key()
            index = self._source_index.get(key)
            if index is None:
                index = len(self.sources)
                self._source_index[key] = index
                self.sources.append(source)
            self.row_sources.append(index)
        self.rows += 1

    def read_file(self, path: str) -> None:
        """Records that a file (relative to the dataset folder) was read; the host cites it
        with the SHA-256 of its bytes."""
        if path not in self.files:
            self.files.append(path)

    def note(self, note: str) -> None:
        """A caveat for the caller, shown with the result."""
        if note not in self.notes:
            self.notes.append(note)

    def ipc(self) -> bytes:
        """The rows as one Arrow IPC stream (a schema and one record batch)."""
        columns = [(self.columns[i].name, self.columns[i].type, self._columns[out])
                   for out, i in enumerate(self._selected)]
        return arrow_ipc_stream(columns, self.rows)


_TEXT_BYTES = 2**31 - 1


class _Builder:
    """One column's values as the Arrow buffers hold them: a byte per row for validity, the
    values packed (64-bit integers and floats, a byte per boolean, UTF-8 bytes with 32-bit
    offsets), so a scan holds its rows' bytes, not a Python object per cell."""

    def __init__(self, kind: str):
        self.kind = kind
        self.valid = bytearray()
        self.nulls = 0
        self.data: Any = array("q") if kind == "integer" else array("d") if kind == "number" else bytearray()
        self.offsets = array("i", [0]) if kind == "text" else None
        # The Python type a value of this column most often is: checked at once, the rest by
        # `_cell` (an int in a number column, a bool where an int is wanted, a wrong type).
        self.exact = {"text": str, "integer": int, "number": float, "boolean": bool}[kind]

    def checked(self, column: Column, value: Any, row: int) -> Any:
        """The value as it will be appended (text encoded), or the plugin's fault."""
        if value is None:
            return None
        if type(value) is not self.exact or (self.kind == "integer" and not _I64_MIN <= value <= _I64_MAX):
            value = _cell(column, value, row)
        if self.offsets is not None:
            value = value.encode("utf-8")
            if len(self.data) + len(value) > _TEXT_BYTES:
                raise PluginError(f"{PLUGIN_FAULT}column `{column.name}` holds more than 2 GiB of text")
        return value

    def append(self, value: Any) -> None:
        if value is None:
            self.valid.append(0)
            self.nulls += 1
            if self.offsets is not None:
                self.offsets.append(len(self.data))
            else:
                self.data.append(0)
        elif self.offsets is not None:
            self.valid.append(1)
            self.data += value
            self.offsets.append(len(self.data))
        else:
            self.valid.append(1)
            self.data.append(value)

    def buffers(self) -> list:
        """The body buffers of the column: validity (none when no value is null), then its
        values (and offsets before them for text)."""
        validity = _bitmap(self.valid) if self.nulls else b""
        if self.offsets is not None:
            return [validity, self.offsets.tobytes(), self.data]
        if self.kind == "boolean":
            return [validity, _bitmap(self.data)]
        return [validity, memoryview(self.data).cast("B")]


def _cell(column: Column, value: Any, row: int) -> Any:
    if value is None:
        return None
    t = column.type
    ok = (
        (t == "text" and isinstance(value, str))
        or (t == "integer" and isinstance(value, int) and not isinstance(value, bool))
        or (t == "number" and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (t == "boolean" and isinstance(value, bool))
    )
    if not ok:
        words = repr(value)
        if len(words) > 80:
            words = words[:80] + "…"
        kind = {"text": "text", "integer": "an integer", "number": "a number",
                "boolean": "a boolean"}[t]
        raise PluginError(
            f"{PLUGIN_FAULT}column `{column.name}` is described as {kind} but row {row} gives it "
            f"{type(value).__name__} {words}")
    if t == "integer" and not _I64_MIN <= value <= _I64_MAX:
        raise PluginError(
            f"{PLUGIN_FAULT}column `{column.name}` is a 64-bit integer but row {row} gives it "
            f"{value}, out of range")
    if t == "number":
        return float(value)
    return value


class Plugin:
    """A plugin's entry points. Subclass it and implement both."""

    def describe(self, config: Config) -> Description:
        """What the plugin produces for this dataset's config."""
        raise NotImplementedError

    def scan(self, request: Request, rows: Rows) -> None:
        """Pushes the rows for this request into `rows`. Filters the plugin declared may be
        applied here (`request.admits`); the host applies them again, so skipping one is slower,
        never wrong. Projection and limit are applied by `rows`."""
        raise NotImplementedError


def run_scan(plugin: Plugin, request: Request) -> Rows:
    """What a `scan` call does, without the WIT types: for tests on this machine."""
    description = plugin.describe(request.config)
    rows = Rows(description.columns, request.projection, request.limit)
    plugin.scan(request, rows)
    return rows


def export(plugin_class: Callable[[], Plugin]):
    """The class componentize-py exports as the component's `tally:plugin/source` interface:
    assign it to `Source` in the app module (`Source = export(MyPlugin)`)."""
    # The bindings exist when componentize-py compiles the app (and after `componentize-py
    # bindings`); on this machine, without them, the app still imports and `run_scan` tests
    # the plugin.
    try:
        from componentize_py_types import Err
        from wit_world import exports
        from wit_world.imports import types as wit
    except ImportError:
        return None

    plugin = plugin_class()

    def guarded(what: str, f: Callable[[], Any]) -> Any:
        try:
            return f()
        except Err:
            raise
        except PluginError as e:
            raise Err(str(e)) from None
        # Any other exception is a fault of the plugin itself: componentize-py writes its
        # traceback to stderr (the host shows it) and the call fails as a panic does.

    def to_wit_type(t: str):
        return {"text": wit.ColumnType.TEXT, "integer": wit.ColumnType.INTEGER,
                "number": wit.ColumnType.NUMBER, "boolean": wit.ColumnType.BOOLEAN}[t]

    def describe(config: str):
        d = plugin.describe(Config.parse(config))
        both = [wit.FilterOp.EQ, wit.FilterOp.IN_LIST]
        return wit.Description(
            name=d.name, version=d.version, summary=d.summary,
            columns=[wit.Column(name=c.name, data_type=to_wit_type(c.type), description=c.description)
                     for c in d.columns],
            filters=[wit.FilterCapability(column=c, ops=both) for c in d.filterable_columns],
        )

    def from_wit_value(v) -> Any:
        return v.value

    def scan(request):
        ops = {wit.FilterOp.EQ: "eq", wit.FilterOp.IN_LIST: "in-list"}
        r = Request(
            dataset=request.dataset,
            config=Config.parse(request.config),
            projection=list(request.projection) if request.projection is not None else None,
            filters=[Filter(f.column, ops[f.op], [from_wit_value(v) for v in f.values])
                     for f in request.filters],
            limit=request.limit,
        )
        rows = run_scan(plugin, r)
        return wit.ScanResult(
            ipc=rows.ipc(),
            sources=[wit.Source(uri=s.uri, title=s.title, publisher=s.publisher,
                                source_type=s.source_type, locator=s.locator,
                                published_at=s.published_at, effective_at=s.effective_at,
                                file=s.file) for s in rows.sources],
            row_sources=rows.row_sources,
            files=rows.files,
            notes=rows.notes,
        )

    class Source(exports.Source):
        def describe(self, config: str):
            return guarded("describe", lambda: describe(config))

        def scan(self, request):
            return guarded("scan", lambda: scan(request))

    return Source


# ---- Arrow IPC stream, written by hand --------------------------------------------------------
#
# The Arrow columnar format's IPC stream (https://arrow.apache.org/docs/format/Columnar.html):
# a Schema message, one RecordBatch message, the end-of-stream marker. Each message is a
# flatbuffer (written front to back below: a table's vtable before it, its children after it,
# every field in an 8-byte slot so that every scalar is aligned) followed by the body buffers,
# each padded to 8 bytes.

_UNION_TYPE = {"integer": 2, "number": 3, "text": 5, "boolean": 6}
_SCHEMA, _RECORD_BATCH = 1, 3
_METADATA_V5 = 4


class _Flatbuffer:
    def __init__(self):
        self.b = bytearray(4)  # the root table's offset, set by `finish`

    def _align(self, n: int, extra: int = 0) -> None:
        self.b.extend(bytes((-(len(self.b) + extra)) % n))

    def table(self, slots: list) -> int:
        """Writes a table; `slots[i]` is field i: None (absent), (fmt, value) for a scalar
        (`struct` format: b, h, i, q, B, ?), or ("off", write) where write() writes the child
        and returns its position."""
        present = [i for i, s in enumerate(slots) if s is not None]
        self._align(2)
        vtable = len(self.b)
        where = {i: 4 + 8 * k for k, i in enumerate(present)}
        self.b += struct.pack("<HH", 4 + 2 * len(slots), 4 + 8 * len(present))
        for i in range(len(slots)):
            self.b += struct.pack("<H", where.get(i, 0))
        self._align(8, 4)
        table = len(self.b)
        self.b += struct.pack("<i", table - vtable)
        later = []
        for i in present:
            kind, value = slots[i]
            at = len(self.b)
            if kind == "off":
                self.b += bytes(8)
                later.append((at, value))
            else:
                slot = struct.pack("<" + kind, value)
                self.b += slot + bytes(8 - len(slot))
        for at, write in later:
            child = write()
            struct.pack_into("<I", self.b, at, child - at)
        return table

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        self._align(4)
        at = len(self.b)
        self.b += struct.pack("<I", len(data)) + data + b"\0"
        return at

    def tables(self, writers: list) -> int:
        """A vector of tables, each written by one of `writers`."""
        self._align(4)
        at = len(self.b)
        self.b += struct.pack("<I", len(writers)) + bytes(4 * len(writers))
        for k, write in enumerate(writers):
            child = write()
            slot = at + 4 + 4 * k
            struct.pack_into("<I", self.b, slot, child - slot)
        return at

    def structs(self, items: list) -> int:
        """A vector of structs of two 64-bit integers (FieldNode, Buffer)."""
        self._align(8, 4)
        at = len(self.b)
        self.b += struct.pack("<I", len(items))
        for a, b in items:
            self.b += struct.pack("<qq", a, b)
        return at

    def finish(self, root: int) -> bytes:
        struct.pack_into("<I", self.b, 0, root)
        self._align(8)
        return bytes(self.b)


def _message(header_type: int, header: Callable[[_Flatbuffer], int], body_length: int) -> bytes:
    fb = _Flatbuffer()
    root = fb.table([
        ("h", _METADATA_V5),
        ("B", header_type),
        ("off", lambda: header(fb)),
        ("q", body_length),
    ])
    return fb.finish(root)


def _schema(fb: _Flatbuffer, columns: list) -> int:
    def field_writer(name: str, kind: str):
        def type_table():
            if kind == "integer":
                return fb.table([("i", 64), ("?", True)])
            if kind == "number":
                return fb.table([("h", 2)])  # DOUBLE
            return fb.table([])  # Utf8, Bool: no fields

        return lambda: fb.table([
            ("off", lambda: fb.string(name)),
            ("?", True),
            ("B", _UNION_TYPE[kind]),
            ("off", type_table),
            None,
            ("off", lambda: fb.tables([])),
        ])

    return fb.table([None, ("off", lambda: fb.tables([field_writer(n, k) for n, k, _ in columns]))])


_BITS = bytes.maketrans(b"\x00\x01", b"01")


def _bitmap(flags: bytes) -> bytes:
    """A byte of 0 or 1 per row as an Arrow bitmap (row i is bit i, least significant first),
    packed in C: the flags read backwards as one binary number."""
    if not flags:
        return b""
    return int(bytes(flags).translate(_BITS)[::-1], 2).to_bytes((len(flags) + 7) // 8, "little")


def _encapsulate(metadata: bytes, body: bytes = b"") -> bytes:
    return struct.pack("<Ii", 0xFFFFFFFF, len(metadata)) + metadata + body


def arrow_ipc_stream(columns: list, rows: int) -> bytes:
    """An Arrow IPC stream of one record batch: `columns` is [(name, type, builder)] with type
    one of `text`, `integer`, `number`, `boolean` and a `_Builder` of `rows` values. The
    buffers' places are laid out first, so each buffer is copied once, into the stream."""
    if sys.byteorder != "little":
        raise PluginError("the Arrow stream is written little-endian only")
    schema = _message(_SCHEMA, lambda fb: _schema(fb, columns), 0)
    nodes, buffers, parts, at = [], [], [], 0
    for name, kind, builder in columns:
        if len(builder.valid) != rows:
            raise PluginError(f"{PLUGIN_FAULT}column `{name}` has {len(builder.valid)} values for {rows} rows")
        nodes.append((rows, builder.nulls))
        for part in builder.buffers():
            buffers.append((at, len(part)))
            parts.append(part)
            at += len(part) + (-len(part)) % 8
    batch = _message(
        _RECORD_BATCH,
        lambda fb: fb.table([
            ("q", rows),
            ("off", lambda: fb.structs(nodes)),
            ("off", lambda: fb.structs(buffers)),
        ]),
        at,
    )
    out = bytearray(_encapsulate(schema))
    out += _encapsulate(batch)
    for part in parts:
        out += part
        out += bytes((-len(part)) % 8)
    out += struct.pack("<Ii", 0xFFFFFFFF, 0)
    return bytes(out)
