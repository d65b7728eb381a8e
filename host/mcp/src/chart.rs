//! Charts of a summary for clients that show no MCP Apps view: an image block in a tool result
//! (`chart: "png"`), drawn by `tally-chart` with the same choice of chart as the views. (The
//! command line's chart files are the binary's, `chart_file.rs`.)

use serde_json::Value;
use tally_semantic::Tool;

/// The picture formats a tool result can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Image {
    Png,
    Svg,
}

/// Takes the server's `chart` argument out of a call's arguments (the engine never sees it).
/// Only `summarize_records` has one; anything but `"png"` or `"svg"` is refused with what
/// would work.
pub fn take_argument(tool: Tool, arguments: &mut Value) -> Result<Option<Image>, Value> {
    if tool != Tool::SummarizeRecords {
        return Ok(None);
    }
    let Some(given) = arguments
        .as_object_mut()
        .and_then(|a| a.remove(crate::tools::CHART))
    else {
        return Ok(None);
    };
    match given.as_str().map(str::to_ascii_lowercase).as_deref() {
        Some("png") => Ok(Some(Image::Png)),
        Some("svg") => Ok(Some(Image::Svg)),
        _ => Err(serde_json::json!({ "error": {
            "code": "invalid_argument",
            "message": format!("chart must be \"png\" or \"svg\", not {given}"),
            "parameter": crate::tools::CHART,
            "hint": "leave chart out unless the client shows images but no MCP Apps view",
            "example": { "dataset_id": arguments.get("dataset_id").cloned().unwrap_or(Value::Null), "chart": "png" },
        }})),
    }
}

/// The fonts PNG charts are drawn with: the installed ones, loaded once per process.
fn system_fonts() -> &'static tally_chart::Fonts {
    static FONTS: std::sync::OnceLock<tally_chart::Fonts> = std::sync::OnceLock::new();
    FONTS.get_or_init(tally_chart::Fonts::system)
}

/// The chart of a summary as an MCP image block.
pub fn image_block(
    format: Image,
    envelope: &Value,
) -> Result<rmcp::model::ContentBlock, tally_chart::ChartError> {
    use base64::Engine as _;
    let chart = tally_chart::svg(envelope, &tally_chart::Options::for_result(envelope))?;
    let (bytes, mime) = match format {
        Image::Svg => (chart.svg.into_bytes(), "image/svg+xml"),
        Image::Png => {
            let raster = tally_chart::png(&chart, system_fonts())?;
            if let Some(warning) = raster.warning() {
                tracing::warn!("{warning}");
            }
            (raster.png, "image/png")
        }
    };
    Ok(rmcp::model::ContentBlock::image(
        base64::engine::general_purpose::STANDARD.encode(bytes),
        mime,
    ))
}
