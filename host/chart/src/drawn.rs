//! What a chart is drawn with and what comes out: the [`Options`] asked and the [`Chart`]
//! drawn. Pure data, below the choice and the drawing that fill it.

use serde_json::Value;

use crate::kind::{Kind, MetricKind};

/// How to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Which of the result's metrics to chart (its position in `metrics`). A card shows them
    /// all.
    pub metric: usize,
    /// The kind to draw instead of the one chosen; it must be one of [`Choice::alternatives`](crate::Choice::alternatives).
    pub kind: Option<Kind>,
    /// The width in pixels (360 to 8000). The height follows from the content; a heatmap
    /// with many columns may be wider (its columns are at most [`Limits::heatmap_columns`](crate::Limits::heatmap_columns)).
    pub width: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            metric: 0,
            kind: None,
            width: 800,
        }
    }
}

impl Options {
    /// The options a result is drawn with when nothing is asked: its first metric, or, for a
    /// comparison of periods (`compare`), its first change, which is what was asked.
    pub fn for_result(envelope: &Value) -> Options {
        Options {
            metric: default_metric(envelope),
            ..Options::default()
        }
    }
}

/// The metric a result is charted by when none is asked (as `renderSummary` in
/// `host/mcp/ui/view.js` starts): the first whose kind is `change`, else the first.
pub fn default_metric(envelope: &Value) -> usize {
    envelope["data"]["metrics"]
        .as_array()
        .and_then(|metrics| {
            metrics
                .iter()
                .position(|m| m["kind"] == MetricKind::Change.as_str())
        })
        .unwrap_or(0)
}

/// A chart drawn as SVG.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// What was drawn.
    pub kind: Kind,
    /// Size in CSS pixels (the PNG is twice this, or less for a very large chart: see
    /// [`MAX_PNG_PIXEL_BYTES`](crate::MAX_PNG_PIXEL_BYTES)).
    pub width: u32,
    pub height: u32,
    /// How many data were drawn (the `<g class="mark">` elements).
    pub marks: usize,
    /// A standalone SVG document.
    pub svg: String,
}

#[cfg(test)]
mod tests {
    use super::default_metric;
    use serde_json::json;

    #[test]
    fn a_comparison_is_charted_by_its_first_change() {
        let compared = json!({ "data": { "metrics": [
            { "column": "sum:n (2010)", "kind": "sum" },
            { "column": "sum:n (2020)", "kind": "sum" },
            { "column": "sum:n change", "kind": "change" },
            { "column": "sum:n change %", "kind": "percent_change" },
        ] } });
        assert_eq!(default_metric(&compared), 2);
        let plain = json!({ "data": { "metrics": [{ "column": "count", "kind": "count" }] } });
        assert_eq!(default_metric(&plain), 0);
    }
}
