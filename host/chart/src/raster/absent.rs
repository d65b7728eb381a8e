//! A build without PNG charts: no fonts are loaded, and a PNG is refused with what works.

use std::path::Path;

use super::image::Raster;
use crate::drawn::Chart;
use crate::error::ChartError;

/// The fonts a PNG would be drawn with. This build draws no PNG, so none are loaded.
#[derive(Debug, Clone, Default)]
pub struct Fonts;

impl Fonts {
    /// No fonts: this build draws no PNG, so the machine's are not scanned.
    pub fn system() -> Self {
        Fonts
    }

    pub fn empty() -> Self {
        Fonts
    }

    /// Refused: fonts are for PNG charts, which this build does not draw.
    pub fn add_file(&mut self, _path: &Path) -> Result<(), ChartError> {
        Err(ChartError::NoPng)
    }

    pub fn len(&self) -> usize {
        0
    }

    pub fn is_empty(&self) -> bool {
        true
    }
}

/// Refused with [`ChartError::NoPng`]: this build draws SVG charts only.
pub fn png(_chart: &Chart, _fonts: &Fonts) -> Result<Raster, ChartError> {
    Err(ChartError::NoPng)
}
