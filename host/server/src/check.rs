//! `tally check DIR`: validates the datasets of a directory as the server would register them
//! and decodes every page of their data once (a file whose pages do not decode fails every
//! query, so it must fail the check); with `--deep` also prepares each dataset as a first call
//! would.

use std::path::Path;
use std::process::ExitCode;

use tally_engine::storage::Problem;
use tally_engine::storage::{DEFINITION_FILE, RegisterOptions, dataset_folders, register};
use tally_semantic::definition::{Diagnostic, load_definition, quote_name};

/// `println!` that ends quietly when stdout is closed (`tally check | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Exit code when a dataset cannot be served.
const EXIT_INVALID: u8 = crate::exit::BAD_INPUT;
/// Exit code when the directory itself cannot be read.
const EXIT_UNREADABLE: u8 = crate::exit::CONFIG;

/// What `check` was asked to do.
#[derive(Debug)]
pub struct CheckOptions {
    /// The backends datasets may name (native libraries only when allowed).
    pub backends: tally_engine::storage::Backends,
    /// Scan every plugin dataset once through its plugin (bounded by the plugin limits).
    pub scan: bool,
    /// Prepare every dataset as a first call would (every page of every data file is read
    /// by every check).
    pub deep: bool,
    pub limits: tally_engine::Limits,
}

fn print_problem(label: &str, p: &Problem) {
    let line = p.line.map(|l| format!("{l}:")).unwrap_or_default();
    let key = if p.key.is_empty() {
        String::new()
    } else {
        format!(" at `{}`", p.key)
    };
    let fix = if p.fix.is_empty() {
        String::new()
    } else {
        format!(" Fix: {}", p.fix)
    };
    say!("{label}:{line} error{key}: {}{fix}", p.reason);
}

pub fn run(dir: &Path, options: &CheckOptions) -> ExitCode {
    if let Err(e) = std::fs::read_dir(dir) {
        eprintln!("tally check: cannot read {}: {e}", dir.display());
        return ExitCode::from(EXIT_UNREADABLE);
    }
    let mut folders = dataset_folders(dir);
    folders.sort();
    let register_options = RegisterOptions {
        backends: options.backends.clone(),
        memory_budget: options.limits.memory_budget_bytes,
        serving: options.limits.serving,
        check_objects: false,
    };
    let mut check = Check::default();
    for folder in folders {
        check.register(dir, &folder, &register_options, &options.limits);
    }
    check.link();
    if !check.served.is_empty() {
        if let Err(code) = check.prepare(dir, options) {
            return code;
        }
    } else {
        for (_, label) in std::mem::take(&mut check.served) {
            check.ok += 1;
            say!("{label}: ok");
        }
    }
    let Check { ok, broken, .. } = check;
    say!("{ok} dataset(s) valid, {broken} invalid");
    if broken > 0 {
        ExitCode::from(EXIT_INVALID)
    } else {
        ExitCode::SUCCESS
    }
}

/// What a check has found so far: how many datasets are valid and invalid, and the datasets
/// registered (id and label) with their definitions, still to be linked and prepared.
#[derive(Default)]
struct Check {
    ok: usize,
    broken: usize,
    served: Vec<(String, String)>,
    defs: std::collections::HashMap<String, tally_semantic::DatasetDef>,
}

impl Check {
    /// Reads, validates and registers the dataset of one folder, as the server would.
    fn register(
        &mut self,
        dir: &Path,
        folder: &Path,
        register_options: &RegisterOptions,
        limits: &tally_engine::Limits,
    ) {
        let folder_id = folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let yaml = folder.join(DEFINITION_FILE);
        // Names are escaped: a folder name with a newline must not forge output lines.
        let shown = quote_name(&folder_id);
        let shown = shown.trim_matches('`');
        let label = format!("{}/{shown}/{DEFINITION_FILE}", dir.display());
        if !yaml.is_file() {
            return;
        }
        if let Some(p) = tally_engine::storage::outside(dir, folder) {
            print_problem(&label, &p);
            self.broken += 1;
            return;
        }
        let text = match tally_engine::storage::read_small(
            &yaml,
            tally_semantic::yaml::MAX_DOCUMENT_BYTES,
        ) {
            Ok(t) => t,
            Err(e) => {
                say!("{label}: error: {e}");
                self.broken += 1;
                return;
            }
        };
        let (def, diagnostics) = read_definition(&label, &folder_id, &text);
        for d in &diagnostics {
            say!("{d}");
        }
        if def.is_none() {
            self.broken += 1;
            return;
        }
        // The definition must also fit its data: registration reads the data's metadata and
        // checks every declared field against it, exactly as the server does.
        match register(folder, &folder_id, &label, register_options) {
            Ok(Some(ds)) => {
                if let Err(p) = every_page(&ds, limits) {
                    print_problem(&label, &p);
                    self.broken += 1;
                    return;
                }
                if !ds.def.undeclared.is_empty() {
                    let from = if ds.def.backend.kind
                        == tally_semantic::definition::BackendKind::Parquet
                    {
                        "the data has"
                    } else {
                        "the plugin produces"
                    };
                    say!(
                        "{label}: note: {from} columns dataset.yaml does not declare, so they are not served: {}",
                        ds.def.undeclared.join(", ")
                    );
                }
                self.defs.insert(folder_id.clone(), ds.def.clone());
                self.served.push((folder_id.clone(), label));
            }
            Ok(None) => {
                self.ok += 1;
                say!("{label}: ok (disabled)");
            }
            Err(refusal) => {
                self.broken += 1;
                for p in refusal.problems {
                    print_problem(&label, &p);
                }
            }
        }
    }

    /// Drops the registered datasets whose links do not hold, printing why.
    fn link(&mut self) {
        let Check {
            broken,
            served,
            defs,
            ..
        } = self;
        // Links between datasets: each needs the other dataset and its fields.
        served.retain(|(id, label)| {
            let problems = defs
                .get(id)
                .map(|d| link_problems(d, defs))
                .unwrap_or_default();
            for p in &problems {
                print_problem(label, p);
            }
            if problems.is_empty() {
                true
            } else {
                *broken += 1;
                false
            }
        });
    }

    /// Prepares each registered dataset as the server's first call would, when it is to be
    /// read; `Err` when no runtime can be started.
    fn prepare(&mut self, dir: &Path, options: &CheckOptions) -> Result<(), ExitCode> {
        // Prepare each dataset as the server's first call would: through its backend (a
        // plugin's scan included), within the memory budget.
        let Some(runtime) = crate::runtime::runtime() else {
            return Err(ExitCode::from(crate::exit::FAILED));
        };
        let mut limits = options.limits;
        // A deep check may take as long as the data needs.
        limits.call_timeout = std::time::Duration::from_secs(3600);
        let engine = std::sync::Arc::new(tally_engine::Engine::open_with_backends(
            dir,
            limits,
            options.backends.clone(),
        ));
        for (id, label) in std::mem::take(&mut self.served) {
            self.prepare_one(&runtime, &engine, &id, &label, options);
        }
        Ok(())
    }

    /// Reads one dataset through the engine if the options (or its coded fields) ask for it,
    /// and says how it went.
    fn prepare_one(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        engine: &std::sync::Arc<tally_engine::Engine>,
        id: &str,
        label: &str,
        options: &CheckOptions,
    ) {
        let view = tally_mcp::view::View::of(engine, tally_mcp::view::Caller::operator());
        let plugin = view.dataset(id).is_some_and(|ds| {
            ds.def.backend.kind != tally_semantic::definition::BackendKind::Parquet
        });
        // A coded field declared single-valued may hold several codes in a cell: the
        // data says so, not the definition, so a dataset with such a field is read
        // (within a million records without --deep; a check stays quick on large data).
        let coded_single = view.dataset(id).is_some_and(|ds| {
            ds.record_count().is_some_and(|n| n <= 1_000_000)
                && ds.def.fields.iter().any(|f| {
                    !f.is_multi_value()
                        && matches!(
                            f.codelist,
                            Some(tally_semantic::definition::Codelist::Static(_))
                        )
                })
        });
        // A relation is followed once: the related dataset read, its keys checked unique.
        let related: Vec<String> = view
            .dataset(id)
            .map(|ds| {
                ds.def
                    .fields
                    .iter()
                    .filter(|f| {
                        matches!(
                            f.derived.as_ref().map(|d| &d.source),
                            Some(tally_semantic::definition::DerivedSource::Relation { .. })
                        )
                    })
                    .map(|f| f.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        for field in &related {
            let arguments =
                serde_json::json!({ "dataset_id": id, "group_by": [field], "limit": 1 });
            if let Err(e) = runtime.block_on(view.call(
                engine,
                tally_semantic::request::Tool::SummarizeRecords,
                arguments,
            )) {
                self.broken += 1;
                say!("{label}: error: {e}");
                return;
            }
        }
        let read = if plugin {
            options.deep || options.scan
        } else {
            options.deep || coded_single
        };
        if !read {
            self.ok += 1;
            say!("{label}: ok");
            return;
        }
        let arguments = serde_json::json!({ "dataset_id": id });
        let result = runtime.block_on(view.call(
            engine,
            tally_semantic::request::Tool::InspectDataset,
            arguments,
        ));
        let notes: Vec<String> = result
            .as_ref()
            .ok()
            .and_then(|envelope| envelope["data"]["definition_warnings"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|w| w.as_str())
            .filter(|w| w.contains("declared with one value per cell"))
            .map(str::to_string)
            .collect();
        match result {
            Ok(_) if plugin => {
                self.ok += 1;
                say!("{label}: ok (scanned through its plugin)");
            }
            Ok(_) => {
                self.ok += 1;
                say!("{label}: ok (every page read)");
            }
            Err(e) => {
                self.broken += 1;
                // One line per problem: what a plugin wrote to stderr has lines of its own.
                say!("{label}: error: {}", e.to_string().replace('\n', " | "));
            }
        }
        for note in notes {
            say!("{label}: note: {note}");
        }
    }
}

/// A definition read as `tally check` reads it (and `tally plugin test`, so both say the
/// same): the definition when it is valid, and every diagnostic, the warnings of a valid one
/// (an unknown key, which may be a typo) or the errors of one that is not. `label` names the
/// file in each diagnostic.
pub fn read_definition(
    label: &str,
    folder_id: &str,
    text: &str,
) -> (Option<tally_semantic::DatasetDef>, Vec<Diagnostic>) {
    match load_definition(label, folder_id, text) {
        Ok(loaded) => (Some(loaded.dataset), loaded.warnings),
        Err(err) => (None, err.diagnostics),
    }
}

/// What is wrong with the links of `def` (`links:`), given the datasets served: the dataset
/// linked to, its fields, and one of them a provision field (`locator: law`).
fn link_problems(
    def: &tally_semantic::DatasetDef,
    served: &std::collections::HashMap<String, tally_semantic::DatasetDef>,
) -> Vec<Problem> {
    use tally_semantic::definition::LocatorKind;
    let mut out = relation_problems(def, served);
    for (i, link) in def.links.iter().enumerate() {
        let key = format!("links[{i}]");
        let Some(target) = served.get(&link.to) else {
            let mut ids: Vec<&str> = served.keys().map(String::as_str).collect();
            ids.sort();
            out.push(Problem {
                line: None,
                key: format!("{key}.to"),
                reason: format!(
                    "links to dataset `{}`, which is not served from this directory",
                    link.to
                ),
                fix: format!(
                    "name a dataset of this directory ({}), or add `{}`",
                    ids.join(", "),
                    link.to
                ),
            });
            continue;
        };
        let linked = link.resolve(target);
        let mut located = 0;
        for (here, there) in linked.on {
            match there {
                Err(there) => out.push(Problem {
                    line: None,
                    key: format!("{key}.on.{}", def.fields[here].name),
                    reason: format!("`{there}` is not a field of `{}`", link.to),
                    fix: format!(
                        "name one of its fields: {}",
                        target
                            .fields
                            .iter()
                            .map(|f| f.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }),
                Ok(t) if target.fields[t].locator == Some(LocatorKind::Law) => located += 1,
                Ok(_) => {}
            }
        }
        if located != 1 {
            out.push(Problem {
                line: None,
                key: format!("{key}.on"),
                reason: format!(
                    "a link cites provisions through exactly one field of `{}` declared `locator: law`; this one names {located}",
                    link.to
                ),
                fix: format!(
                    "link the field holding references such as 第5条第1項 to the provision field of `{}` (its field with `locator: law`)",
                    link.to
                ),
            });
        }
        if let Err(text) = linked.text {
            out.push(Problem {
                line: None,
                key: format!("{key}.text"),
                reason: format!(
                    "`{}` has no field `{text}` to take a provision's text from",
                    link.to
                ),
                fix: "name the field holding the text with `text: <field>`".into(),
            });
        }
    }
    out
}

/// What is wrong with the relations of `def` (`relations:`), given the datasets served (the
/// related dataset, its key field and the fields lent; that its keys are unique is checked
/// when the data is read, [`Check::prepare_one`]).
fn relation_problems(
    def: &tally_semantic::DatasetDef,
    served: &std::collections::HashMap<String, tally_semantic::DatasetDef>,
) -> Vec<Problem> {
    def.relation_problems(|id| served.get(id))
        .into_iter()
        .map(|(f, reason, fix)| Problem {
            line: Some(f.pos.line),
            key: "relations".into(),
            reason,
            fix,
        })
        .collect()
}

/// Decodes every page of every column of a dataset's data files (undeclared columns too),
/// within the memory budget. Registration reads footers only and page headers are checked
/// when pages are read, so without this a file whose pages are corrupt would pass the check
/// and fail every query.
fn every_page(
    ds: &tally_engine::storage::Dataset,
    limits: &tally_engine::Limits,
) -> Result<(), Problem> {
    let budget = tally_engine::storage::Budget::new(limits.memory_budget_bytes);
    tally_engine::storage::read_every_page(ds, &budget).map_err(|reason| Problem {
        line: None,
        key: if ds.def.data_url.is_some() {
            "data".into()
        } else {
            "data_file".into()
        },
        reason,
        fix: "write the file again from its source (every query of a file whose pages do not decode fails)".into(),
    })
}
