"""A Tally wasm source plugin in Python to copy from: every `.txt` file of the dataset folder,
one row per non-empty line, each row citing its file and line.

`tally plugin new --lang python NAME` writes a project from this file; then `tally plugin
build` compiles it with componentize-py into the component `NAME.wasm`, and `tally plugin test
. --dataset example` runs it through the sandbox on the example folder, checked. README.md (in
the project) is the guide: the contract, the sandbox and its limits, provenance.

The plugin sees only its dataset folder (read-only, at `/`, so relative paths read it); it has
no network and no environment. What it writes to stderr is shown when a call fails.
"""

import os

from tally_plugin import Column, Description, Plugin, PluginError, RowSource, export

NAME = "template"
VERSION = "0.1.0"


class Lines(Plugin):
    def describe(self, config):
        return (
            Description(NAME, VERSION, "Text files, one row per line")
            .column(Column.text("path", "The file, relative to the dataset folder"))
            .column(Column.integer("line", "The line number, from 1"))
            .column(Column.text("text", "The line, trimmed"))
            # The plugin skips files itself when the host asks for some paths only.
            .filterable("path")
        )

    def scan(self, request, rows):
        publisher = request.config.str("publisher")
        names = sorted(n for n in os.listdir(".") if n.endswith(".txt"))
        for name in names:
            if not request.admits("path", name):
                continue
            try:
                with open(name, encoding="utf-8") as f:
                    text = f.read()
            except UnicodeDecodeError as e:
                raise PluginError(f"could not read `{name}`: it is not UTF-8 ({e.reason}); save it as UTF-8")
            except OSError as e:
                raise PluginError(f"could not read `{name}`: {e.strerror}")
            rows.read_file(name)
            for i, line in enumerate(text.splitlines(), start=1):
                line = line.strip()
                if not line:
                    continue
                if rows.is_full():
                    return
                rows.push(
                    [name, i, line],
                    RowSource(
                        uri=f"urn:tally:document:{request.dataset}/{name}",
                        title=name,
                        source_type="document",
                        publisher=publisher,
                        locator=f"{name}:{i}",
                        file=name,
                    ),
                )


# componentize-py exports the class named `Source` of this module as the component's
# `tally:plugin/source` interface.
Source = export(Lines)
