//! The layout of a prepared table: the declared fields in their canonical types, then the
//! hidden columns derived on scan (the row number, codes, shares), and the names they go by.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field as ArrowField, Schema, SchemaRef};
use tally_semantic::definition::{DataType as FieldType, DatasetDef, FieldId, MeasureId};

use super::share::Share;
use crate::error::StorageError;

/// Hidden column: the record's position in file order (the default order).
pub const ROW_COL: &str = "__tally_row";
/// Prefix reserved for hidden columns.
pub const RESERVED_PREFIX: &str = "__tally_";

/// The type of a text field in the prepared table.
pub fn text_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
}

/// The hidden 0/1 column of a `count_where` computed measure (1.0 where the record counts).
pub fn share_column(measure: MeasureId) -> String {
    format!("__tally_share_{measure}")
}

/// The hidden code column of a field.
pub fn code_column(field: FieldId) -> String {
    format!("__tally_code_{field}")
}

/// The hidden column of a field read from its files as a dictionary array (a
/// `Dictionary(UInt32, Utf8)`, one dictionary per column chunk): what a summary over data read
/// at every call numbers a key's values from, once per distinct value of a chunk.
pub fn dictionary_column(field: FieldId) -> String {
    format!("__tally_dict_{field}")
}

/// The type a declared field has in the prepared table.
pub fn canonical_type(field_type: FieldType, source: &DataType) -> Result<DataType, String> {
    use DataType::*;
    if field_type.is_numeric() {
        return match source {
            Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Ok(Int64),
            Float16
            | Float32
            | Float64
            | Decimal32(_, _)
            | Decimal64(_, _)
            | Decimal128(_, _)
            | Decimal256(_, _) => Ok(Float64),
            Null => Ok(Int64),
            Dictionary(_, value) => canonical_type(field_type, value),
            other => Err(format!(
                "is declared {} but the data column has type {other}",
                field_type.as_str()
            )),
        };
    }
    match source {
        List(_)
        | LargeList(_)
        | FixedSizeList(_, _)
        | Struct(_)
        | Map(_, _)
        | Union(_, _)
        | Binary
        | LargeBinary
        | FixedSizeBinary(_)
        | BinaryView
        | ListView(_)
        | LargeListView(_) => Err(format!(
            "has type {source} in the data, which cannot be served as text"
        )),
        Dictionary(_, value) => canonical_type(field_type, value),
        _ => Ok(text_type()),
    }
}

/// What a prepared table holds: every declared field in its canonical type, then the hidden
/// columns derived on scan (the row number, a code column per coded field, a share column per
/// `count_where` measure).
#[derive(Debug)]
pub struct Layout {
    /// Per declared field, its type in the table.
    pub targets: Vec<DataType>,
    /// The groupable single-valued text fields, grouped on their codes.
    pub coded: Vec<FieldId>,
    pub shares: Vec<Share>,
    /// The table's columns.
    pub schema: SchemaRef,
    /// The columns as stored (text as its codes).
    pub stored: SchemaRef,
    /// Whether the hidden column of each coded field is its text as a dictionary array
    /// ([`dictionary_column`], data read from its files) instead of its codes.
    pub dictionaries: bool,
}

/// A column of the table, as the scan makes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Out {
    Field(usize),
    Row,
    Code(usize),
    /// A field's text as a dictionary array (data read from its files).
    Dict(usize),
    Share(usize),
}

impl Layout {
    /// The layout of data read from its files at every call: text as `Utf8View` (there is no
    /// dictionary for the whole table; a view decoded from a dictionary page points into the
    /// page's dictionary instead of copying each value); in place of code columns, each coded
    /// field's text as a dictionary array ([`dictionary_column`]).
    pub fn streamed(def: &DatasetDef, source: &Schema) -> Result<Layout, StorageError> {
        let mut layout = Layout::of(def, source)?;
        for t in &mut layout.targets {
            if matches!(t, DataType::Dictionary(_, _)) {
                *t = DataType::Utf8View;
            }
        }
        layout.dictionaries = true;
        let mut fields: Vec<ArrowField> = def
            .fields
            .iter()
            .zip(&layout.targets)
            .map(|(f, t)| ArrowField::new(&f.name, t.clone(), true))
            .collect();
        fields.push(ArrowField::new(ROW_COL, DataType::UInt64, false));
        for &i in &layout.coded {
            fields.push(ArrowField::new(dictionary_column(i), text_type(), true));
        }
        for s in &layout.shares {
            fields.push(ArrowField::new(
                share_column(s.measure),
                DataType::Float64,
                false,
            ));
        }
        layout.schema = Arc::new(Schema::new(fields));
        Ok(layout)
    }

    /// The layout of `def` over data whose columns have the types of `source`.
    pub fn of(def: &DatasetDef, source: &Schema) -> Result<Layout, StorageError> {
        let id = def.id.as_str();
        let mut targets: Vec<DataType> = Vec::with_capacity(def.fields.len());
        for f in def.column_fields() {
            let source_type = source
                .field_with_name(&f.name)
                .map_err(|_| {
                    StorageError::backend(id, format!("column `{}` vanished from the data", f.name))
                })?
                .data_type()
                .clone();
            targets.push(
                canonical_type(f.data_type, &source_type)
                    .map_err(|m| StorageError::backend(id, format!("`{}` {m}", f.name)))?,
            );
        }
        // Dimensions and coded attributes are what summaries group by.
        let coded: Vec<FieldId> = def
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                f.is_column()
                    && f.groupable
                    && !f.data_type.is_numeric()
                    && !f.is_multi_value()
                    && (f.role == tally_semantic::definition::Role::Dim || f.codelist.is_some())
            })
            .map(|(i, _)| FieldId::at(i))
            .collect();
        let shares: Vec<Share> = def
            .computed_measures
            .iter()
            .enumerate()
            .filter_map(|(k, m)| match &m.formula {
                tally_semantic::definition::Formula::CountWhere {
                    condition_field,
                    condition_values,
                } => Some(Share {
                    measure: MeasureId::at(k),
                    field: *condition_field,
                    separator: def.fields[*condition_field].multi_value.clone(),
                    values: condition_values.clone(),
                }),
                _ => None,
            })
            .filter(|s| !def.fields[s.field].data_type.is_numeric())
            .collect();
        let mut fields: Vec<ArrowField> = def
            .fields
            .iter()
            .zip(&targets)
            .map(|(f, t)| ArrowField::new(&f.name, t.clone(), true))
            .collect();
        let stored: Vec<ArrowField> = fields
            .iter()
            .map(|f| match f.data_type() {
                DataType::Dictionary(_, _) => ArrowField::new(f.name(), DataType::UInt32, true),
                _ => f.clone(),
            })
            .collect();
        fields.push(ArrowField::new(ROW_COL, DataType::UInt64, false));
        for &i in &coded {
            fields.push(ArrowField::new(code_column(i), DataType::UInt32, false));
        }
        for s in &shares {
            fields.push(ArrowField::new(
                share_column(s.measure),
                DataType::Float64,
                false,
            ));
        }
        Ok(Layout {
            targets,
            coded,
            shares,
            schema: Arc::new(Schema::new(fields)),
            stored: Arc::new(Schema::new(stored)),
            dictionaries: false,
        })
    }

    /// Whether a field is stored as codes into a dictionary.
    pub fn is_text(&self, field: usize) -> bool {
        // A field past the stored ones (one looked up through a relation) is no column here.
        matches!(self.targets.get(field), Some(DataType::Dictionary(_, _)))
    }

    /// The indices of the text fields.
    pub fn text_fields(&self) -> Vec<usize> {
        (0..self.targets.len())
            .filter(|i| self.is_text(*i))
            .collect()
    }

    pub(crate) fn out(&self, column: usize) -> Option<Out> {
        let fields = self.targets.len();
        let codes = self.coded.len();
        match column {
            c if c < fields => Some(Out::Field(c)),
            c if c == fields => Some(Out::Row),
            c if c <= fields + codes => {
                let field = self.coded[c - fields - 1].index();
                Some(if self.dictionaries {
                    Out::Dict(field)
                } else {
                    Out::Code(field)
                })
            }
            c if c <= fields + codes + self.shares.len() => {
                Some(Out::Share(c - fields - 1 - codes))
            }
            _ => None,
        }
    }
}
