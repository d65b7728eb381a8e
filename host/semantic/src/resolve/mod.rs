//! Resolving a call's names against one dataset: the step between what a caller typed and
//! what the engine plans.
//!
//! A plan holds field indices into the dataset's declared fields and names taken from the
//! dataset's own vocabulary, so nothing the caller typed reaches a query plan as an
//! identifier. Every name or code that was matched in a normalised form is reported in
//! `resolved_fields`.

use serde_json::json;

use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names;

use plan::resolution;

/// Index of a field in [`crate::definition::DatasetDef::fields`].
pub use crate::definition::{FieldId, MeasureId};

mod conditions;
mod describe;
mod plan;
mod query;
mod resolver;
mod summarize;

pub use conditions::*;
pub use plan::*;
pub use query::*;
pub use summarize::*;

/// Resolves a dataset id against the ids served.
pub fn resolve_dataset<'a>(
    input: &str,
    ids: &[&'a str],
    titles: &dyn Fn(&str) -> Option<String>,
) -> Result<(&'a str, Option<Resolution>), RequestError> {
    resolve_dataset_choosing(input, ids, titles, &[])
}

/// [`resolve_dataset`], with the names the user chose for ambiguous ones: an id that fits
/// several datasets equally is refused with them (a client may ask its user to choose), unless
/// one of them was chosen.
pub fn resolve_dataset_choosing<'a>(
    input: &str,
    ids: &[&'a str],
    titles: &dyn Fn(&str) -> Option<String>,
    chosen: &[Choice],
) -> Result<(&'a str, Option<Resolution>), RequestError> {
    let fits = || names::ambiguous(input, ids.iter().copied());
    if let Some(choice) = chosen
        .iter()
        .find(|c| c.parameter == "dataset_id" && c.input == input)
        && let Some(id) = fits().into_iter().find(|id| *id == choice.name)
    {
        return Ok((
            id,
            Some(Resolution {
                parameter: "dataset_id".into(),
                input: input.to_string(),
                canonical: id.to_string(),
            }),
        ));
    }
    match names::resolve(input, ids.iter().copied()) {
        Ok(r) => Ok((r.canonical, resolution("dataset_id", input, r))),
        Err(ranked) => {
            let candidates = ranked
                .iter()
                .take(MAX_CANDIDATES)
                .map(|id| Candidate {
                    name: id.to_string(),
                    description: titles(id),
                })
                .collect();
            let fits = fits();
            let message = if fits.len() > 1 {
                format!(
                    "`{input}` is ambiguous: it fits {} datasets ({}); name one exactly",
                    fits.len(),
                    fits.iter()
                        .map(|id| format!("`{id}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                format!("no dataset `{input}` is served")
            };
            let mut err = RequestError::new(ErrorCode::UnknownDataset, message)
                .at("dataset_id")
                .candidates(candidates, ids.len())
                .sample(ids.iter().copied(), SAMPLE_SIZE)
                .hint("call list_datasets to see every dataset and its title");
            err = match ranked.first() {
                Some(best) => err.example("inspect_dataset", json!({ "dataset_id": best })),
                None => err.example("list_datasets", json!({})),
            };
            if fits.len() > 1 {
                err.ambiguous = Some(Box::new(crate::error::Ambiguous {
                    what: "dataset",
                    parameter: "dataset_id".into(),
                    input: input.to_string(),
                    choices: fits
                        .iter()
                        .map(|id| Candidate {
                            name: id.to_string(),
                            description: titles(id),
                        })
                        .collect(),
                }));
            }
            Err(err)
        }
    }
}

pub use crate::request::Choice;
