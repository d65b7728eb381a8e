//! The PNG a chart was drawn as, and what to tell about the text it could not draw.

/// A chart as a PNG image.
#[derive(Debug, Clone)]
pub struct Raster {
    /// The PNG file's bytes.
    pub png: Vec<u8>,
    /// Size in pixels: the chart's times `scale`.
    pub width: u32,
    pub height: u32,
    /// Pixels per chart pixel: 2, or less (down to 1) for a chart whose pixels at 2 would pass
    /// [`MAX_PNG_PIXEL_BYTES`](crate::MAX_PNG_PIXEL_BYTES).
    pub scale: f32,
    /// Characters of the chart's text that no loaded font has a glyph for: they are missing
    /// from the image.
    pub missing_glyphs: Vec<char>,
}

impl Raster {
    /// What to tell the person who asked for the image when some text could not be drawn.
    pub fn warning(&self) -> Option<String> {
        const SHOWN: usize = 12;
        if self.missing_glyphs.is_empty() {
            return None;
        }
        let mut chars: String = self.missing_glyphs.iter().take(SHOWN).collect();
        if self.missing_glyphs.len() > SHOWN {
            chars.push('…');
        }
        Some(format!(
            "no installed font has glyphs for {chars} ({} characters), so the image lacks them; \
             install a CJK font (e.g. Debian's fonts-noto-cjk) or pass --font FILE",
            self.missing_glyphs.len()
        ))
    }
}
