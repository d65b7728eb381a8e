//! A text field's dictionary and the interner that builds it while the table is prepared:
//! each distinct value once, numbered, with its folded form for text search.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray, StringBuilder, UInt32Array};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, Int32Type};
use datafusion::arrow::error::ArrowError;

/// Why a batch's text column could not be interned (said in its field's error).
#[derive(Debug, thiserror::Error)]
pub(super) enum Unencodable {
    #[error("its distinct values hold more than 2 GiB of text")]
    Text,
    #[error("its distinct values hold more than 2 GiB of folded text")]
    FoldedText,
    /// The column could not be read as text.
    #[error("{0}")]
    Cast(#[from] ArrowError),
}

/// Interns a field's text values: each distinct value once, numbered in order of first
/// appearance (0 is `""`). Values are kept in one buffer and the table holds 4-byte numbers,
/// so a field of millions of distinct values costs their bytes and a few bytes each.
pub(super) struct Interner {
    table: hashbrown::HashTable<u32>,
    state: hashbrown::DefaultHashBuilder,
    offsets: Vec<i32>,
    data: Vec<u8>,
    /// Per value, its folded form (NFKC, lower case) where folding changes it, else null:
    /// what text search reads instead of folding every value at every call.
    folded: StringBuilder,
    folded_bytes: usize,
}

/// A text field's dictionary: its values (code 0 is `""`) and, per value, its folded form
/// ([`tally_semantic::names::fold`]) where folding changes it, null where the value is its own
/// folded form (most Japanese text).
#[derive(Debug, Clone)]
pub struct Dictionary {
    pub values: StringArray,
    pub folded: StringArray,
}

impl Dictionary {
    /// The dictionary of `values`, each folded here.
    pub fn of(values: StringArray) -> Dictionary {
        let folded: StringArray = (0..values.len())
            .map(|i| match tally_semantic::names::fold(values.value(i)) {
                std::borrow::Cow::Borrowed(_) => None,
                std::borrow::Cow::Owned(f) => Some(f),
            })
            .collect();
        Dictionary { values, folded }
    }
}

impl Interner {
    pub(super) fn new() -> Interner {
        let mut interner = Interner {
            table: hashbrown::HashTable::new(),
            state: Default::default(),
            offsets: vec![0],
            data: Vec::new(),
            folded: StringBuilder::new(),
            folded_bytes: 0,
        };
        let _ = interner.intern("");
        interner
    }

    fn intern(&mut self, s: &str) -> Result<u32, Unencodable> {
        use std::hash::BuildHasher;
        let bytes = s.as_bytes();
        let hash = self.state.hash_one(bytes);
        let Interner {
            table,
            state,
            offsets,
            data,
            folded,
            folded_bytes,
        } = self;
        let value = |code: u32| {
            let i = code as usize;
            &data[offsets[i] as usize..offsets[i + 1] as usize]
        };
        if let Some(code) = table.find(hash, |c| value(*c) == bytes) {
            return Ok(*code);
        }
        let end = data.len() + bytes.len();
        if end > i32::MAX as usize || offsets.len() > u32::MAX as usize - 1 {
            return Err(Unencodable::Text);
        }
        let code = (offsets.len() - 1) as u32;
        match tally_semantic::names::fold(s) {
            std::borrow::Cow::Borrowed(_) => folded.append_null(),
            std::borrow::Cow::Owned(f) => {
                *folded_bytes += f.len();
                if *folded_bytes > i32::MAX as usize {
                    return Err(Unencodable::FoldedText);
                }
                folded.append_value(f);
            }
        }
        data.extend_from_slice(bytes);
        offsets.push(end as i32);
        let (offsets, data) = (&*offsets, &*data);
        table.insert_unique(hash, code, |c| {
            let i = *c as usize;
            state.hash_one(&data[offsets[i] as usize..offsets[i + 1] as usize])
        });
        Ok(code)
    }

    /// About what it holds.
    pub(super) fn bytes(&self) -> usize {
        self.data.capacity()
            + self.offsets.capacity() * 4
            + self.table.capacity() * 5
            + self.folded_bytes
            + self.offsets.len() * 4
    }

    pub(super) fn finish(mut self) -> Dictionary {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets));
        // Every value was a `&str`: the bytes are UTF-8 (checked once more by `new`).
        Dictionary {
            values: StringArray::new(offsets, Buffer::from_vec(self.data), None),
            folded: self.folded.finish(),
        }
    }
}

/// The codes of a batch's text column, new values interned.
pub(super) fn encode(
    interner: &mut Interner,
    column: &ArrayRef,
) -> Result<UInt32Array, Unencodable> {
    let n = column.len();
    let nulls = column.logical_nulls();
    // A dictionary (Parquet pages read as such): each distinct value of the batch once.
    if let Some(dict) = column.as_dictionary_opt::<Int32Type>() {
        let values = datafusion::arrow::compute::cast(dict.values(), &DataType::Utf8)?;
        let values = values.as_string::<i32>();
        let mut codes = Vec::with_capacity(values.len());
        for i in 0..values.len() {
            codes.push(if values.is_valid(i) {
                interner.intern(values.value(i))?
            } else {
                0
            });
        }
        let keys = dict.keys();
        let out: Vec<u32> = keys
            .values()
            .iter()
            .enumerate()
            .map(|(r, k)| {
                if keys.is_valid(r) {
                    codes.get(*k as usize).copied().unwrap_or(0)
                } else {
                    0
                }
            })
            .collect();
        return Ok(UInt32Array::new(ScalarBuffer::from(out), nulls));
    }
    let mut out = Vec::with_capacity(n);
    match column.data_type() {
        DataType::Utf8View => {
            let views = column.as_string_view();
            for r in 0..n {
                out.push(if views.is_valid(r) {
                    interner.intern(views.value(r))?
                } else {
                    0
                });
            }
        }
        _ => {
            let text = datafusion::arrow::compute::cast(column, &DataType::Utf8)?;
            let strings = text.as_string::<i32>();
            for r in 0..n {
                out.push(if strings.is_valid(r) {
                    interner.intern(strings.value(r))?
                } else {
                    0
                });
            }
        }
    }
    Ok(UInt32Array::new(ScalarBuffer::from(out), nulls))
}
