//! Rasterising a chart: the PNG of its SVG.
//!
//! Drawn by resvg when the crate is built with the `png` feature (`drawn`); without it
//! (`absent`) the same functions refuse with [`ChartError::NoPng`](crate::ChartError::NoPng),
//! which says what works instead, so that callers compile and behave the same either way.

#[cfg(not(feature = "png"))]
mod absent;
#[cfg(feature = "png")]
mod drawn;

mod image;

#[cfg(not(feature = "png"))]
pub use absent::{Fonts, png};
#[cfg(feature = "png")]
pub use drawn::{Fonts, png};

pub use image::Raster;
