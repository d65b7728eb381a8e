//! Draws a saved summarize_records result.
//!
//! ```text
//! cargo run -p tally-chart --example chart -- result.json chart.svg [chart.png] [--metric N] [--kind bar] [--font FILE]
//! ```

use std::path::PathBuf;

use anyhow::{Context, bail};
use tally_chart::{Fonts, Options};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut files: Vec<PathBuf> = Vec::new();
    let mut options = Options::default();
    let mut font_files: Vec<PathBuf> = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--metric" => options.metric = args.next().context("--metric N")?.parse()?,
            "--kind" => options.kind = Some(args.next().context("--kind KIND")?.parse()?),
            "--width" => options.width = args.next().context("--width PX")?.parse()?,
            "--font" => font_files.push(args.next().context("--font FILE")?.into()),
            _ => files.push(arg.into()),
        }
    }
    let [input, svg_out, rest @ ..] = files.as_slice() else {
        bail!(
            "usage: chart RESULT.json OUT.svg [OUT.png] [--metric N] [--kind KIND] [--width PX] [--font FILE]"
        );
    };
    let text =
        std::fs::read_to_string(input).with_context(|| format!("reading {}", input.display()))?;
    let envelope: serde_json::Value = serde_json::from_str(&text)?;
    let chart = tally_chart::svg(&envelope, &options)?;
    std::fs::write(svg_out, &chart.svg)?;
    eprintln!(
        "{}: {} chart, {}×{}, {} marks",
        svg_out.display(),
        chart.kind,
        chart.width,
        chart.height,
        chart.marks
    );
    if let Some(png_out) = rest.first() {
        let mut fonts = Fonts::system();
        for f in &font_files {
            fonts.add_file(f)?;
        }
        let image = tally_chart::png(&chart, &fonts)?;
        if let Some(warning) = image.warning() {
            eprintln!("warning: {warning}");
        }
        std::fs::write(png_out, &image.png)?;
        eprintln!("{}: {}×{}", png_out.display(), image.width, image.height);
    }
    Ok(())
}
