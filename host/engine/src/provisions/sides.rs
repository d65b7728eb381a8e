//! The link's fields on each side, resolved once: those compared as they are, the reference
//! here and the provision there (`locator: law`), and the linked dataset's text and revision.

use tally_semantic::definition::{FieldId, LocatorKind};
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::Filter;

use crate::error::EngineError;

/// The fields a link compares: on each side those compared as they are, the reference here
/// and the provision there (`locator: law`), and the linked dataset's text and revision.
pub(super) struct Sides {
    pub(super) equal: Vec<(FieldId, FieldId)>,
    pub(super) ref_here: FieldId,
    pub(super) loc_there: FieldId,
    pub(super) text_there: Option<FieldId>,
    pub(super) revision_there: Option<FieldId>,
}

impl Sides {
    /// The link's fields resolved once, at the start of the call: those of this dataset were
    /// resolved with its definition, those of `tdef` by [`Link::resolve`].
    ///
    /// [`Link::resolve`]: tally_semantic::definition::Link::resolve
    pub(super) fn of(
        def: &tally_semantic::DatasetDef,
        tdef: &tally_semantic::DatasetDef,
        link: &tally_semantic::definition::Link,
    ) -> Result<Sides, EngineError> {
        let linked = link.resolve(tdef);
        let mut equal: Vec<(FieldId, FieldId)> = Vec::new();
        let mut located: Option<(FieldId, FieldId)> = None;
        for (h, there) in linked.on {
            let t = there.map_err(|there| {
                link_broken(
                    def,
                    &link.to,
                    &format!(
                        "`{}` or `{there}` is not a declared field",
                        def.fields[h].name
                    ),
                )
            })?;
            if tdef.fields[t].locator == Some(LocatorKind::Law) {
                located = Some((h, t));
            } else {
                equal.push((h, t));
            }
        }
        let Some((ref_here, loc_there)) = located else {
            return Err(link_broken(
                def,
                &link.to,
                &format!(
                    "none of its fields of `{}` is a provision (`locator: law`)",
                    link.to
                ),
            ));
        };
        Ok(Sides {
            equal,
            ref_here,
            loc_there,
            text_there: linked.text.ok(),
            revision_there: tdef.revisions.as_ref().and_then(|r| r.id),
        })
    }

    /// The link's fields on this side: the compared ones, then the reference.
    pub(super) fn here(&self) -> Vec<FieldId> {
        self.equal
            .iter()
            .map(|(h, _)| *h)
            .chain(std::iter::once(self.ref_here))
            .collect()
    }

    /// Conditions on the linked dataset: the values the references' compared fields name.
    pub(super) fn wanted(
        &self,
        distinct: &[(Vec<Option<String>>, u64)],
        groups: usize,
    ) -> Vec<Filter> {
        let mut wanted: Vec<Vec<String>> = vec![Vec::new(); self.equal.len()];
        for (values, _) in distinct {
            for (i, w) in wanted.iter_mut().enumerate() {
                if let Some(v) = &values[groups + i]
                    && !w.contains(v)
                {
                    w.push(v.clone());
                }
            }
        }
        self.equal
            .iter()
            .zip(&wanted)
            .map(|((_, t), values)| Filter {
                field: *t,
                op: Op::In(values.iter().map(|v| Scalar::Str(v.clone())).collect()),
            })
            .collect()
    }
}

fn link_broken(def: &tally_semantic::DatasetDef, to: &str, why: &str) -> EngineError {
    EngineError::Dataset {
        dataset: def.id.clone(),
        message: format!("its link to `{to}` cannot be followed: {why}"),
        diagnostics: Vec::new(),
    }
}
