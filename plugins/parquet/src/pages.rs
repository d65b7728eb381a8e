//! Page headers, read before any page is decoded.
//!
//! The Parquet reader trusts each page header's `uncompressed_page_size`: it reserves that
//! much before decompressing, and some codecs (Snappy) zero all of it. A 100-byte page that
//! claims 2 GB would take 2 GB. So every page header of the column chunks about to be decoded
//! is read first (Thrift compact protocol, only the three sizes of `PageHeader` are kept, the
//! rest skipped with a depth bound) and checked: pages lie inside their chunk, and a page may
//! not claim more than [`MAX_EXPANSION`](MAX_EXPANSION) times its compressed size (past
//! a 1 MiB floor) nor more than its chunk declares in all.

use datafusion::parquet::file::metadata::ParquetMetaData;

/// How much larger a column chunk may say it is once decompressed than on disk. Real files
/// stay far below (dictionary and run-length encoding happen before compression); a page
/// that claims more is a decompression bomb.
pub const MAX_EXPANSION: i64 = 1000;

/// A page header's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageSizes {
    uncompressed: i64,
    compressed: i64,
    /// Bytes of the header itself.
    header: usize,
    /// Data pages of format v2: bytes of levels stored, uncompressed, before the values.
    levels: usize,
}

/// Checks the page headers of the given top-level columns (all when empty) of every row
/// group: `Err` says which page of which column lies.
pub fn check(bytes: &[u8], metadata: &ParquetMetaData, columns: &[usize]) -> Result<(), String> {
    let schema = metadata.file_metadata().schema_descr();
    for (g, group) in metadata.row_groups().iter().enumerate() {
        for (c, column) in group.columns().iter().enumerate() {
            let root = schema.get_column_root_idx(c);
            if !columns.is_empty() && !columns.contains(&root) {
                continue;
            }
            let (start, size) = chunk_range(column, g)?;
            let end = start.saturating_add(size).min(bytes.len());
            let Some(chunk) = bytes.get(start..end) else {
                return Err(format!(
                    "column `{}` of row group {g} lies past the end of the file",
                    column.column_path().string()
                ));
            };
            check_pages(chunk, column, g)?;
        }
    }
    Ok(())
}

/// Where a column chunk's bytes lie in its file: the offset of its first page (the
/// dictionary page, if any) and its compressed size.
pub fn chunk_range(
    column: &datafusion::parquet::file::metadata::ColumnChunkMetaData,
    group: usize,
) -> Result<(usize, usize), String> {
    let start = column
        .dictionary_page_offset()
        .filter(|o| *o > 0)
        .unwrap_or(i64::MAX)
        .min(column.data_page_offset());
    match (
        usize::try_from(start),
        usize::try_from(column.compressed_size()),
    ) {
        (Ok(start), Ok(size)) => Ok((start, size)),
        _ => Err(format!(
            "column `{}` of row group {group} has a negative offset or size",
            column.column_path().string()
        )),
    }
}

/// Checks the pages in `bytes`, which start at a page header of the column chunk `column` of
/// row group `group` and end at a page boundary (a whole chunk, or the pages a reader
/// fetches): headers readable, no page claiming more than the chunk declares in all or more
/// than [`MAX_EXPANSION`](MAX_EXPANSION) times its size, none inflating past its claim,
/// none running past the end.
pub fn check_pages(
    bytes: &[u8],
    column: &datafusion::parquet::file::metadata::ColumnChunkMetaData,
    group: usize,
) -> Result<(), String> {
    let g = group;
    let name = column.column_path().string();
    let end = bytes.len();
    let declared = column.uncompressed_size();
    let mut at = 0usize;
    let mut page = 0usize;
    while at < end {
        let sizes = read_header(&bytes[at..end]).map_err(|e| {
            format!(
                "page {page} of column `{name}` in row group {g} has an unreadable header ({e})"
            )
        })?;
        if sizes.compressed < 0 || sizes.uncompressed < 0 {
            return Err(format!(
                "page {page} of column `{name}` in row group {g} declares a negative size"
            ));
        }
        if sizes.uncompressed > declared.max(0) {
            return Err(format!(
                "page {page} of column `{name}` in row group {g} claims {} bytes once decompressed, more than the {declared} its column chunk declares in all",
                sizes.uncompressed
            ));
        }
        if sizes.uncompressed > (1 << 20)
            && sizes.uncompressed / sizes.compressed.max(1) > MAX_EXPANSION
        {
            return Err(format!(
                "page {page} of column `{name}` in row group {g} claims to expand from {} to {} bytes, more than {} times",
                sizes.compressed, sizes.uncompressed, MAX_EXPANSION
            ));
        }
        let body_start = at.saturating_add(sizes.header);
        let body_end = body_start
            .saturating_add(sizes.compressed as usize)
            .min(end);
        let values_start = body_start.saturating_add(sizes.levels).min(body_end);
        if let Some(body) = bytes.get(values_start..body_end) {
            let claimed = (sizes.uncompressed as u64).saturating_sub(sizes.levels as u64);
            inflates_within(column.compression(), body, claimed)
                .map_err(|e| format!("page {page} of column `{name}` in row group {g} {e}"))?;
        }
        at = at
            .saturating_add(sizes.header)
            .saturating_add(sizes.compressed as usize);
        page += 1;
    }
    if at > end {
        return Err(format!(
            "the last page of column `{name}` in row group {g} runs past its column chunk"
        ));
    }
    Ok(())
}

/// For codecs whose decoders the Parquet reader runs to the end of their input (gzip,
/// brotli, LZ4 frames), inflates the page here first, counting, and stops one byte past what
/// the header claims: a page that inflates to more than it claims is a bomb. Other codecs
/// decompress into a buffer of the claimed size and cannot exceed it.
fn inflates_within(
    codec: datafusion::parquet::basic::Compression,
    body: &[u8],
    claimed: u64,
) -> Result<(), String> {
    use datafusion::parquet::basic::Compression;
    use std::io::Read;
    let reader: Box<dyn Read + '_> = match codec {
        Compression::GZIP(_) => Box::new(flate2::read::MultiGzDecoder::new(body)),
        Compression::BROTLI(_) => Box::new(brotli::Decompressor::new(body, 4096)),
        Compression::LZ4 => Box::new(lz4_flex::frame::FrameDecoder::new(body)),
        _ => return Ok(()),
    };
    // A page inflates to at most what it claims; one byte more is the bomb.
    match std::io::copy(&mut reader.take(claimed + 1), &mut std::io::sink()) {
        Ok(n) if n > claimed => Err(format!(
            "inflates to more than the {claimed} bytes its header claims"
        )),
        // A page this check cannot read (a legacy LZ4 framing, corrupt data) is left to the
        // reader, which reports it.
        _ => Ok(()),
    }
}

/// Reads a Thrift compact `PageHeader`: field 2 `uncompressed_page_size`, field 3
/// `compressed_page_size`; everything else is skipped.
fn read_header(buf: &[u8]) -> Result<PageSizes, &'static str> {
    let mut r = Reader { buf, at: 0 };
    let (mut uncompressed, mut compressed) = (None, None);
    let mut levels = 0i64;
    let mut last = 0i16;
    loop {
        let head = r.byte()?;
        if head == 0 {
            break;
        }
        let kind = head & 0x0f;
        let delta = (head >> 4) as i16;
        let id = if delta == 0 {
            r.zigzag()? as i16
        } else {
            last + delta
        };
        last = id;
        match (id, kind) {
            (2, 5) => uncompressed = Some(r.zigzag()?),
            (3, 5) => compressed = Some(r.zigzag()?),
            // data_page_header_v2: fields 5 and 6 are the byte lengths of the levels.
            (8, 12) => {
                let mut inner_last = 0i16;
                loop {
                    let head = r.byte()?;
                    if head == 0 {
                        break;
                    }
                    let kind = head & 0x0f;
                    let delta = (head >> 4) as i16;
                    let id = if delta == 0 {
                        r.zigzag()? as i16
                    } else {
                        inner_last + delta
                    };
                    inner_last = id;
                    match (id, kind) {
                        (5 | 6, 5) => levels = levels.saturating_add(r.zigzag()?.max(0)),
                        _ => r.skip(kind, 1)?,
                    }
                }
            }
            _ => r.skip(kind, 0)?,
        }
    }
    Ok(PageSizes {
        uncompressed: uncompressed.ok_or("no uncompressed_page_size")?,
        compressed: compressed.ok_or("no compressed_page_size")?,
        header: r.at,
        levels: usize::try_from(levels).unwrap_or(usize::MAX),
    })
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

/// Nesting a header may have (its real depth is 3).
const MAX_DEPTH: usize = 16;

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, &'static str> {
        let b = *self.buf.get(self.at).ok_or("the header is cut off")?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut out = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            out |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err("a number is too long")
    }

    fn zigzag(&mut self) -> Result<i64, &'static str> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn advance(&mut self, n: usize) -> Result<(), &'static str> {
        if self.buf.len() - self.at < n {
            return Err("the header is cut off");
        }
        self.at += n;
        Ok(())
    }

    /// Skips one value of compact type `kind`.
    fn skip(&mut self, kind: u8, depth: usize) -> Result<(), &'static str> {
        if depth > MAX_DEPTH {
            return Err("the header nests too deep");
        }
        match kind {
            1 | 2 => Ok(()),
            3 => self.advance(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.advance(8),
            8 => {
                let n = usize::try_from(self.varint()?).map_err(|_| "a length is too large")?;
                self.advance(n)
            }
            9 | 10 => {
                let head = self.byte()?;
                let element = head & 0x0f;
                let mut n = u64::from(head >> 4);
                if n == 15 {
                    n = self.varint()?;
                }
                for _ in 0..n {
                    if element == 1 || element == 2 {
                        self.advance(1)?;
                    } else {
                        self.skip(element, depth + 1)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let types = self.byte()?;
                for _ in 0..n {
                    self.skip(types >> 4, depth + 1)?;
                    self.skip(types & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            12 => loop {
                let head = self.byte()?;
                if head == 0 {
                    return Ok(());
                }
                if head >> 4 == 0 {
                    self.zigzag()?;
                }
                self.skip(head & 0x0f, depth + 1)?;
            },
            _ => Err("an unknown field type"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 14, "Parquet decompression bomb"): a gzip page that inflates past
    /// what its header claims is refused before the reader (which would inflate it to the
    /// end) sees it.
    #[test]
    fn a_gzip_page_inflating_past_its_claim_is_refused() {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&vec![0u8; 8 << 20]).expect("compress");
        let body = encoder.finish().expect("finish");
        assert!(body.len() < 64 << 10, "a bomb is small: {}", body.len());
        let gzip = datafusion::parquet::basic::Compression::GZIP(Default::default());
        let err = inflates_within(gzip, &body, 1000).expect_err("a bomb");
        assert!(err.contains("more than the 1000 bytes"), "{err}");
        inflates_within(gzip, &body, 8 << 20).expect("honest");
    }

    /// A minimal compact PageHeader: type 0, uncompressed 100, compressed 50, then a
    /// data_page_header struct {num_values: 10} that must be skipped.
    #[test]
    fn reads_the_sizes_and_skips_the_rest() {
        let zig = |v: i64| {
            let mut z = ((v << 1) ^ (v >> 63)) as u64;
            let mut out = Vec::new();
            loop {
                let b = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    out.push(b);
                    return out;
                }
                out.push(b | 0x80);
            }
        };
        let mut header = vec![0x15];
        header.extend(zig(0));
        header.push(0x15);
        header.extend(zig(100));
        header.push(0x15);
        header.extend(zig(50));
        header.extend_from_slice(&[0x2c, 0x15]);
        header.extend(zig(10));
        header.extend_from_slice(&[0x00, 0x00]);
        let sizes = read_header(&header).expect("readable");
        assert_eq!(sizes.uncompressed, 100);
        assert_eq!(sizes.compressed, 50);
        assert_eq!(sizes.header, header.len());
        assert!(read_header(&header[..4]).is_err(), "cut off");
    }
}
