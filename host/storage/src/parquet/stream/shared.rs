//! What every call's table over a stream shares: the files read (their column chunks by where
//! they lie), the columns served and where each comes from, and which text columns are read
//! as dictionaries.

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef, SchemaRef};
use datafusion::common::ScalarValue;
use tally_plugin_parquet::Footer;

use crate::backend::ServedFile;
use crate::memory::Budget;

/// Partition column: the position of a file's first record in the whole set.
pub(super) const OFFSET_COL: &str = "__tally_file_offset";
/// Virtual column: a record's position in its file.
pub(super) const ROW_NUMBER_COL: &str = "__tally_file_row";

/// One file a stream reads.
#[derive(Debug)]
pub(crate) struct StreamFile {
    pub relative: String,
    pub footer: Footer,
    /// The position of its first record among all the files of the dataset.
    pub offset: u64,
    /// Its partition values, one per key column the stream serves.
    pub values: Vec<ScalarValue>,
    /// Its column chunks by where they lie: (start, end, row group, column), the footer's.
    chunks: Arc<[tally_plugin_parquet::ChunkAt]>,
    /// Where it is an object in object storage (read by ranged requests).
    pub(super) object: Option<Arc<crate::object::ObjectFile>>,
}

impl StreamFile {
    pub fn new(
        relative: String,
        footer: Footer,
        offset: u64,
        values: Vec<ScalarValue>,
        object: Option<Arc<crate::object::ObjectFile>>,
    ) -> StreamFile {
        let chunks = footer.chunks();
        StreamFile {
            relative,
            footer,
            offset,
            values,
            chunks,
            object,
        }
    }

    /// The column chunk a range of bytes lies in, if any (row group, column, its bytes).
    pub(super) fn chunk_of(&self, range: &Range<u64>) -> Option<(usize, usize, Range<u64>)> {
        let i = self
            .chunks
            .partition_point(|(start, ..)| *start <= range.start);
        let (start, end, g, c) = *self.chunks.get(i.checked_sub(1)?)?;
        (range.end <= end).then_some((g, c, start..end))
    }

    /// The column chunks of the columns named (top-level names: every leaf of a nested
    /// column), row group by row group: what a scan of those columns without conditions reads.
    pub(super) fn chunks_of_columns(&self, names: &[&str]) -> Vec<Range<u64>> {
        let leaves: Vec<bool> = self
            .footer
            .metadata
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .map(|c| {
                c.path()
                    .parts()
                    .first()
                    .is_some_and(|p| names.contains(&p.as_str()))
            })
            .collect();
        let mut out: Vec<(usize, usize, Range<u64>)> = self
            .chunks
            .iter()
            .filter(|(.., c)| leaves.get(*c).copied().unwrap_or(false))
            .map(|(start, end, g, c)| (*g, *c, *start..*end))
            .collect();
        out.sort_by_key(|(g, c, _)| (*g, *c));
        out.into_iter().map(|(.., r)| r).collect()
    }
}

/// Where an output column of the stream comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Col {
    /// A column of the files (index into the scan's file schema).
    File(usize),
    /// A partition key (index among the keys served).
    Key(usize),
}

/// What every call's table over the stream shares.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) dataset: String,
    pub(super) files: Vec<StreamFile>,
    pub(super) served: Vec<ServedFile>,
    pub(super) extract: Option<String>,
    /// The files' columns served, in the types asked for.
    pub(super) file_schema: SchemaRef,
    /// The offset column, then the keys served.
    pub(super) partition_fields: Vec<FieldRef>,
    /// The fields asked for, then [`ROW_COL`].
    pub(super) schema: SchemaRef,
    pub(super) sources: Vec<Col>,
    pub(super) budget: Arc<Budget>,
    pub(super) rows: usize,
    /// Per file column, whether it is read as dictionaries ([`Shared::dictionary_encoded`]),
    /// decided from the footers once.
    pub(super) encoded: Vec<std::sync::OnceLock<bool>>,
}

impl Shared {
    /// Whether the file column `i` is text whose chunks are, for nine records in ten or more,
    /// dictionary-encoded on every data page: then reading it as dictionary arrays hands on
    /// each chunk's dictionary. (Of a chunk whose writer fell back to plain pages, or wrote
    /// no dictionary, the reader makes a dictionary of each batch by hashing its values:
    /// dearer than views, so worth it only for a small share of the records.) A chunk
    /// without page encoding statistics is taken at its dictionary page.
    pub(super) fn dictionary_encoded(&self, i: usize) -> bool {
        self.encoded
            .get(i)
            .is_some_and(|e| *e.get_or_init(|| self.count_encoded(i)))
    }

    /// [`Shared::dictionary_encoded`], counted over every row group of every file.
    fn count_encoded(&self, i: usize) -> bool {
        let field = self.file_schema.field(i);
        if !is_text(field.data_type()) {
            return false;
        }
        let name = field.name();
        let (mut encoded, mut all) = (0u64, 0u64);
        for f in &self.files {
            let meta = &f.footer.metadata;
            let columns = meta.file_metadata().schema_descr().columns();
            let Some(c) = columns
                .iter()
                .position(|c| c.path().parts() == [name.clone()])
            else {
                return false;
            };
            // Text stored as text: a number or date served as text would be cast into a
            // dictionary batch by batch.
            if columns[c].physical_type() != datafusion::parquet::basic::Type::BYTE_ARRAY {
                return false;
            }
            for rg in meta.row_groups() {
                let rows = u64::try_from(rg.num_rows()).unwrap_or(0);
                all += rows;
                if chunk_dictionary_encoded(rg.column(c)) {
                    encoded += rows;
                }
            }
        }
        encoded * 10 >= all * 9
    }
}

/// Whether every data page of a column chunk is dictionary-encoded ([`Shared::dictionary_encoded`]).
pub(super) fn chunk_dictionary_encoded(
    chunk: &datafusion::parquet::file::metadata::ColumnChunkMetaData,
) -> bool {
    use datafusion::parquet::basic::{Encoding, PageType};
    let dictionary =
        |e: Encoding| matches!(e, Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY);
    chunk.dictionary_page_offset().is_some()
        && match (
            chunk.page_encoding_stats_mask(),
            chunk.page_encoding_stats(),
        ) {
            (Some(mask), _) => {
                mask.is_only(Encoding::PLAIN_DICTIONARY) || mask.is_only(Encoding::RLE_DICTIONARY)
            }
            (None, Some(stats)) => stats
                .iter()
                .filter(|s| matches!(s.page_type, PageType::DATA_PAGE | PageType::DATA_PAGE_V2))
                .all(|s| dictionary(s.encoding)),
            (None, None) => true,
        }
}

/// The type of text read as a dictionary array.
pub(super) fn dictionary_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
}

pub(super) fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
}
