//! The real survey, with the reference definition unchanged, against an independent
//! computation (plain DataFusion SQL over the same Parquet file).

use std::path::PathBuf;

use datafusion::arrow::array::{Array, Float64Array, Int64Array, StringArray};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use serde_json::{Value, json};
use tally_semantic::Tool;

use crate::fixture::block_on;

fn reference_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but {} is missing", dir.display());
    }
    eprintln!("skipped: {} is absent", dir.display());
    None
}

async fn sql_rows(ctx: &SessionContext, sql: &str) -> Vec<(String, i64, f64)> {
    let batches = ctx
        .sql(sql)
        .await
        .expect("sql")
        .collect()
        .await
        .expect("collect");
    let mut out = Vec::new();
    for b in batches {
        let keys = datafusion::arrow::compute::cast(
            b.column(0),
            &datafusion::arrow::datatypes::DataType::Utf8,
        )
        .expect("cast");
        let k = keys.as_any().downcast_ref::<StringArray>().expect("key");
        let c = b
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("count");
        let r = b
            .column(2)
            .as_any()
            .downcast_ref::<Float64Array>()
            .expect("ratio");
        for i in 0..b.num_rows() {
            out.push((
                if k.is_null(i) {
                    String::new()
                } else {
                    k.value(i).to_string()
                },
                c.value(i),
                r.value(i),
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn survey_matches_plain_sql() {
    let Some(reference) = reference_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let folder = tmp.path().join("survey");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::copy(
        reference.join("procedures-survey-r6.dataset.yaml"),
        folder.join("dataset.yaml"),
    )
    .expect("yaml");
    let parquet = reference.join("procedures/procedures-survey-r6.parquet");
    std::fs::copy(&parquet, folder.join("data.parquet")).expect("parquet");
    let engine = tally_engine::Engine::open(tmp.path());
    assert!(
        engine.catalog().broken.is_empty(),
        "{:?}",
        engine.catalog().broken
    );

    block_on(async {
        let ctx = SessionContext::new();
        ctx.register_parquet(
            "t",
            parquet.to_string_lossy().as_ref(),
            ParquetReadOptions::default(),
        )
        .await
        .expect("register");

        let out = engine
            .call(
                Tool::SummarizeRecords,
                &json!({ "dataset_id": "survey", "group_by": ["所管府省庁"], "metrics": ["count", "avg:オンライン率"] }),
            )
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
        let mut got: Vec<(String, i64, f64)> = out["data"]["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                (
                    r[0].as_str().expect("k").to_string(),
                    r[1].as_i64().expect("c"),
                    r[2].as_f64().expect("r"),
                )
            })
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let want = sql_rows(
            &ctx,
            r#"SELECT "所管府省庁", count(*) AS c,
                      round(avg(CASE WHEN "オンライン化の実施状況" = '1 実施済' THEN 1.0 ELSE 0.0 END), 4) AS r
               FROM t GROUP BY "所管府省庁""#,
        )
        .await;
        assert_eq!(got.len(), 25);
        assert_eq!(got, want);

        // A few filters: exact, substring, numeric, and their combination.
        let cases = [
            (
                json!({"手続類型": ["1 申請等"]}),
                r#""手続類型" IN ('1 申請等')"#,
            ),
            (
                json!({"手続名": "届出"}),
                r#"strpos(lower(coalesce("手続名", '')), '届出') > 0"#,
            ),
            (
                json!({"総手続件数": {"$gte": 1000}}),
                r#"CAST("総手続件数" AS DOUBLE) >= 1000"#,
            ),
            (
                json!({"所管府省庁": ["国土交通省", "総務省"], "オンライン化の実施状況": {"$ne": "1 実施済"}}),
                r#""所管府省庁" IN ('国土交通省', '総務省') AND ("オンライン化の実施状況" IS NULL OR "オンライン化の実施状況" <> '1 実施済')"#,
            ),
        ];
        for (where_, sql_where) in cases {
            let out = engine
                .call(
                    Tool::QueryRecords,
                    &json!({ "dataset_id": "survey", "where": where_, "limit": 1 }),
                )
                .await
                .unwrap_or_else(|e| panic!("{}", e.to_json()));
            let total = out["data"]["total"].as_i64().expect("total");
            let batches = ctx
                .sql(&format!("SELECT count(*) FROM t WHERE {sql_where}"))
                .await
                .expect("sql")
                .collect()
                .await
                .expect("collect");
            let want = batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("count")
                .value(0);
            assert_eq!(total, want, "where {where_}");
        }
        let extra: Vec<Value> = engine
            .call(Tool::InspectDataset, &json!({ "dataset_id": "survey" }))
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()))["data"]["undeclared_columns"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            extra,
            vec![json!("オンライン化率")],
            "the extra column is listed, not served"
        );
    });
}
