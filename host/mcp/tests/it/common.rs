//! Datasets for the library's tests: the default `procedures` dataset of the repository, twice,
//! under two ids (a caller scoped to one must learn nothing of the other).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use tally_engine::Engine;

/// The repository's `datasets/procedures` folder.
fn procedures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/procedures")
}

/// A datasets folder holding `procedures` and `secret`, the same survey under two ids.
pub fn two_datasets() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for id in ["procedures", "secret"] {
        let folder = dir.path().join(id);
        std::fs::create_dir(&folder).expect("dataset folder");
        for file in ["dataset.yaml", "data.parquet"] {
            std::fs::copy(procedures().join(file), folder.join(file))
                .unwrap_or_else(|e| panic!("copy {file}: {e}"));
        }
    }
    dir
}

/// The engine over `dir`, with the built-in backends and default budgets.
pub fn engine(dir: &Path) -> Arc<Engine> {
    Arc::new(Engine::open(dir))
}

/// A tool result's envelope (`data`, `provenance`): its structured content, else the JSON of
/// its text.
pub fn envelope(result: &Value) -> Value {
    if result["structuredContent"].is_object() {
        return result["structuredContent"].clone();
    }
    result["content"][0]["text"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(Value::Null)
}

/// The dataset ids a `list_datasets` result lists.
pub fn ids_listed(result: &Value) -> Vec<String> {
    envelope(result)["data"]["datasets"]
        .as_array()
        .unwrap_or_else(|| panic!("datasets listed: {:.300}", result.to_string()))
        .iter()
        .filter_map(|d| d["dataset_id"].as_str().map(str::to_string))
        .collect()
}
