"""Charts for every client: `tally summarize … --chart FILE.svg|png|html` on the real survey,
and the `chart` argument that adds the chart as an image block for clients without views."""

import base64
import json
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import reference_survey, stdio_params, tally_bin

pytestmark = pytest.mark.anyio

TIMEOUT = 120
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    return reference_survey(tmp_path_factory, "charts")


def summarize(datasets: Path, chart: Path, *flags: str) -> tuple[dict, str]:
    r = subprocess.run(
        [tally_bin(), "summarize", "survey", "--datasets", str(datasets), "--compact", "--chart", str(chart), *flags],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the filtered scanlines of a PNG (enough to tell a blank image)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_svg_png_and_html_of_a_summary(survey, tmp_path):
    svg_file = tmp_path / "chart.svg"
    envelope, said = summarize(survey, svg_file, "--group-by", "所管府省庁", "--metrics", "avg:オンライン率", "--metrics", "count")
    rows = envelope["data"]["rows"]
    root = ET.parse(svg_file).getroot()
    assert root.tag == SVG + "svg"
    assert root.get("data-kind") == "bar"
    marks = [g for g in root.iter(SVG + "g") if g.get("class") == "mark"]
    assert len(marks) == len(rows) == int(root.get("data-marks"))
    assert [m.get("data-label") for m in marks] == [r[0] for r in rows]
    text = "".join(root.itertext())
    assert "所管府省庁" in text and "%" in text
    assert "retrieved" in text and "computed by Tally" in text
    assert "wrote a bar chart" in said

    png_file = tmp_path / "chart.png"
    _, said = summarize(survey, png_file, "--group-by", "所管府省庁", "--metrics", "avg:オンライン率", "--metrics", "count")
    width, height, lines = png_pixels(png_file.read_bytes())
    # Drawn at twice the SVG's size.
    assert (width, height) == (2 * int(root.get("width").removesuffix("px")), 2 * int(root.get("height").removesuffix("px")))
    assert len(set(lines)) > 16, "the image is blank"
    assert f"{width}×{height} pixels" in said

    html_file = tmp_path / "chart.html"
    summarize(survey, html_file, "--group-by", "所管府省庁", "--group-by", "手続類型")
    html = html_file.read_text()
    assert html.startswith("<!doctype html>") and "TallyView.render" in html
    assert "src=" not in html.split("<script")[0]


def test_a_chart_file_of_unknown_kind_is_refused_before_computing(survey, tmp_path):
    r = subprocess.run(
        [tally_bin(), "summarize", "survey", "--datasets", str(survey), "--chart", str(tmp_path / "chart.gif")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 1
    assert ".svg, .png or .html" in r.stderr and r.stdout == ""
    assert not (tmp_path / "chart.gif").exists()


def test_three_groupings_are_answered_but_not_drawn(survey, tmp_path):
    r = subprocess.run(
        [tally_bin(), "summarize", "survey", "--datasets", str(survey), "--compact", "--chart", str(tmp_path / "c.svg"),
         "--group-by", "所管府省庁", "--group-by", "手続類型", "--group-by", "事務区分"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    # The answer is printed all the same; what could not be drawn is said, with what would be.
    assert r.returncode == 3
    assert json.loads(r.stdout)["data"]["total_group_count"] > 0
    assert "two" in r.stderr


async def test_the_chart_argument_adds_an_image_and_changes_nothing_else(survey):
    params = stdio_params()
    params.args = ["serve", "--datasets", str(survey), "--call-timeout-ms", "60000"]
    args = {"dataset_id": "survey", "group_by": ["手続類型"]}
    with anyio.fail_after(TIMEOUT):
        async with Client(params, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
            plain = await c.call_tool("summarize_records", args)
            assert not plain.is_error and len(plain.content) == 1
            pictured = await c.call_tool("summarize_records", {**args, "chart": "png"})
            assert not pictured.is_error
            text, image = pictured.content
            assert text.type == "text" and json.loads(text.text) == pictured.structured_content
            # The same answer (only the time it was generated differs).
            a, b = plain.structured_content, pictured.structured_content
            assert a["data"] == b["data"] and a["provenance"]["sources"] == b["provenance"]["sources"]
            assert image.type == "image" and image.mime_type == "image/png"
            width, height, lines = png_pixels(base64.b64decode(image.data))
            assert width >= 720 and height > 200 and len(set(lines)) > 16

            svg = await c.call_tool("summarize_records", {**args, "chart": "svg"})
            assert svg.content[1].mime_type == "image/svg+xml"
            root = ET.fromstring(base64.b64decode(svg.content[1].data))
            assert root.get("data-kind") == "pie"
            assert int(root.get("data-marks")) == len(svg.structured_content["data"]["rows"])

            refused = await c.call_tool("summarize_records", {**args, "chart": "gif"})
            assert refused.is_error
            error = json.loads(refused.content[0].text)["error"]
            assert error["parameter"] == "chart" and '"png" or "svg"' in error["message"]
