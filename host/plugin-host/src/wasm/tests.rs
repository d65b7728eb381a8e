//! Unit tests of the wasm runtime: faults read from stderr, one bindings module per WIT
//! version, and each kind of fault an error of its kind through the real sandbox.

use std::time::Duration;

use tally_plugin_api::PLUGIN_API_VERSION;

use super::bindings::SUPPORTED_VERSIONS;
use super::faults::fault_of;
use super::{PluginError, PluginLimits, ScanRequest, runtime};

/// A Python exception (componentize-py's runtime panics after writing its traceback) is
/// the fault, said with its innermost frame; a Rust panic keeps what was written before.
#[test]
fn faults_in_stderr_are_read() {
    let python = b"py: about to fail\nTraceback (most recent call last):\n  File \"/0/tally_plugin.py\", line 9, in scan\n  File \"/0/app.py\", line 53, in scan\nValueError: cannot read past row 1\nthread '<unnamed>' panicked at runtime/src/lib.rs:1:2:\nPython function threw an unexpected exception\n";
    let fault = fault_of(python).expect("a fault");
    assert_eq!(fault.verb, "raised an exception");
    assert_eq!(
        fault.message,
        "`ValueError: cannot read past row 1` (at \"app.py\", line 53, in scan)"
    );
    let rust = b"reading part 2\nthread 'main' panicked at src/lib.rs:3:4:\nbad header\n";
    let fault = fault_of(rust).expect("a fault");
    assert_eq!(fault.verb, "panicked");
    assert_eq!(fault.message, "`bad header` (at src/lib.rs:3:4)");
    assert!((fault.skip)("thread 'main' panicked at src/lib.rs:3:4:"));
    assert!(fault_of(b"nothing of note\n").is_none());
}

/// Every `since_v*` directory of the plugin API has a bindings module here (and is in
/// [`SUPPORTED_VERSIONS`]), and the newest is the version plugins are built against.
#[test]
fn one_bindings_module_per_wit_version() {
    let wit = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin-api/wit");
    let mut dirs: Vec<String> = std::fs::read_dir(&wit)
        .expect("plugin-api/wit")
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("since_v"))
                .map(str::to_string)
        })
        .collect();
    let key = |v: &String| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap()).collect() };
    dirs.sort_by_key(key);
    assert_eq!(dirs, SUPPORTED_VERSIONS);
    assert_eq!(SUPPORTED_VERSIONS.last(), Some(&PLUGIN_API_VERSION));
    let source = include_str!("bindings.rs");
    for v in SUPPORTED_VERSIONS {
        let module = format!("mod since_v{} {{", v.replace('.', "_"));
        assert!(source.contains(&module), "no `{module}` bindings for {v}");
        assert!(
            source.contains(&format!("path: \"../../plugin-api/wit/since_v{v}\"")),
            "the bindings of {v} are not generated from its own directory"
        );
    }
}

/// Each kind of fault is an error of its own kind, which the layers above act on (an
/// incomplete file is retried when it settles; the rest are reported): a file that is not
/// WebAssembly or is cut short is incomplete, a core module or another API version
/// unusable, an error the plugin returns refused, a deadline or a panic stopped.
#[test]
fn each_kind_of_fault_is_an_error_of_its_kind() {
    fn kind<T>(result: Result<T, PluginError>) -> &'static str {
        match result {
            Ok(_) => "ok",
            Err(PluginError::Unusable { .. }) => "unusable",
            Err(PluginError::Incomplete { .. }) => "incomplete",
            Err(PluginError::Refused { .. }) => "refused",
            Err(PluginError::Stopped { .. }) => "stopped",
        }
    }
    let rt = runtime().expect("the runtime");
    let read = |stem: &str| {
        std::fs::read(tally_wasm_plugins::built(stem))
            .unwrap_or_else(|e| panic!("the workspace built {stem}: {e}"))
    };
    let hostile = read("tally_test_plugin_hostile");
    assert_eq!(
        kind(rt.compile("text", b"not wasm at all", None)),
        "incomplete"
    );
    assert_eq!(
        kind(rt.compile("half", &hostile[..hostile.len() / 2], None)),
        "incomplete"
    );
    assert_eq!(
        kind(rt.compile("core", b"\0asm\x01\0\0\0", None)),
        "unusable"
    );
    assert_eq!(
        kind(rt.compile("other", &read("tally_test_plugin_wrong_version"), None)),
        "unusable"
    );

    let compiled = rt.compile("hostile", &hostile, None).expect("compiles");
    let folder = std::env::temp_dir();
    let limits = PluginLimits {
        deadline: Duration::from_millis(500),
        ..PluginLimits::default()
    };
    let scan = |mode: &str, projection: Option<Vec<String>>| {
        rt.scan(
            "hostile",
            &compiled,
            &folder,
            &limits,
            &ScanRequest {
                dataset: "hostile".into(),
                config: format!(r#"{{"mode": "{mode}"}}"#),
                projection,
                filters: Vec::new(),
                limit: None,
            },
        )
    };
    assert_eq!(kind(scan("ok", None)), "ok");
    let partial = Some(vec!["name".to_string()]);
    assert_eq!(kind(scan("late-error", partial)), "refused");
    assert_eq!(kind(scan("loop", None)), "stopped");
    assert_eq!(kind(scan("trap", None)), "stopped");
}
