//! The chart files of the command line (`tally summarize … --chart FILE.svg|png|html`): an SVG
//! or PNG drawn by `tally-chart`, or the interactive view as a page of its own.

use std::path::Path;

use serde_json::Value;
use tally_semantic::Tool;

/// What a chart file is, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
    Html,
}

impl Format {
    pub fn of_path(path: &Path) -> Result<Format, String> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            Some("html" | "htm") => Ok(Format::Html),
            _ => Err(format!(
                "cannot tell what kind of chart to write to {}: its name does not end in .svg, .png or .html",
                path.display()
            )),
        }
    }
}

/// Draws `envelope` into `path`; says what was written, and which characters no font had.
pub fn write(
    path: &Path,
    format: Format,
    arguments: &Value,
    envelope: &Value,
    font_files: &[std::path::PathBuf],
) -> Result<Vec<String>, String> {
    let mut said = Vec::new();
    let bytes = match format {
        Format::Html => {
            said.push(format!(
                "wrote the interactive view to {} (open it in a browser; it loads nothing from the network)",
                path.display()
            ));
            tally_mcp::view::standalone_html(Tool::SummarizeRecords, arguments, envelope)
                .into_bytes()
        }
        Format::Svg | Format::Png => {
            let chart = tally_chart::svg(envelope, &tally_chart::Options::for_result(envelope))
                .map_err(|e| e.to_string())?;
            if format == Format::Svg {
                said.push(format!(
                    "wrote a {} chart ({} marks, {}×{}) to {}",
                    chart.kind,
                    chart.marks,
                    chart.width,
                    chart.height,
                    path.display()
                ));
                chart.svg.into_bytes()
            } else {
                let mut fonts = tally_chart::Fonts::system();
                for file in font_files {
                    fonts.add_file(file).map_err(|e| e.to_string())?;
                }
                let raster = tally_chart::png(&chart, &fonts).map_err(|e| e.to_string())?;
                said.push(format!(
                    "wrote a {} chart ({} marks, {}×{} pixels) to {}",
                    chart.kind,
                    chart.marks,
                    raster.width,
                    raster.height,
                    path.display()
                ));
                if let Some(warning) = raster.warning() {
                    said.push(warning);
                }
                raster.png
            }
        }
    };
    std::fs::write(path, &bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(said)
}
