//! The real e-Gov law XML (`../shared/reference/laws`) through the built-in law plugin and
//! the `tally` binary: a law named by its e-Gov short title (`LawTitle`'s `Abbrev`) or its law
//! number, in kanji or in digits, finds the records of its full title, disclosed; a call on a
//! title no law has names the condition that excludes every record. Skipped when the
//! reference folder is absent, failing under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// The definition of `examples/laws`, the one to copy: its `law_title` declares
/// `aliases: [law_abbrev, law_num]`.
fn definition() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/laws/dataset.yaml"),
    )
    .expect("examples/laws/dataset.yaml")
}

fn reference_laws() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/laws");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "CI=true but the reference laws {} are missing; CI must provide ../shared/reference",
            dir.display()
        );
    }
    eprintln!("skipped: {} is absent", dir.display());
    None
}

/// A datasets folder holding `laws`: the reference XML and the example definition.
fn datasets(laws: &Path) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("datasets folder");
    let xml = root.path().join("laws/xml");
    std::fs::create_dir_all(&xml).expect("xml folder");
    for entry in std::fs::read_dir(laws).expect("reference laws") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "xml") {
            std::fs::copy(&path, xml.join(path.file_name().expect("name"))).expect("copied");
        }
    }
    std::fs::write(root.path().join("laws/dataset.yaml"), definition()).expect("definition");
    root
}

fn call(root: &Path, tool: &str, conditions: &Value, extra: &[&str]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args([tool, "laws", "--where", &conditions.to_string()])
        .args(extra)
        .arg("--datasets")
        .arg(root)
        // A cache of this folder's own: the compiled plugin and the prepared laws are kept
        // for the next command, never taken from the user's.
        .arg("--cache-dir")
        .arg(root.join(".cache"))
        .arg("--compact")
        .env_remove("TALLY_NO_CACHE")
        .output()
        .expect("tally runs");
    assert!(
        o.status.success(),
        "{conditions}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("an envelope")
}

/// (locator of each row) of a query's page.
fn locators(env: &Value) -> Vec<String> {
    env["data"]["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r[1].as_str().unwrap_or_default().to_string())
        .collect()
}

const FULL: &str = "不正アクセス行為の禁止等に関する法律";

/// Regression (issue 37, "law short titles"): `{"law_title": ["不正アクセス禁止法"]}` found
/// no record (the law plugin compared the short title with the full one), and the hint said
/// "no single condition explains the empty result".
#[test]
fn a_law_is_found_by_its_short_title_and_its_law_number() {
    let Some(laws) = reference_laws() else {
        return;
    };
    let root = datasets(&laws);
    let select = [
        "--select",
        "law_title",
        "--select",
        "locator",
        "--limit",
        "500",
    ];
    let full = call(root.path(), "query", &json!({"law_title": [FULL]}), &select);
    let total = full["data"]["total"].as_u64().expect("total");
    assert!(total > 20, "the law has its paragraphs and items: {total}");
    let expected = locators(&full);
    for (typed, read) in [
        ("不正アクセス禁止法", format!("{FULL} (its law_abbrev)")),
        (
            "平成十一年法律第百二十八号",
            format!("{FULL} (its law_num)"),
        ),
        (
            "平成11年法律第128号",
            format!("{FULL} (its law_num 平成十一年法律第百二十八号)"),
        ),
    ] {
        let env = call(
            root.path(),
            "query",
            &json!({"law_title": [typed]}),
            &select,
        );
        assert_eq!(env["data"]["total"].as_u64(), Some(total), "{typed}");
        assert_eq!(locators(&env), expected, "{typed}: the same records");
        assert_eq!(
            env["data"]["resolved_fields"],
            json!([{"parameter": "where.law_title value", "input": typed, "canonical": read}]),
            "{typed}"
        );
        let steps = env["provenance"]["transformations"].to_string();
        assert!(steps.contains(&format!("`{typed}` read as")), "{steps}");
        let summary = call(
            root.path(),
            "summarize",
            &json!({"law_title": [typed]}),
            &["--group-by", "law_title"],
        );
        assert_eq!(summary["data"]["rows"], json!([[FULL, total]]), "{typed}");
    }
    // Any one of a law's several short titles (マイナンバー法,個人番号法,番号法).
    let env = call(
        root.path(),
        "summarize",
        &json!({"law_title": ["番号法"]}),
        &["--group-by", "law_title"],
    );
    assert_eq!(
        env["data"]["rows"][0][0],
        "行政手続における特定の個人を識別するための番号の利用等に関する法律"
    );
}

#[test]
fn an_empty_result_names_the_condition_that_excludes_every_record() {
    let Some(laws) = reference_laws() else {
        return;
    };
    let root = datasets(&laws);
    let env = call(
        root.path(),
        "query",
        &json!({"law_title": ["不正アクセス法"], "unit": ["item"]}),
        &[],
    );
    assert_eq!(env["data"]["total"], 0);
    let hints: Vec<&str> = env["data"]["hints"]
        .as_array()
        .expect("hints")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        hints
            .iter()
            .any(|h| h.starts_with("`law_title in [\"不正アクセス法\"]` alone matches no record")),
        "{hints:?}"
    );
    assert!(
        hints.iter().any(|h| h
            .starts_with("without `law_title in [\"不正アクセス法\"]` the other conditions match")),
        "{hints:?}"
    );
    assert!(
        hints
            .iter()
            .any(|h| h.contains("`不正アクセス禁止法` (the law_abbrev of")),
        "the short title is offered: {hints:?}"
    );
    assert!(
        !hints.iter().any(|h| h.contains("no single condition")),
        "{hints:?}"
    );
}
