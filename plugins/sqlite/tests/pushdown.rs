//! The built library, loaded the way the host loads it: DataFusion hands SQLite the
//! projection, the conditions and the limit, and the plugin ran exactly that.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::physical_plan::displayable;
use datafusion::prelude::SessionContext;

/// The cdylib cargo built beside this test (`target/<profile>/deps/`).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let dir = exe.parent().expect("target/<profile>/deps");
    dir.join(format!(
        "{}tally_plugin_sqlite{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

fn database(dir: &std::path::Path) {
    let conn = rusqlite::Connection::open(dir.join("data.sqlite")).expect("create");
    conn.execute_batch(
        "CREATE TABLE t (id TEXT, grp TEXT, n INTEGER);
         INSERT INTO t VALUES ('a', 'x', 1), ('b', 'y', 2), ('c', 'x', 3), ('d', 'x', 4), ('e', 'y', 5);",
    )
    .expect("rows");
}

#[tokio::test]
async fn projection_filters_and_limit_reach_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    database(dir.path());
    let lib = tally_plugin_host::native::load(&library(), "the sqlite plugin").expect("loads");
    let provider = lib
        .create(
            "the sqlite plugin",
            "t",
            dir.path(),
            &serde_json::json!({ "database": "data.sqlite", "table": "t" }),
        )
        .expect("opens the table");
    let ctx = SessionContext::new();
    ctx.register_table("t", Arc::clone(&provider))
        .expect("registers");
    let df = ctx
        .sql("SELECT id FROM t WHERE grp = 'x' AND n >= 2 LIMIT 1")
        .await
        .expect("plans");
    let plan = df.create_physical_plan().await.expect("physical plan");
    let shown = displayable(plan.as_ref()).indent(false).to_string();
    assert!(
        shown.contains(r#"SQLite: SELECT "id" FROM "t" WHERE "grp" = 'x' AND "n" >= 2 ORDER BY rowid LIMIT 1 (1 rows)"#),
        "{shown}"
    );
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .expect("runs");
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 1);

    // A condition SQLite cannot run exactly stays with DataFusion; the answer is the same.
    let df = ctx
        .sql("SELECT id FROM t WHERE id LIKE '%c%' ORDER BY id")
        .await
        .expect("plans");
    let plan = df.create_physical_plan().await.expect("physical plan");
    let shown = displayable(plan.as_ref()).indent(false).to_string();
    assert!(
        shown.contains(r#"SQLite: SELECT "id" FROM "t" ORDER BY rowid (5 rows)"#),
        "{shown}"
    );
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .expect("runs");
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}

#[test]
fn bad_configs_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    database(dir.path());
    let lib = tally_plugin_host::native::load(&library(), "the sqlite plugin").expect("loads");
    let err = |config: serde_json::Value| {
        lib.create("the sqlite plugin", "t", dir.path(), &config)
            .expect_err("refused")
            .message()
            .to_string()
    };
    assert!(err(serde_json::json!({})).contains("needs `database`"));
    assert!(
        err(serde_json::json!({ "database": "../x.sqlite" })).contains("leaves the dataset folder")
    );
    assert!(
        err(serde_json::json!({ "database": "data.sqlite", "table": "nope" }))
            .contains("has no table `nope`; it has: t")
    );
    std::fs::write(
        dir.path().join("junk.sqlite"),
        b"not a database at all, just some bytes.....",
    )
    .expect("junk");
    assert!(
        err(serde_json::json!({ "database": "junk.sqlite" }))
            .contains("not a readable SQLite database")
    );
}
