//! Checks of the real survey, with the reference definition unchanged, against an independent
//! computation (plain DataFusion SQL over the same Parquet file), on any engine: the engine's
//! tests (`reference.rs`) run them on one process, prepared and read at every call; the
//! cluster tests (`host/cluster`) include this file to run them through a cluster.

use std::path::{Path, PathBuf};

use datafusion::arrow::array::{Array, Float64Array, Int64Array, StringArray};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use serde_json::{Value, json};
use tally_semantic::Tool;

use crate::fixture::block_on;

fn reference_dir() -> Option<PathBuf> {
    // From host/engine or host/cluster alike.
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

/// A datasets directory holding the real survey as `survey` (its published definition and
/// data), and the reference Parquet file; `None` (said) when the reference is absent.
pub(crate) fn survey_folder() -> Option<(tempfile::TempDir, PathBuf)> {
    let reference = reference_dir()?;
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
    Some((tmp, parquet))
}

/// The survey's counts and shares by ministry and a few filters, against plain SQL, on the
/// engine `open` makes over a datasets directory.
pub fn matches_plain_sql(open: &dyn Fn(&Path) -> tally_engine::Engine) {
    let Some((tmp, parquet)) = survey_folder() else {
        return;
    };
    let engine = open(tmp.path());
    let view = engine.view(tally_engine::Caller::everyone("tests"));
    let broken: Vec<_> = view.broken().collect();
    assert!(broken.is_empty(), "{broken:?}");

    block_on(async {
        // Prepared first: these checks are about answers, not about a busy machine's time.
        engine
            .prepare(&tally_engine::Caller::operator(), "survey")
            .await;
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

/// One count from plain SQL.
pub(crate) async fn sql_count(ctx: &SessionContext, sql: &str) -> i64 {
    let batches = ctx
        .sql(sql)
        .await
        .expect("sql")
        .collect()
        .await
        .expect("collect");
    batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("count")
        .value(0)
}

/// Every column of every row as text (null as None), read with plain DataFusion.
async fn all_text(ctx: &SessionContext) -> (Vec<String>, Vec<Vec<Option<String>>>) {
    let batches = ctx
        .sql("SELECT * FROM t")
        .await
        .expect("sql")
        .collect()
        .await
        .expect("collect");
    let names: Vec<String> = batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut rows = Vec::new();
    for b in &batches {
        let cols: Vec<StringArray> = b
            .columns()
            .iter()
            .map(|c| {
                let text = datafusion::arrow::compute::cast(
                    c,
                    &datafusion::arrow::datatypes::DataType::Utf8,
                )
                .expect("cast");
                text.as_any()
                    .downcast_ref::<StringArray>()
                    .expect("utf8")
                    .clone()
            })
            .collect();
        for r in 0..b.num_rows() {
            rows.push(
                cols.iter()
                    .map(|c| (!c.is_null(r)).then(|| c.value(r).to_string()))
                    .collect(),
            );
        }
    }
    (names, rows)
}

/// Issue 15, on the real survey, each answer against an independent computation: text that
/// is written full-width is found, a code's label counts that code only, a name of an
/// undeclared column is refused, numbers as text are read, `having` and `order_by` name a
/// metric by its field, missing keys are null, and a default page fits the token budget.
#[expect(
    clippy::too_many_lines,
    reason = "one scenario: the questions a model asks, in order, each checked"
)]
pub fn answers_a_model_gets_right(open: &dyn Fn(&Path) -> tally_engine::Engine) {
    use unicode_normalization::UnicodeNormalization;
    let Some((tmp, parquet)) = survey_folder() else {
        return;
    };
    let folder = tmp.path().join("survey");
    let engine = open(tmp.path());
    let call = |tool: Tool, args: Value| {
        let engine = &engine;
        async move { engine.call(tool, &args).await }
    };
    block_on(async {
        engine
            .prepare(&tally_engine::Caller::operator(), "survey")
            .await;
        let ctx = SessionContext::new();
        ctx.register_parquet(
            "t",
            parquet.to_string_lossy().as_ref(),
            ParquetReadOptions::default(),
        )
        .await
        .expect("register");

        // Full-width text: `e-Tax` is found in `（ｅ－Ｔａｘ）`. Independently: any declared
        // text field, NFKC + lower case, contains it.
        let def_text = std::fs::read_to_string(folder.join("dataset.yaml")).expect("yaml");
        let def = tally_semantic::definition::load_definition("survey", "survey", &def_text)
            .expect("valid")
            .dataset;
        let (names, rows) = all_text(&ctx).await;
        let text_columns: Vec<usize> = def
            .fields
            .iter()
            .filter(|f| !f.data_type.is_numeric())
            .filter_map(|f| names.iter().position(|n| *n == f.name))
            .collect();
        let folded = |s: &str| s.nfkc().collect::<String>().to_lowercase();
        let want = rows
            .iter()
            .filter(|r| {
                text_columns
                    .iter()
                    .any(|&c| r[c].as_deref().is_some_and(|v| folded(v).contains("e-tax")))
            })
            .count() as i64;
        let out = call(
            Tool::QueryRecords,
            json!({"dataset_id": "survey", "q": "e-Tax", "limit": 1}),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", e.to_json()));
        assert_eq!(out["data"]["total"].as_i64(), Some(want));
        assert!(want > 1000, "the survey writes e-Tax full-width: {want}");

        // Every NFKC-equal form the data holds is matched (issue 37): the half-width
        // `電子決裁システム(EASY)` also finds the 4,277 full-width cells, `30日` the `３０日`
        // ones; `$ne` excludes every form. Independently: the cells whose NFKC form equals.
        let total_records = rows.len() as i64;
        for (field, typed) in [
            ("情報システム(事務処理)", "電子決裁システム(EASY)"),
            ("処理期間(非オンライン)", "30日"),
        ] {
            let c = names.iter().position(|n| n == field).expect("column");
            let nfkc = |s: &str| s.nfkc().collect::<String>();
            let want = rows
                .iter()
                .filter(|r| r[c].as_deref().is_some_and(|v| nfkc(v) == nfkc(typed)))
                .count() as i64;
            let forms: std::collections::BTreeSet<&str> = rows
                .iter()
                .filter_map(|r| r[c].as_deref())
                .filter(|v| nfkc(v) == nfkc(typed))
                .collect();
            assert!(
                forms.len() > 1,
                "{field}: the survey holds several forms of {typed}"
            );
            let out = call(
                Tool::SummarizeRecords,
                json!({"dataset_id": "survey", "where": {field: [typed]}}),
            )
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
            assert_eq!(
                out["data"]["rows"][0][0].as_i64(),
                Some(want),
                "{field} = {typed}"
            );
            let said = out["data"]["resolved_fields"].to_string();
            assert!(forms.iter().all(|f| said.contains(f)), "{said}");
            let out = call(
                Tool::SummarizeRecords,
                json!({"dataset_id": "survey", "where": {field: {"$ne": typed}}}),
            )
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
            assert_eq!(
                out["data"]["rows"][0][0].as_i64(),
                Some(total_records - want),
                "{field} != {typed}"
            );
        }

        // Cells holding several codes of a field the definition declares single-valued
        // (issue 37): ["3 撤廃・省略不可"] counts them too (79 records were left out), says
        // so, and inspect_dataset tells how to declare the field. Independently: SQL over
        // the `; `-separated parts.
        let field = "添付書類等提出の撤廃/省略状況";
        let code = "3 撤廃・省略不可";
        let want = sql_count(
            &ctx,
            &format!(
                r#"SELECT count(*) FROM t WHERE "{field}" = '{code}' OR array_has(string_to_array("{field}", '; '), '{code}')"#
            ),
        )
        .await;
        let alone = sql_count(
            &ctx,
            &format!(r#"SELECT count(*) FROM t WHERE "{field}" = '{code}'"#),
        )
        .await;
        assert!(
            want > alone,
            "the survey has cells of several codes: {want} vs {alone}"
        );
        let out = call(
            Tool::SummarizeRecords,
            json!({"dataset_id": "survey", "where": {field: [code]}}),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", e.to_json()));
        assert_eq!(out["data"]["rows"][0][0].as_i64(), Some(want), "{out}");
        assert!(
            out["provenance"]["warnings"]
                .to_string()
                .contains("multi_value: true"),
            "{}",
            out["provenance"]["warnings"]
        );
        let inspected = call(Tool::InspectDataset, json!({"dataset_id": "survey"}))
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
        let warnings = inspected["data"]["definition_warnings"].to_string();
        // Read from the files at every call (by this server or by a cluster's executors),
        // the extract step says so.
        let streamed = out["provenance"]["transformations"]
            .to_string()
            .contains("read from the files at this call");
        for multi in [
            field,
            "添付書類等への電子署名",
            "添付形式等が定められた規定",
        ] {
            let said = warnings.contains(&format!(
                "field `{multi}` is declared with one value per cell"
            ));
            // Said from prepared data (read from the files at every call it would cost a
            // scan per coded field; exact matches and `tally check` still say it).
            assert!(said || streamed, "{multi}: {warnings}");
        }

        // Missing values last in both directions (issue 37): ordered by the key itself,
        // ascending and descending, the null group of オンライン化実施時期 comes last.
        let missing = sql_count(
            &ctx,
            r#"SELECT count(*) FROM t WHERE "オンライン化実施時期" IS NULL OR trim("オンライン化実施時期") = ''"#,
        )
        .await;
        assert!(missing > 0, "the survey has records without a planned time");
        for order in ["オンライン化実施時期", "-オンライン化実施時期"] {
            let out = call(
                Tool::SummarizeRecords,
                json!({"dataset_id": "survey", "group_by": ["オンライン化実施時期"], "order_by": [order], "limit": 100}),
            )
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
            let rows = out["data"]["rows"].as_array().cloned().unwrap_or_default();
            let last = rows.last().cloned().unwrap_or_default();
            assert_eq!(last[0], Value::Null, "{order}: {rows:?}");
            assert_eq!(last[1].as_i64(), Some(missing), "{order}");
            assert!(
                rows[..rows.len() - 1].iter().all(|r| !r[0].is_null()),
                "{order}"
            );
        }

        // One coded-value rule (issue 37): a bare code number names that code in every form,
        // as SQL counts the code.
        let second = sql_count(
            &ctx,
            r#"SELECT count(*) FROM t WHERE "事務区分" = '2 第1号法定受託事務'"#,
        )
        .await;
        for form in [
            json!("2"),
            json!(["2"]),
            json!({"$eq": "2"}),
            json!({"$in": ["2"]}),
        ] {
            let out = call(
                Tool::SummarizeRecords,
                json!({"dataset_id": "survey", "where": {"事務区分": form}}),
            )
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
            assert_eq!(out["data"]["rows"][0][0].as_i64(), Some(second), "{form}");
        }

        // A plain string that is a code's label counts that code; `$contains` counts every
        // code containing it and says so.
        let one = sql_count(
            &ctx,
            r#"SELECT count(*) FROM t WHERE "オンライン化の実施状況" = '1 実施済'"#,
        )
        .await;
        let out = call(
            Tool::SummarizeRecords,
            json!({"dataset_id": "survey", "where": {"オンライン化の実施状況": "実施済"}}),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", e.to_json()));
        assert_eq!(out["data"]["rows"][0][0].as_i64(), Some(one));
        assert_eq!(
            out["data"]["resolved_fields"][0]["canonical"],
            json!("1 実施済")
        );
        let both = sql_count(
            &ctx,
            r#"SELECT count(*) FROM t WHERE strpos("オンライン化の実施状況", '実施済') > 0"#,
        )
        .await;
        let out = call(Tool::SummarizeRecords, json!({"dataset_id": "survey", "where": {"オンライン化の実施状況": {"$contains": "実施済"}}}))
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
        assert_eq!(out["data"]["rows"][0][0].as_i64(), Some(both));
        assert!(both > one);
        let warned = out["provenance"]["warnings"].to_string();
        assert!(
            warned.contains("matched 2 codes") && warned.contains("5 一部実施済"),
            "{warned}"
        );

        // A name of the undeclared column is refused, never read as オンライン率.
        let err = call(
            Tool::SummarizeRecords,
            json!({"dataset_id": "survey", "metrics": ["avg:オンライン化率"]}),
        )
        .await
        .expect_err("undeclared");
        let body = err.to_json();
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("not declared")),
            "{body}"
        );
        // The served measures closest to it come first (what a model can use instead), the
        // undeclared column after them, said to be unserved (issue 37).
        let candidates = body["error"]["candidates"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(candidates[0]["name"], json!("オンライン手続件数"), "{body}");
        assert!(
            candidates
                .iter()
                .any(|c| c["name"] == json!("オンライン化率")),
            "{body}"
        );

        // A number written as text is the number.
        let big = sql_count(
            &ctx,
            r#"SELECT count(*) FROM t WHERE CAST("総手続件数" AS DOUBLE) > 1000000"#,
        )
        .await;
        let out = call(Tool::QueryRecords, json!({"dataset_id": "survey", "where": {"総手続件数": {"$gt": "1000000"}}, "limit": 1}))
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
        assert_eq!(out["data"]["total"].as_i64(), Some(big));

        // `having` and `order_by` by the metric's field alone: the top five ministries by
        // online rate with at least 100 procedures, as plain SQL orders them.
        let want = sql_rows(
            &ctx,
            r#"SELECT "所管府省庁", count(*) AS c,
                      round(avg(CASE WHEN "オンライン化の実施状況" = '1 実施済' THEN 1.0 ELSE 0.0 END), 4) AS r
               FROM t GROUP BY "所管府省庁" HAVING count(*) >= 100"#,
        )
        .await;
        let mut want = want;
        want.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        want.truncate(5);
        let out = call(Tool::SummarizeRecords, json!({
            "dataset_id": "survey", "group_by": ["所管府省庁"], "metrics": ["count", "avg:オンライン率"],
            "having": {"count": {"$gte": 100}}, "order_by": ["-オンライン率"], "limit": 5
        }))
        .await
        .unwrap_or_else(|e| panic!("{}", e.to_json()));
        let got: Vec<(String, i64, f64)> = out["data"]["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                (
                    r[0].as_str().unwrap_or("").to_string(),
                    r[1].as_i64().unwrap_or(-1),
                    r[2].as_f64().unwrap_or(-1.0),
                )
            })
            .collect();
        assert_eq!(got, want);

        // Missing values form the key null; exploded records without parts are counted.
        let missing = sql_count(&ctx, r#"SELECT count(*) FROM t WHERE "独立行政法人等の名称" IS NULL OR "独立行政法人等の名称" = ''"#).await;
        let out = call(
            Tool::SummarizeRecords,
            json!({"dataset_id": "survey", "group_by": ["独立行政法人等の名称"], "limit": 10000}),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", e.to_json()));
        let null_group = out["data"]["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|r| r[0].is_null())
            .and_then(|r| r[1].as_i64());
        assert_eq!(null_group, Some(missing));
        let column = names
            .iter()
            .position(|n| n == "実施府省庁")
            .expect("column");
        let without = rows
            .iter()
            .filter(|r| {
                r[column]
                    .as_deref()
                    .is_none_or(|v| v.split(';').all(|p| p.trim().is_empty()))
            })
            .count();
        let out = call(
            Tool::SummarizeRecords,
            json!({"dataset_id": "survey", "group_by": ["実施府省庁"], "limit": 5}),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", e.to_json()));
        assert_eq!(
            out["data"]["records_without_value"]["実施府省庁"],
            json!(without)
        );
        assert!(
            out["data"]["rows"]
                .as_array()
                .expect("rows")
                .iter()
                .all(|r| !r[0].is_null() && r[0] != json!(""))
        );

        // A default page fits the token budget and leaves columns out, naming them.
        let out = call(Tool::QueryRecords, json!({"dataset_id": "survey"}))
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
        let rows_text = out["data"]["rows"].to_string();
        assert!(tally_engine::meta::estimated_tokens(&rows_text) <= 6_000 + 100);
        assert!(out["data"]["columns"].as_array().expect("columns").len() < 38);
        assert!(
            out["data"]["omitted_columns"]
                .as_array()
                .is_some_and(|o| !o.is_empty())
        );

        // Values a model can see: a groupable field without a codelist lists its values.
        let out = call(Tool::InspectDataset, json!({"dataset_id": "survey"}))
            .await
            .unwrap_or_else(|e| panic!("{}", e.to_json()));
        let field = out["data"]["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .find(|f| f["name"] == json!("申請等における本人確認手法"))
            .cloned()
            .expect("field");
        assert!(
            field["values"]["top_values"]
                .as_array()
                .is_some_and(|t| !t.is_empty()),
            "{field}"
        );
    });
}
