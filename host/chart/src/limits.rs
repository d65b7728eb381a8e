//! How much a chart draws at most, so that its size does not grow with the result.
//!
//! A summary can have tens of thousands of groups; drawn whole, a bar chart of 10,000 groups
//! is about 260,000 px tall and its PNG about 3 GB. Past these limits a chart draws the largest
//! groups by its metric, the rest folded into one "others" group when the metric adds up (a
//! count or a sum) or left out when it does not, and says so in its notes (`pick`); the
//! result's table has them all.
//!
//! **The same as view.js `LIMITS`** (`host/mcp/ui/view.js`, `drawSummary`), so that the
//! image and the view show the same groups. Change both together.

/// The most a chart of each kind draws. [`LIMITS`] is the one value used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bars, largest first (the last "others" past the bound). view.js `LIMITS.bars`.
    pub bars: usize,
    /// Stacked bars: categories of the first grouping, by total, largest first. view.js
    /// `LIMITS.stackedCategories`.
    pub stacked_categories: usize,
    /// Stacked bars: series (the largest values of the second grouping, drawn in code order).
    /// A summary with more is chosen as a heatmap (`chooseChart` in view.js); stacked bars
    /// asked for by name draw this many.
    pub stacked_series: usize,
    /// Heatmap rows (the first grouping's largest values, largest first). view.js
    /// `LIMITS.heatmapRows`.
    pub heatmap_rows: usize,
    /// Heatmap columns (the second grouping's largest values, drawn in code order). view.js
    /// `LIMITS.heatmapColumns`.
    pub heatmap_columns: usize,
    /// Treemap tiles, largest first. view.js `LIMITS.treemapTiles`.
    pub treemap_tiles: usize,
    /// Pie slices: more groups are a treemap (`chooseChart` in view.js), so nothing is left
    /// out of a pie.
    pub pie_slices: usize,
}

/// The limits of every chart: the same as view.js `LIMITS`.
pub const LIMITS: Limits = Limits {
    bars: 100,
    stacked_categories: 60,
    stacked_series: 12,
    heatmap_rows: 60,
    heatmap_columns: 40,
    treemap_tiles: 200,
    pie_slices: 7,
};

/// The most pixel memory a PNG is rasterised into (width × height × 4 bytes): 64 MiB. A chart
/// within [`LIMITS`] at the default width fits at twice its size; a wider one is drawn at a
/// smaller scale (down to 1×), and one that does not fit even then is refused. Only the PNG
/// has this limit (the view has no raster).
pub const MAX_PNG_PIXEL_BYTES: u64 = 64 * 1024 * 1024;

/// What every note about a limit ends with.
pub(crate) const ALL_IN_TABLE: &str = "the result's table has them all.";
