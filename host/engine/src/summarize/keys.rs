//! Group keys: how each is read (a prepared table's codes, text numbered as the call reads
//! it, exploded parts by their codes, or the value itself), and two codes grouped as one.

use datafusion::arrow::datatypes::DataType;
use datafusion::functions::expr_fn::coalesce;
use datafusion::logical_expr::{Expr, cast, lit};
use datafusion::prelude::ident;
use tally_semantic::definition::FieldId;
use tally_semantic::resolve::SummarizePlan;
use tally_storage::dataset::{Codes, code_column, dictionary_column};
use tally_storage::udf::StreamCodes;

use crate::call::Call;
use crate::plan::Planner;

pub(super) fn explode_col(i: usize) -> String {
    format!("__tally_explode_{i}")
}

/// The column two group keys are grouped on as one.
const PAIR_KEY: &str = "__tally_key_pair";

/// What a summary groups on, and the group keys read back from its groups. Two keys that are
/// both 32-bit codes (a prepared table's code columns, text numbered as the call reads it,
/// exploded parts) are grouped as one 64-bit integer, the first code in its high half, and
/// split again once grouped: one integer is hashed and compared per record instead of two
/// columns (a third of a two-field summary's time went to grouping the two). A missing
/// value's code is 0, whether or not it is null, so a null code is taken as 0.
pub(super) fn one_key(
    group_exprs: &[Expr],
    coded: &[Option<KeyCodes>],
    names: &[String],
    schema: &datafusion::common::DFSchema,
) -> (Vec<Expr>, Vec<Expr>) {
    use datafusion::logical_expr::ExprSchemable;
    let codes = group_exprs.len() == 2
        && coded.len() == 2
        && coded.iter().all(Option::is_some)
        && group_exprs
            .iter()
            .all(|e| matches!(e.get_type(schema), Ok(DataType::UInt32)));
    if !codes {
        return (group_exprs.to_vec(), names.iter().map(ident).collect());
    }
    let half = lit(1u64 << 32);
    let wide = |e: &Expr| {
        cast(
            coalesce(vec![e.clone().unalias(), lit(0u32)]),
            DataType::UInt64,
        )
    };
    let pair = (wide(&group_exprs[0]) * half.clone() + wide(&group_exprs[1])).alias(PAIR_KEY);
    let finals = vec![
        cast(ident(PAIR_KEY) / half.clone(), DataType::UInt32).alias(&names[0]),
        cast(ident(PAIR_KEY) % half, DataType::UInt32).alias(&names[1]),
    ];
    (vec![pair], finals)
}

/// Whether the call's physical work is sent to a cluster (whose executors rebuild Tally's
/// functions by name: none that holds this server's memory can go there).
pub(super) fn on_cluster(call: &Call<'_>) -> bool {
    call.ctx
        .state()
        .config()
        .get_extension::<tally_storage::cluster::ClusterCall>()
        .is_some()
}

/// How an exploded field is split into parts numbered by code.
pub(super) enum Split {
    /// A prepared table's index of the field's parts.
    Index(std::sync::Arc<tally_storage::udf::PartIndex>),
    /// Data read from its files on this server: parts numbered as the call meets them.
    Streamed {
        codes: std::sync::Arc<StreamCodes>,
        separator: String,
    },
}

impl Split {
    /// The codes of each record's parts (a list).
    pub(super) fn codes(&self, planner: &Planner<'_>, field: FieldId) -> Expr {
        match self {
            Split::Index(index) => planner.functions.part_codes(planner.column(field), index),
            Split::Streamed { codes, separator } => {
                planner
                    .functions
                    .stream_part_codes(planner.column(field), codes, separator, false)
            }
        }
    }

    /// How many parts each record has.
    pub(super) fn count(&self, planner: &Planner<'_>, field: FieldId) -> Expr {
        match self {
            Split::Index(index) => planner.functions.part_count(planner.column(field), index),
            Split::Streamed { codes, separator } => {
                planner
                    .functions
                    .stream_part_codes(planner.column(field), codes, separator, true)
            }
        }
    }

    /// The values of the codes, as a group key.
    fn key_codes(&self) -> KeyCodes {
        match self {
            Split::Index(index) => KeyCodes::Fixed(Codes::of(index.parts.clone())),
            Split::Streamed { codes, .. } => KeyCodes::Streamed(std::sync::Arc::clone(codes)),
        }
    }
}

/// How a group key is grouped on integer codes.
pub(super) enum KeyCodes {
    /// The codes of a prepared table's code column (or of an index's parts).
    Fixed(Codes),
    /// Codes numbered by the call itself as it reads text from the files.
    Streamed(std::sync::Arc<StreamCodes>),
}

/// How a summary's group keys may be read.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyRead {
    /// A `having` tests the keys themselves (grouped on their text).
    pub(super) having_on_keys: bool,
    /// The plan is sent to a cluster (no call's code tables there).
    pub(super) on_cluster: bool,
    /// The table read has the streamed table's dictionary columns (not groups made first).
    pub(super) dictionaries: bool,
}

/// Per group key, the values of its code column when it is grouped on codes, and the key
/// expressions. A field with an integer code column is grouped on its codes (integers hash
/// far faster than strings) and the codes are turned back into values afterwards; a `having`
/// on the key itself needs the text, so then the text is grouped.
#[allow(clippy::type_complexity)]
pub(super) fn group_keys(
    planner: &Planner<'_>,
    prepared: &tally_storage::dataset::Prepared,
    plan: &SummarizePlan,
    read: KeyRead,
    indexes: &[Option<Split>],
    lookups: &crate::lookup::Lookups,
) -> (Vec<Option<KeyCodes>>, Vec<Expr>) {
    let KeyRead {
        having_on_keys,
        on_cluster,
        dictionaries,
    } = read;
    let def = planner.def;
    let part_of = |field: FieldId| {
        plan.explode
            .iter()
            .position(|e| *e == field)
            .map(explode_col)
    };
    let coded: Vec<Option<KeyCodes>> = plan
        .group_by
        .iter()
        .map(|g| match plan.explode.iter().position(|e| e == g) {
            // Exploded on part codes: the codes of the field's parts.
            Some(k) => indexes[k].as_ref().map(Split::key_codes),
            None if having_on_keys || lookups.contains_key(g) => None,
            None => match prepared.codes(*g) {
                Some(codes) => Some(KeyCodes::Fixed(codes)),
                // Text read from its files, on this server: numbered as the call meets it.
                None if !prepared.is_prepared()
                    && !on_cluster
                    && !def.fields[*g].data_type.is_numeric() =>
                {
                    Some(KeyCodes::Streamed(std::sync::Arc::new(
                        StreamCodes::default(),
                    )))
                }
                None => None,
            },
        })
        .collect();
    let group_exprs: Vec<Expr> = plan
        .group_by
        .iter()
        .zip(&coded)
        .map(|(&g, code)| {
            let text = !def.fields[g].data_type.is_numeric();
            let name = &def.fields[g].name;
            // A missing value (null or blank) is the key null, never "" (which reads like a
            // value).
            if let Some(lookup) = lookups.get(&g) {
                return crate::lookup::value(planner, lookup).alias(name);
            }
            match (part_of(g), code) {
                // Exploded parts are never empty.
                (Some(col), _) => ident(col).alias(name),
                (None, Some(KeyCodes::Fixed(_))) => ident(code_column(g)).alias(name),
                // Read as a dictionary array where the files store it so (a condition on
                // the field has it read as text: conditions are planned on the text).
                (None, Some(KeyCodes::Streamed(codes))) => {
                    let text = if dictionaries
                        && prepared.dictionary_of(g)
                        && !plan.filters.iter().any(|f| f.field == g)
                    {
                        ident(dictionary_column(g))
                    } else {
                        planner.column(g)
                    };
                    planner.functions.code(text, codes).alias(name)
                }
                // A text column without missing values is its own key: no copy of every value.
                (None, None) if text && !prepared.has_missing(g).unwrap_or(true) => {
                    planner.column(g).alias(name)
                }
                (None, None) if text => {
                    datafusion::functions::expr_fn::nullif(planner.column(g), lit("")).alias(name)
                }
                // A number is its own key, returned as a number (a year is `2020`, not "2020").
                (None, None) => planner.column(g).alias(name),
            }
        })
        .collect();
    (coded, group_exprs)
}
