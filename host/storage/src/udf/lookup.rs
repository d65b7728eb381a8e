//! `tally_lookup`: a field looked up through a relation or a roll-up, over a [`LookupTable`]
//! a plan holds whole (and a plan sent to a cluster carries as JSON).

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

use super::text::{Memo, over_text, text_then};

/// What `tally_lookup` maps: each key (a value of the key field, as text) to its parent, for
/// a field looked up through a relation or a roll-up. Built once per table read; a plan
/// holds it whole, so planning does not grow with its size (a `CASE` of one branch per key
/// did, by seconds at 100,000 keys).
#[derive(Debug)]
pub struct LookupTable {
    index: std::collections::HashMap<String, u32>,
    parents: Vec<String>,
    keys: usize,
}

impl LookupTable {
    /// The table of `pairs` (key, parent); a key given twice keeps its first parent.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> LookupTable {
        let mut index = std::collections::HashMap::new();
        let mut parents: Vec<String> = Vec::new();
        let mut at: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
        for (key, parent) in pairs {
            if index.contains_key(&key) {
                continue;
            }
            let p = *at.entry(parent.clone()).or_insert_with(|| {
                parents.push(parent);
                (parents.len() - 1) as u32
            });
            index.insert(key, p);
        }
        let keys = index.len();
        LookupTable {
            index,
            parents,
            keys,
        }
    }

    /// The parent of `key`.
    pub fn parent(&self, key: &str) -> Option<&str> {
        self.index
            .get(key)
            .map(|p| self.parents[*p as usize].as_str())
    }

    pub fn len(&self) -> usize {
        self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// The table as JSON (`[[key, parent], …]`, keys in order), how a plan sent to a cluster
    /// carries it.
    pub fn to_json(&self) -> Vec<u8> {
        let mut pairs: Vec<(&str, &str)> = self
            .index
            .iter()
            .map(|(k, p)| (k.as_str(), self.parents[*p as usize].as_str()))
            .collect();
        pairs.sort_unstable();
        serde_json::to_vec(&pairs).unwrap_or_default()
    }

    pub fn from_json(bytes: &[u8]) -> Result<LookupTable> {
        let pairs: Vec<(String, String)> = serde_json::from_slice(bytes).map_err(|e| {
            DataFusionError::Internal(format!("a lookup table that is not one: {e}"))
        })?;
        Ok(LookupTable::new(pairs))
    }
}

/// `tally_lookup(key)`: the parent of each key in a [`LookupTable`], null where it has none.
/// Two calls are the same only over the same table.
#[derive(Debug)]
pub(super) struct Lookup {
    pub(super) signature: Signature,
    pub(super) table: Arc<LookupTable>,
    pub(super) memo: Memo,
}

impl PartialEq for Lookup {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.table, &other.table)
    }
}
impl Eq for Lookup {}
impl std::hash::Hash for Lookup {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.table), state);
    }
}

/// The name of the lookup function.
pub const LOOKUP: &str = "tally_lookup";

impl ScalarUDFImpl for Lookup {
    fn name(&self) -> &str {
        LOOKUP
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        text_then(arg_types, &[], LOOKUP)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [key] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{LOOKUP} takes 1 argument"
            )));
        };
        // A dictionary's values are looked up once, then its rows by code.
        over_text(key, args.number_rows, &self.memo, "", &|at, n| {
            let parents: datafusion::arrow::array::StringArray = (0..n)
                .map(|i| at(i).and_then(|k| self.table.parent(k)))
                .collect();
            Ok(Arc::new(parents) as ArrayRef)
        })
    }
}
