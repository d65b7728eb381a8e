//! The host's side of native plugins, with libraries built to misbehave: panics at
//! construction, in scan and mid-stream become errors (the process lives on); a library of
//! another version, one without the entry point and a file that is no library are refused
//! with the reason.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::prelude::SessionContext;
use tally_plugin_host::native;

/// A cdylib cargo built beside this test (`target/<profile>/deps/`).
fn library(stem: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    exe.parent().expect("deps dir").join(format!(
        "{}{stem}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

async fn rows(provider: Arc<dyn datafusion::catalog::TableProvider>) -> Result<usize, String> {
    let ctx = SessionContext::new();
    ctx.register_table("t", provider)
        .map_err(|e| e.to_string())?;
    let df = ctx
        .sql("SELECT name, n FROM t")
        .await
        .map_err(|e| e.to_string())?;
    let batches = df.collect().await.map_err(|e| e.to_string())?;
    Ok(batches.iter().map(|b| b.num_rows()).sum())
}

#[tokio::test]
async fn panics_become_errors_and_the_next_call_works() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lib =
        native::load(&library("tally_test_native_hostile"), "the hostile library").expect("loads");
    let create = |mode: &str| {
        lib.create(
            "the hostile plugin",
            "h",
            dir.path(),
            &serde_json::json!({ "mode": mode }),
        )
    };

    let err = create("construct").expect_err("a panic while being built is an error");
    assert!(
        err.message().contains(
            "panicked while it was being built: hostile native plugin: panic while being built"
        ),
        "{}",
        err.message()
    );

    let err = rows(create("scan").expect("builds"))
        .await
        .expect_err("scan panics");
    assert!(
        err.contains(
            "native plugin `hostile` panicked during scan: hostile native plugin: panic in scan"
        ),
        "{err}"
    );

    let err = rows(create("stream").expect("builds"))
        .await
        .expect_err("the stream panics");
    assert!(
        err.contains("native plugin `hostile` panicked during a stream poll: hostile native plugin: panic in the middle of a stream"),
        "{err}"
    );

    assert_eq!(
        rows(create("ok").expect("builds")).await,
        Ok(3),
        "the next call works"
    );
}

#[test]
fn libraries_that_do_not_fit_are_refused() {
    let err = native::load(&library("tally_test_native_wrong_version"), "`future.so`")
        .expect_err("refused");
    assert_eq!(
        err.message(),
        "`future.so` was built for native plugin ABI 9.0 and DataFusion 54, but this Tally runs native plugin ABI 1.0 and DataFusion 55"
    );

    let err =
        native::load(&library("tally_test_native_no_entry"), "`other.so`").expect_err("refused");
    assert!(
        err.message()
            .contains("has no entry point `tally_native_plugin_v0`"),
        "{}",
        err.message()
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let junk = dir.path().join("junk.so");
    std::fs::write(&junk, b"this is not a shared library").expect("write");
    let err = native::load(&junk, "`junk.so`").expect_err("refused");
    assert!(
        err.message()
            .contains("`junk.so` is not a loadable shared library"),
        "{}",
        err.message()
    );
}
