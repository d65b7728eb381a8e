//! A build without the `png` feature: SVG charts as ever, a PNG refused with what works.

use tally_chart::{ChartError, Fonts, Options, png, svg};

use crate::common::*;

#[test]
fn a_png_is_refused_with_the_svg_and_the_build_that_draws_it() {
    let chart = svg(&by_ministry(5), &Options::default()).unwrap();
    assert!(chart.svg.contains("<svg"), "the SVG is drawn");
    let e = png(&chart, &Fonts::system()).unwrap_err();
    assert!(matches!(e, ChartError::NoPng), "{e:?}");
    let said = e.to_string();
    assert!(said.contains("chart: \"svg\""), "{said}");
    assert!(said.contains("--features png-charts"), "{said}");
    let mut fonts = Fonts::empty();
    assert!(fonts.is_empty());
    assert!(matches!(
        fonts.add_file(std::path::Path::new("NotoSansCJK.ttc")),
        Err(ChartError::NoPng)
    ));
}
