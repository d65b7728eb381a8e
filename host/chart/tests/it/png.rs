//! Rasterising: the image's size, that something was drawn, and what is said about fonts.

use resvg::tiny_skia::Pixmap;
use serde_json::json;
use tally_chart::{ChartError, Fonts, Options, png, svg};

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
