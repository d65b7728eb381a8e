//! Rasterising with resvg (the `png` feature): the SVG drawn at twice its size, with the
//! fonts it is given.
//!
//! The pixels are bounded: at most [`MAX_PNG_PIXEL_BYTES`]. A chart too large for that at 2×
//! is drawn at the largest scale that fits, down to 1×; below that it is refused, before any
//! memory is taken.
//!
//! The SVG names Japanese fonts first and a generic family last; resvg takes the first it
//! finds and, per character, falls back to any loaded font that has it. A machine without a
//! Japanese font draws the labels as nothing, so the fonts' coverage of the chart's text is
//! checked and reported with the image (not as an error: the bars are still right).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use resvg::tiny_skia::{Pixmap, Transform};
use resvg::usvg::{self, fontdb};
use skrifa::MetadataProvider;

use super::image::Raster;
use crate::drawn::Chart;
use crate::error::{ChartError, render};
use crate::limits::MAX_PNG_PIXEL_BYTES;

/// Pixels per SVG pixel in the PNG: sharp on high-density screens and in print.
const SCALE: f32 = 2.0;
/// The smallest scale a chart too large for [`SCALE`] is drawn at: below it text is blurred.
const MIN_SCALE: f32 = 1.0;

/// Families tried, in order, for the generic `sans-serif` the SVG ends its font list with.
const PREFERRED: [&str; 7] = [
    "Noto Sans CJK JP",
    "Noto Sans JP",
    "IPAGothic",
    "IPAexGothic",
    "Hiragino Sans",
    "Yu Gothic",
    "Source Han Sans JP",
];

/// The fonts a PNG is drawn with: the system's, and any font files added.
#[derive(Clone)]
pub struct Fonts {
    db: Arc<fontdb::Database>,
}

impl std::fmt::Debug for Fonts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fonts")
            .field("faces", &self.db.len())
            .finish()
    }
}

impl Fonts {
    /// The fonts installed on this machine (fontconfig's directories on Linux).
    pub fn system() -> Self {
        let mut db = fontdb::Database::new();
        db.load_system_fonts();
        let mut fonts = Fonts { db: Arc::new(db) };
        fonts.set_generic_families(None);
        fonts
    }

    /// No fonts at all: text is not drawn, and [`Raster::missing_glyphs`] lists every
    /// character. For tests, and for callers that add their own files only.
    pub fn empty() -> Self {
        Fonts {
            db: Arc::new(fontdb::Database::new()),
        }
    }

    /// Adds the faces of a font file (TrueType, OpenType or a collection). The file's first
    /// family becomes the generic `sans-serif`, so a font given on the command line is used
    /// even when its family is not one the SVG names.
    pub fn add_file(&mut self, path: &Path) -> Result<(), ChartError> {
        let font_error = |reason: String| ChartError::FontFile {
            path: path.to_owned(),
            reason,
        };
        let db = Arc::make_mut(&mut self.db);
        let before: HashSet<fontdb::ID> = db.faces().map(|f| f.id).collect();
        db.load_font_file(path)
            .map_err(|e| font_error(e.to_string()))?;
        let family = db
            .faces()
            .find(|f| !before.contains(&f.id))
            .and_then(|f| f.families.first())
            .map(|(name, _)| name.clone())
            .ok_or_else(|| {
                font_error(
                    "it holds no font face that can be read; give a TrueType or OpenType file \
                     (.ttf, .otf, .ttc)"
                        .to_owned(),
                )
            })?;
        self.set_generic_families(Some(family));
        Ok(())
    }

    /// How many font faces are loaded.
    pub fn len(&self) -> usize {
        self.db.len()
    }

    pub fn is_empty(&self) -> bool {
        self.db.is_empty()
    }

    /// The characters of `text` (other than spaces and controls) that no loaded font has a
    /// glyph for, each once, in the order they first appear.
    pub fn missing_glyphs(&self, text: &str) -> Vec<char> {
        let mut seen = HashSet::new();
        let mut missing: Vec<char> = text
            .chars()
            .filter(|c| !c.is_whitespace() && !c.is_control() && seen.insert(*c))
            .collect();
        for face in self.db.faces() {
            if missing.is_empty() {
                break;
            }
            self.db.with_face_data(face.id, |data, index| {
                if let Ok(font) = skrifa::FontRef::from_index(data, index) {
                    let charmap = font.charmap();
                    missing.retain(|c| charmap.map(*c).is_none());
                }
            });
        }
        missing
    }

    /// The family the generic names (`sans-serif`, and `serif`, resvg's last resort) resolve
    /// to: `first` if given, else the first preferred Japanese family installed, else any.
    /// Without this, resvg's defaults (Arial, Times New Roman) are often not installed, and a
    /// text whose families all miss is not drawn at all.
    fn set_generic_families(&mut self, first: Option<String>) {
        let installed = |name: &str| {
            self.db
                .faces()
                .any(|f| f.families.iter().any(|(n, _)| n == name))
        };
        let family = first
            .or_else(|| {
                PREFERRED
                    .iter()
                    .find(|n| installed(n))
                    .map(|n| (*n).to_owned())
            })
            .or_else(|| {
                self.db
                    .faces()
                    .find_map(|f| f.families.first().map(|(n, _)| n.clone()))
            });
        if let Some(family) = family {
            let db = Arc::make_mut(&mut self.db);
            db.set_sans_serif_family(family.clone());
            db.set_serif_family(family);
        }
    }
}

/// Draws `chart` as a PNG at twice its size (less for a very large chart, see
/// [`MAX_PNG_PIXEL_BYTES`]) with `fonts`, and says which of its characters no font could draw.
///
/// A chart whose pixels pass [`MAX_PNG_PIXEL_BYTES`] even at 1× is refused with
/// [`ChartError::TooLarge`].
pub fn png(chart: &Chart, fonts: &Fonts) -> Result<Raster, ChartError> {
    // Checked on the chart's own size first, so that a chart too large is refused before its
    // SVG is parsed.
    let scale = fitting_scale(chart.width, chart.height)?;
    let options = usvg::Options {
        fontdb: fonts.db.clone(),
        font_family: "sans-serif".to_owned(),
        languages: vec!["ja".to_owned(), "en".to_owned()],
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(&chart.svg, &options).map_err(render)?;
    let size = tree.size();
    let (width, height) = scaled(size.width(), size.height(), scale);
    if pixel_bytes(width, height) > MAX_PNG_PIXEL_BYTES {
        // The SVG's size is the chart's; only a chart built by hand can differ.
        return Err(too_large(chart.width, chart.height));
    }
    let mut pixmap = Pixmap::new(width, height)
        .ok_or_else(|| render(format!("cannot allocate a {width}×{height} image")))?;
    resvg::render(
        &tree,
        Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    let png = pixmap.encode_png().map_err(render)?;
    Ok(Raster {
        png,
        width,
        height,
        scale,
        missing_glyphs: fonts.missing_glyphs(&svg_text(&chart.svg)?),
    })
}

fn scaled(width: f32, height: f32, scale: f32) -> (u32, u32) {
    (
        (width * scale).ceil() as u32,
        (height * scale).ceil() as u32,
    )
}

fn pixel_bytes(width: u32, height: u32) -> u64 {
    u64::from(width) * u64::from(height) * 4
}

/// The largest scale from [`SCALE`] down to [`MIN_SCALE`], in hundredths, at which a chart of
/// `width` × `height` has at most [`MAX_PNG_PIXEL_BYTES`] of pixels.
fn fitting_scale(width: u32, height: u32) -> Result<f32, ChartError> {
    let fits = |scale: f32| {
        let (w, h) = scaled(width as f32, height as f32, scale);
        pixel_bytes(w, h) <= MAX_PNG_PIXEL_BYTES
    };
    if fits(SCALE) {
        return Ok(SCALE);
    }
    // Near the exact root, then down by hundredths past any rounding up of the sides.
    let exact = (MAX_PNG_PIXEL_BYTES as f64 / pixel_bytes(width, height) as f64).sqrt();
    let mut hundredths = ((exact * 100.0).floor() as i32).min((SCALE * 100.0) as i32);
    while hundredths >= (MIN_SCALE * 100.0) as i32 {
        let scale = hundredths as f32 / 100.0;
        if fits(scale) {
            return Ok(scale);
        }
        hundredths -= 1;
    }
    Err(too_large(width, height))
}

fn too_large(width: u32, height: u32) -> ChartError {
    ChartError::TooLarge {
        width,
        height,
        bytes: pixel_bytes(width, height),
        max_bytes: MAX_PNG_PIXEL_BYTES,
    }
}

/// The text the SVG shows (its `<text>` elements), read from the document itself so that it
/// does not depend on which fonts were found.
fn svg_text(svg: &str) -> Result<String, ChartError> {
    let doc = usvg::roxmltree::Document::parse(svg).map_err(render)?;
    Ok(doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .flat_map(|n| n.descendants().filter_map(|t| t.text()))
        .collect::<Vec<_>>()
        .join(" "))
}
