"""Unit tests of the plugin's code on this machine, with plain Python (no component, no
sandbox): `python -m unittest` in the project folder. `tally plugin test . --dataset example`
runs the built component through the real sandbox."""

import os
import unittest
from pathlib import Path

from app import Lines
from tally_plugin import Config, Filter, Request, run_scan

EXAMPLE = Path(__file__).resolve().parent / "example"


class LinesTest(unittest.TestCase):
    def setUp(self):
        # The sandbox mounts the dataset folder at `/`, so the plugin reads relative paths.
        self.before = os.getcwd()
        os.chdir(EXAMPLE)

    def tearDown(self):
        os.chdir(self.before)

    def test_every_non_empty_line_is_a_row_citing_its_line(self):
        rows = run_scan(Lines(), Request("example", Config({"publisher": "Example Org"})))
        self.assertEqual(len(rows), 3)
        self.assertEqual(rows.files, ["hello.txt"])
        self.assertEqual([s.locator for s in rows.sources], ["hello.txt:1", "hello.txt:2", "hello.txt:4"])
        self.assertEqual(rows.sources[0].publisher, "Example Org")

    def test_a_pushed_filter_and_a_limit(self):
        request = Request("example", Config(), filters=[Filter("path", "eq", ["other.txt"])])
        self.assertEqual(len(run_scan(Lines(), request)), 0)
        self.assertEqual(len(run_scan(Lines(), Request("example", Config(), limit=1))), 1)


if __name__ == "__main__":
    unittest.main()
