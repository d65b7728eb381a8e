//! Scalar functions the planner needs and DataFusion does not have in the exact form the
//! query semantics ask for.
//!
//! - `tally_parts(text, separator, keep_empty)`: the trimmed, non-empty parts of a
//!   multi-value cell as a list. With `keep_empty`, a cell without parts (null or blank) yields
//!   `[""]`, so exploding keeps the record in the empty group instead of dropping it.
//! - `tally_icontains(text, needle)`: substring under NFKC and case folding, where null counts
//!   as ""; `needle` is already folded by the caller. Written by hand because folding every
//!   value of every searched column would allocate, while most values (Japanese text) are
//!   already in folded form and are tested as they are.
//!
//! The functions live by what they do: text machinery every one shares (`text`), parts of
//! multi-value cells (`parts`), containment (`contains`), a call's codes of text read from
//! its files (`codes`), row sets (`rows_in`), lookups (`lookup`) and exact integers
//! (`exact`); [`Functions`] builds their expressions.

use std::sync::Arc;

use datafusion::logical_expr::{Expr, ScalarUDF, Signature, Volatility};
use datafusion::prelude::lit;

mod codes;
mod contains;
mod exact;
mod lookup;
mod parts;
mod rows_in;
mod text;

pub use codes::StreamCodes;
pub use contains::{ICONTAINS, icontains};
pub use exact::EXACT;
pub use lookup::{LOOKUP, LookupTable};
pub use parts::{PART_COUNT, PARTS, PartIndex, parts_type};
pub use rows_in::ROWS_IN;

use codes::{Code, StreamPartCodes};
use contains::IContains;
use exact::Exact;
use lookup::Lookup;
use parts::{PartCodes, PartCount, Parts};
use rows_in::RowsIn;
use text::Memo;

/// Builds the functions' expressions. Each expression gets an instance of its own, so what it
/// keeps of a dictionary lives as long as the plan that uses it.
#[derive(Debug, Clone, Default)]
pub struct Functions;

fn user_defined() -> Signature {
    Signature::user_defined(Volatility::Immutable)
}

impl Functions {
    /// Tally's own function of that name, made anew, when it carries nothing but its name
    /// (what an executor of a cluster rebuilds a plan's calls from). The part codes of a
    /// prepared table's index are not among them: they live in this server's memory.
    pub fn by_name(name: &str) -> Option<Arc<ScalarUDF>> {
        match name {
            PARTS => Some(Arc::new(ScalarUDF::new_from_impl(Parts {
                signature: user_defined(),
                memo: Memo::default(),
            }))),
            PART_COUNT => Some(Arc::new(ScalarUDF::new_from_impl(PartCount {
                signature: user_defined(),
                memo: Memo::default(),
            }))),
            ICONTAINS => Some(Arc::new(ScalarUDF::new_from_impl(IContains {
                signature: user_defined(),
                memo: Memo::default(),
            }))),
            EXACT => Some(Arc::new(ScalarUDF::new_from_impl(Exact {
                signature: user_defined(),
            }))),
            _ => None,
        }
    }

    /// Whether `name` is one of Tally's functions (those [`Functions::by_name`] does not
    /// make cannot be sent to a cluster).
    pub fn is_tally(name: &str) -> bool {
        name.starts_with("tally_")
    }

    pub fn parts(&self, text: Expr, separator: &str, keep_empty: bool) -> Expr {
        let udf = ScalarUDF::new_from_impl(Parts {
            signature: user_defined(),
            memo: Memo::default(),
        });
        udf.call(vec![text, lit(separator), lit(keep_empty)])
    }

    /// How many parts [`Functions::parts`] would give each cell (0: none), without the list.
    pub fn part_count_of(&self, text: Expr, separator: &str) -> Expr {
        ScalarUDF::new_from_impl(PartCount {
            signature: user_defined(),
            memo: Memo::default(),
        })
        .call(vec![text, lit(separator)])
    }

    /// The codes of a multi-value field's parts, from its index (prepared data only).
    pub fn part_codes(&self, text: Expr, index: &Arc<PartIndex>) -> Expr {
        ScalarUDF::new_from_impl(PartCodes {
            signature: user_defined(),
            index: Arc::clone(index),
            count: false,
        })
        .call(vec![text])
    }

    /// How many parts a multi-value cell has, from its field's index.
    pub fn part_count(&self, text: Expr, index: &Arc<PartIndex>) -> Expr {
        ScalarUDF::new_from_impl(PartCodes {
            signature: user_defined(),
            index: Arc::clone(index),
            count: true,
        })
        .call(vec![text])
    }

    /// An integer as the 128-bit decimal an exact sum adds (`tally_exact`).
    pub fn exact(&self, integer: Expr) -> Expr {
        ScalarUDF::new_from_impl(Exact {
            signature: user_defined(),
        })
        .call(vec![integer])
    }

    /// The code of each row's text in `codes` (data read from its files; not for a cluster).
    pub fn code(&self, text: Expr, codes: &Arc<StreamCodes>) -> Expr {
        ScalarUDF::new_from_impl(Code {
            signature: user_defined(),
            codes: Arc::clone(codes),
        })
        .call(vec![text])
    }

    /// The codes of a multi-value cell's parts in `codes`, split by `separator` (data read
    /// from its files; not for a cluster); with `count`, how many parts it has.
    pub fn stream_part_codes(
        &self,
        text: Expr,
        codes: &Arc<StreamCodes>,
        separator: &str,
        count: bool,
    ) -> Expr {
        ScalarUDF::new_from_impl(StreamPartCodes {
            signature: user_defined(),
            codes: Arc::clone(codes),
            separator: separator.to_string(),
            count,
        })
        .call(vec![text])
    }

    /// The parent of `key` (text) in `table`, null where it has none.
    pub fn lookup(&self, key: Expr, table: &Arc<LookupTable>) -> Expr {
        Functions::lookup_udf(table).call(vec![key])
    }

    /// The lookup function over `table` (what a plan received from a server rebuilds).
    pub fn lookup_udf(table: &Arc<LookupTable>) -> ScalarUDF {
        ScalarUDF::new_from_impl(Lookup {
            signature: user_defined(),
            table: Arc::clone(table),
            memo: Memo::default(),
        })
    }

    /// The table a lookup function maps with (to send it with a plan).
    pub fn lookup_table(udf: &ScalarUDF) -> Option<Arc<LookupTable>> {
        udf.inner()
            .downcast_ref::<Lookup>()
            .map(|l| Arc::clone(&l.table))
    }

    /// Whether a row number (the hidden row column of a prepared table) is among `rows`.
    pub fn rows_in(&self, row: Expr, rows: &crate::search::Found) -> Expr {
        ScalarUDF::new_from_impl(RowsIn {
            signature: user_defined(),
            rows: Arc::clone(rows),
        })
        .call(vec![row])
    }

    /// Substring test under NFKC and case folding; `needle` is folded here.
    pub fn icontains(&self, text: Expr, needle: &str) -> Expr {
        let folded = tally_semantic::names::fold(needle).into_owned();
        let udf = ScalarUDF::new_from_impl(IContains {
            signature: user_defined(),
            memo: Memo::default(),
        });
        udf.call(vec![text, lit(folded), lit(false)])
    }
}

#[cfg(test)]
mod tests;
