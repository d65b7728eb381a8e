//! `list_datasets`: the datasets a caller sees, matched by words of their id, title or
//! publisher, each with its card.

use tally_semantic::request::ListArgs;

use crate::engine::Engine;
use crate::envelope::{Provenance, TransformationType, dataset_source};
use crate::policy::Scope;
use crate::results::{DatasetCard, ListResult};

impl Engine {
    pub(crate) fn list(&self, args: ListArgs, scope: &Scope) -> (ListResult, Provenance) {
        let q = args
            .q
            .as_deref()
            .map(str::to_lowercase)
            .filter(|s| !s.trim().is_empty());
        let publisher = args
            .publisher
            .as_deref()
            .map(str::to_lowercase)
            .filter(|s| !s.trim().is_empty());
        let mut provenance = Provenance::default();
        let mut listed = Vec::new();
        let catalog = self.catalog.load_full();
        for id in catalog.datasets.keys() {
            let Some(ds) = self.seen(&catalog, id, scope) else {
                continue;
            };
            let def = &ds.def;
            let haystack = format!("{} {}", def.id, def.title).to_lowercase();
            if q.as_ref().is_some_and(|q| !haystack.contains(q.as_str())) {
                continue;
            }
            if publisher.as_ref().is_some_and(|p| {
                !def.publisher
                    .as_deref()
                    .unwrap_or("")
                    .to_lowercase()
                    .contains(p.as_str())
            }) {
                continue;
            }
            let (source, warnings) = dataset_source(&ds, &[]);
            let source_ref = provenance.cite(source);
            for w in warnings {
                provenance.warn(w);
            }
            listed.push(DatasetCard {
                dataset_id: def.id.clone(),
                version: ds.version.clone(),
                title: def.title.clone(),
                publisher: def.publisher.clone(),
                record_count: ds.record_count(),
                field_count: def.fields.len(),
                backend: ds.backend.kind(),
                source_ref,
                description: def.description.clone(),
                as_of_date: def.as_of_date.as_ref().map(|d| d.as_str().to_string()),
                published_at: def.published_at.as_ref().map(|d| d.as_str().to_string()),
                license: def.license.clone(),
                tags: def.tags.clone(),
            });
        }
        if listed.is_empty() {
            provenance.warn(if catalog.datasets.is_empty() {
                "no dataset is served, so no source is cited".to_string()
            } else {
                "no dataset matches q/publisher, so no source is cited".to_string()
            });
        }
        let mut broken: Vec<_> = catalog
            .broken
            .iter()
            .filter(|b| scope.allows(&b.folder))
            .map(crate::results::Broken::from)
            .collect();
        // A dataset served whose data could not be read at its last whole read (a plugin
        // failing on reads its registration's probe did not make) is listed as `/health`
        // lists it, with the reason; it stays served, so its version is said.
        for ds in catalog.datasets.values() {
            if !scope.allows(&ds.def.id) || broken.iter().any(|b| b.folder == ds.def.id) {
                continue;
            }
            if let Some(reason) = ds.backend.read_failure() {
                broken.push(crate::results::Broken {
                    folder: ds.def.id.clone(),
                    file: format!("{}/dataset.yaml", ds.def.id),
                    problems: vec![crate::results::Problem {
                        line: None,
                        key: String::new(),
                        reason: format!("its data could not be read at the last read of the whole of it: {reason}"),
                        fix: "the dataset is still listed and each call tries again; fix what the reason says (the plugin's author can reproduce it with `tally plugin test`)".to_string(),
                    }],
                    serving_version: Some(ds.version.clone()),
                });
            }
        }
        if !broken.is_empty() {
            provenance.warn(format!(
                "{} dataset folder(s) cannot be served; see broken_datasets",
                broken.len()
            ));
        }
        provenance.step(
            TransformationType::Filter,
            match (&args.q, &args.publisher) {
                (None, None) => "listed every served dataset".to_string(),
                _ => format!(
                    "listed datasets whose id or title contains {:?} and whose publisher contains {:?} (case-insensitive)",
                    args.q.unwrap_or_default(),
                    args.publisher.unwrap_or_default()
                ),
            },
        );
        let data = ListResult {
            total: listed.len(),
            datasets: listed,
            broken_datasets: broken,
        };
        (data, provenance)
    }
}
