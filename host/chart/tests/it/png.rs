//! Rasterising: the image's size, that something was drawn, and what is said about fonts.

use resvg::tiny_skia::Pixmap;
use serde_json::json;
use tally_chart::{ChartError, Fonts, Kind, MAX_PNG_PIXEL_BYTES, Options, png, svg};

use crate::common::*;

fn size_in_header(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

#[test]
fn the_image_is_twice_the_chart_and_shows_the_bars() {
    let env = with(by_ministry(5), "/data/truncated", json!(true));
    let chart = svg(&env, &Options::default()).unwrap();
    let image = png(&chart, &Fonts::system()).unwrap();
    assert_eq!(
        size_in_header(&image.png),
        (chart.width * 2, chart.height * 2)
    );
    assert_eq!(
        (image.width, image.height),
        (chart.width * 2, chart.height * 2)
    );

    let pixmap = Pixmap::decode_png(&image.png).unwrap();
    let first = pixmap.pixels()[0];
    assert!(pixmap.pixels().iter().any(|p| *p != first), "not blank");
    // The bars' colour (#4d7fe0) is there.
    let bar = pixmap
        .pixels()
        .iter()
        .filter(|p| (p.red(), p.green(), p.blue(), p.alpha()) == (0x4d, 0x7f, 0xe0, 0xff))
        .count();
    assert!(bar > 1000, "{bar} bar pixels");
}

#[test]
fn every_kind_rasterises() {
    for env in [
        by_ministry(3),
        by_ministry(10),
        by_ministry_and_kind(3, &["申請", "届出"]),
        envelope(&[], &[count(), rate()], json!([[12345, 0.4321]])),
    ] {
        let chart = svg(&env, &Options::default()).unwrap();
        let image = png(&chart, &Fonts::system()).unwrap();
        assert_eq!(
            size_in_header(&image.png),
            (chart.width * 2, chart.height * 2),
            "{}",
            chart.kind
        );
    }
}

/// Without a font that has the labels' characters, the image is still made, and the caller
/// is told which characters are missing and what to do.
#[test]
fn missing_glyphs_are_reported_not_fatal() {
    let chart = svg(&by_ministry(3), &Options::default()).unwrap();
    let image = png(&chart, &Fonts::empty()).unwrap();
    assert!(!image.png.is_empty());
    for c in "所管府省庁総務省".chars() {
        assert!(image.missing_glyphs.contains(&c), "{c}");
    }
    let warning = image.warning().expect("a warning");
    assert!(
        warning.starts_with("no installed font has glyphs for "),
        "{warning}"
    );
    assert!(
        warning.contains("fonts-noto-cjk") && warning.contains("--font FILE"),
        "{warning}"
    );
}

#[test]
fn glyph_coverage_is_checked_per_character() {
    let fonts = Fonts::empty();
    assert_eq!(fonts.missing_glyphs("総務 省 総"), vec!['総', '務', '省']);
}

#[test]
fn a_font_file_that_is_not_a_font_is_refused() {
    let dir = std::env::temp_dir().join(format!("tally-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("not-a-font.ttf");
    std::fs::write(&path, b"this is not a font").unwrap();
    let err = Fonts::empty().add_file(&path).unwrap_err();
    assert!(matches!(err, ChartError::FontFile { .. }), "{err:?}");
    assert!(err.to_string().contains("not-a-font.ttf"), "{err}");
    assert!(err.to_string().contains("TrueType or OpenType"), "{err}");
    let missing = dir.join("absent.ttf");
    assert!(matches!(
        Fonts::empty().add_file(&missing),
        Err(ChartError::FontFile { .. })
    ));
    std::fs::remove_dir_all(&dir).ok();
}

/// A server keeps one `Fonts` and shares it between requests.
#[test]
fn fonts_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + Clone>() {}
    shared::<Fonts>();
}

fn pixel_bytes(width: u32, height: u32) -> u64 {
    u64::from(width) * u64::from(height) * 4
}

/// The largest charts `LIMITS` allows, at the default width, with five long warnings: drawn
/// at 2× and within the pixel cap. (A bar chart of 10,000 groups made a 3 GB PNG.)
#[test]
fn regression_the_largest_charts_allowed_stay_under_the_pixel_cap() {
    let long = "集計対象のうち 3 件は所管府省庁が空欄です。".repeat(20);
    let warned = |env: serde_json::Value| {
        with(
            env,
            "/provenance/warnings",
            json!([long, long, long, long, long, long]),
        )
    };
    let fonts = Fonts::system();
    for (env, kind) in [
        (warned(many_groups(10_000)), Some(Kind::Bar)),
        (warned(many_groups(10_000)), None),
        (warned(grid(500, 500)), None),
        (warned(grid(100, 12)), None),
    ] {
        let chart = svg(
            &env,
            &Options {
                kind,
                ..Options::default()
            },
        )
        .unwrap();
        let image = png(&chart, &fonts).unwrap_or_else(|e| panic!("{}: {e}", chart.kind));
        assert_eq!(image.scale, 2.0, "{}", chart.kind);
        assert_eq!(
            size_in_header(&image.png),
            (chart.width * 2, chart.height * 2)
        );
        let bytes = pixel_bytes(image.width, image.height);
        assert!(
            bytes <= MAX_PNG_PIXEL_BYTES,
            "{}: {}×{} is {bytes} bytes",
            chart.kind,
            image.width,
            image.height
        );
    }
}

/// Too large for the cap at 2×: drawn at the largest scale that fits, not below 1×.
#[test]
fn a_wide_chart_is_drawn_at_a_smaller_scale() {
    let chart = svg(
        &many_groups(10_000),
        &Options {
            kind: Some(Kind::Bar),
            width: 3000,
            ..Options::default()
        },
    )
    .unwrap();
    assert!(pixel_bytes(chart.width * 2, chart.height * 2) > MAX_PNG_PIXEL_BYTES);
    let image = png(&chart, &Fonts::empty()).unwrap();
    assert!((1.0..2.0).contains(&image.scale), "scale {}", image.scale);
    assert_eq!(size_in_header(&image.png), (image.width, image.height));
    assert_eq!(
        (image.width, image.height),
        (
            (chart.width as f32 * image.scale).ceil() as u32,
            (chart.height as f32 * image.scale).ceil() as u32
        )
    );
    assert!(pixel_bytes(image.width, image.height) <= MAX_PNG_PIXEL_BYTES);
    // The largest that fits: a hundredth more would not.
    let next = image.scale + 0.01;
    assert!(
        pixel_bytes(
            (chart.width as f32 * next).ceil() as u32,
            (chart.height as f32 * next).ceil() as u32
        ) > MAX_PNG_PIXEL_BYTES
    );
}

/// Too large even at 1×: refused before any memory is taken, saying what would work.
#[test]
fn a_chart_too_large_even_at_1x_is_refused_saying_what_would_work() {
    let chart = svg(
        &many_groups(10_000),
        &Options {
            kind: Some(Kind::Bar),
            width: 8000,
            ..Options::default()
        },
    )
    .unwrap();
    assert!(pixel_bytes(chart.width, chart.height) > MAX_PNG_PIXEL_BYTES);
    let err = png(&chart, &Fonts::empty()).unwrap_err();
    assert!(matches!(err, ChartError::TooLarge { .. }), "{err:?}");
    let msg = err.to_string();
    for expected in ["too large", "64 MiB", "smaller width", "`limit`", "the SVG"] {
        assert!(msg.contains(expected), "{expected}: {msg}");
    }
}
