//! Generates the dataset and checks it against the published statistics.
//!
//! The statistics live beside the project (`shared/reference/`), not in it.
//! Set `TALLY_REFERENCE_DIR` to point elsewhere. Without them the tests skip,
//! except under CI (`CI=true`), where a missing reference is a failure.

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tally_synth::{DATA_FILE, DEFAULT_SEED, ROW_GROUP_ROWS, Stats, schema};

const STATS_FILE: &str = "procedures-survey-r6.stats.json";
const TOLERANCE: f64 = 0.005;

fn reference_stats() -> Option<PathBuf> {
    let from_env =
        std::env::var_os("TALLY_REFERENCE_DIR").map(|d| PathBuf::from(d).join(STATS_FILE));
    // Cargo sets CARGO_MANIFEST_DIR when running tests; the compile-time
    // value is only a fallback for running the test binary by hand.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let found = from_env.filter(|p| p.is_file()).or_else(|| {
        manifest_dir
            .ancestors()
            .map(|dir| dir.join("shared").join("reference").join(STATS_FILE))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let message = format!(
            "reference statistics {STATS_FILE} not found (set TALLY_REFERENCE_DIR or provide ../shared/reference/)"
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
        eprintln!("SKIPPED: {message}");
    }
    found
}

fn out_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tally-synth-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// One generated dataset shared by the tests of this binary.
fn generated() -> Option<&'static (Stats, PathBuf)> {
    static GENERATED: OnceLock<Option<(Stats, PathBuf)>> = OnceLock::new();
    GENERATED
        .get_or_init(|| {
            let stats_path = reference_stats()?;
            let dir = out_dir("a");
            tally_synth::run(&stats_path, &dir, DEFAULT_SEED, None).expect("generation succeeds");
            Some((Stats::load(&stats_path).expect("stats load"), dir))
        })
        .as_ref()
}

enum Col {
    Text(Vec<Option<String>>),
    Count(Vec<Option<i64>>),
}

impl Col {
    fn nulls(&self) -> usize {
        match self {
            Col::Text(v) => v.iter().filter(|x| x.is_none()).count(),
            Col::Count(v) => v.iter().filter(|x| x.is_none()).count(),
        }
    }

    fn text(&self) -> &[Option<String>] {
        match self {
            Col::Text(v) => v,
            Col::Count(_) => panic!("not a text column"),
        }
    }

    fn counts(&self) -> &[Option<i64>] {
        match self {
            Col::Count(v) => v,
            Col::Text(_) => panic!("not a count column"),
        }
    }
}

fn read_columns(path: &Path) -> Vec<(String, Col)> {
    let file = std::fs::File::open(path).expect("parquet file exists");
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("valid parquet")
        .build()
        .expect("reader");
    let mut columns: Vec<(String, Col)> = Vec::new();
    for batch in reader {
        let batch = batch.expect("batch reads");
        if columns.is_empty() {
            for field in batch.schema().fields() {
                let col = match field.data_type() {
                    arrow::datatypes::DataType::Int64 => Col::Count(Vec::new()),
                    arrow::datatypes::DataType::Utf8 => Col::Text(Vec::new()),
                    other => panic!("unexpected type {other} for {}", field.name()),
                };
                columns.push((field.name().clone(), col));
            }
        }
        for (i, (_, col)) in columns.iter_mut().enumerate() {
            let array = batch.column(i);
            match col {
                Col::Text(v) => {
                    let a = array.as_string::<i32>();
                    v.extend((0..a.len()).map(|j| a.is_valid(j).then(|| a.value(j).to_string())));
                }
                Col::Count(v) => {
                    let a = array.as_primitive::<Int64Type>();
                    v.extend((0..a.len()).map(|j| a.is_valid(j).then(|| a.value(j))));
                }
            }
        }
    }
    columns
}

#[test]
fn matches_published_statistics() {
    let Some((stats, dir)) = generated() else {
        return;
    };
    let path = dir.join(DATA_FILE);
    let columns = read_columns(&path);
    let n = stats.record_count;
    let by_name: HashMap<&str, &Col> = columns.iter().map(|(k, v)| (k.as_str(), v)).collect();

    let names: Vec<&str> = columns.iter().map(|(k, _)| k.as_str()).collect();
    let expected: Vec<&str> = stats.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, expected, "columns and their order");

    let mut failures = Vec::new();
    for field in &stats.fields {
        let col = by_name[field.name.as_str()];
        let rows = match col {
            Col::Text(v) => v.len(),
            Col::Count(v) => v.len(),
        };
        assert_eq!(rows, n, "row count of {}", field.name);
        assert_eq!(
            matches!(col, Col::Count(_)),
            field.role == "measure",
            "type of {}",
            field.name
        );

        let null_ratio = col.nulls() as f64 / n as f64;
        if (null_ratio - field.stats.null_ratio).abs() > TOLERANCE {
            failures.push(format!(
                "{}: null ratio {null_ratio:.4} vs {:.4}",
                field.name, field.stats.null_ratio
            ));
        }
        if field.role == "dim" && !field.stats.top_values.is_empty() {
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for v in col.text().iter().flatten() {
                *counts.entry(v.as_str()).or_default() += 1;
            }
            for top in &field.stats.top_values {
                let got = counts.get(top.value.as_str()).copied().unwrap_or(0) as f64 / n as f64;
                let want = top.count as f64 / n as f64;
                if (got - want).abs() > TOLERANCE {
                    failures.push(format!(
                        "{} = {}: share {got:.4} vs {want:.4}",
                        field.name, top.value
                    ));
                }
            }
        }
        if field.role == "measure" {
            let values: Vec<i64> = col.counts().iter().flatten().copied().collect();
            let (min, max) = (values.iter().min(), values.iter().max());
            let (real_min, real_max) = (
                field.stats.min.unwrap_or(0),
                field.stats.max.unwrap_or(i64::MAX),
            );
            if min.is_some_and(|&m| m < real_min) || max.is_some_and(|&m| m > real_max) {
                failures.push(format!(
                    "{}: range {min:?}..{max:?} outside {real_min}..{real_max}",
                    field.name
                ));
            }
            if let Some(v) = values.iter().find(|&&v| v != round2(v)) {
                failures.push(format!(
                    "{}: {v} has more than two significant digits",
                    field.name
                ));
            }
        }
        if let Col::Text(v) = col
            && v.iter().flatten().any(|s| s.is_empty())
        {
            failures.push(format!("{}: empty string instead of null", field.name));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));

    let ids = by_name["手続ID"].text();
    let unique: HashSet<&Option<String>> = ids.iter().collect();
    assert_eq!(unique.len(), n, "手続ID is unique");
    assert!(ids.iter().all(Option::is_some), "手続ID has no nulls");
}

#[test]
fn keeps_structural_rules() {
    let Some((_, dir)) = generated() else { return };
    let columns = read_columns(&dir.join(DATA_FILE));
    let col: HashMap<&str, &Col> = columns.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let text = |name: &str| col[name].text();
    let n = text("手続ID").len();

    // One number per law name.
    let mut numbers: HashMap<&str, &Option<String>> = HashMap::new();
    for (law, number) in text("法令名").iter().zip(text("法令番号")) {
        let law = law.as_deref().expect("法令名 has no nulls");
        assert_eq!(
            *numbers.entry(law).or_insert(number),
            number,
            "{law} has two numbers"
        );
    }

    let status = text("オンライン化の実施状況");
    let concerns = text("オンライン化の実施予定及び検討時の懸念点");
    let schedule = text("オンライン化実施時期");
    let kind = text("手続類型");
    let online = col["オンライン手続件数"].counts();
    for row in 0..n {
        let done = status[row].as_deref() == Some("1 実施済");
        let online_now = done || status[row].as_deref() == Some("5 一部実施済");
        assert!(
            !(done && concerns[row].is_some()),
            "row {row}: concerns on an online procedure"
        );
        if schedule[row].is_some() {
            let planned = concerns[row]
                .as_deref()
                .is_some_and(|c| c.starts_with("0 オンライン化実施予定"));
            assert!(planned, "row {row}: schedule without a plan");
        }
        for name in [
            "手数料等の納付有無",
            "申請書等に記載させる情報",
            "申請に関連する士業",
        ] {
            if text(name)[row].is_some() {
                assert_eq!(
                    kind[row].as_deref(),
                    Some("1 申請等"),
                    "row {row}: {name} outside 申請等"
                );
            }
        }
        assert!(
            online_now
                || online[row].unwrap_or(0) == 0
                || status[row].as_deref() == Some("4 その他")
        );
    }

    // Multi-value cells use "; " and, where a codelist exists, only its codes.
    for field in schema::FIELDS.iter().filter(|f| f.multi_value) {
        let codes: HashSet<&str> = field.codes().into_iter().collect();
        for cell in text(field.name).iter().flatten() {
            for part in cell.split("; ") {
                assert!(
                    !part.is_empty() && part.trim() == part,
                    "{}: bad part in {cell:?}",
                    field.name
                );
                assert!(
                    codes.is_empty() || codes.contains(part),
                    "{}: {part} not in codelist",
                    field.name
                );
            }
        }
    }
}

#[test]
fn parquet_layout() {
    let Some((stats, dir)) = generated() else {
        return;
    };
    let file = std::fs::File::open(dir.join(DATA_FILE)).expect("parquet file exists");
    let reader = SerializedFileReader::new(file).expect("valid parquet");
    let meta = reader.metadata();
    assert_eq!(meta.file_metadata().num_rows() as usize, stats.record_count);
    assert_eq!(
        meta.num_row_groups(),
        stats.record_count.div_ceil(ROW_GROUP_ROWS)
    );
    for group in meta.row_groups() {
        assert!(group.num_rows() as usize <= ROW_GROUP_ROWS);
        for column in group.columns() {
            assert!(matches!(column.compression(), Compression::ZSTD(_)));
            assert!(
                column.statistics().is_some(),
                "statistics for {}",
                column.column_path()
            );
        }
    }
}

#[test]
fn definition_matches_published_layout() {
    let Some((stats, dir)) = generated() else {
        return;
    };
    let yaml = std::fs::read_to_string(dir.join(tally_synth::DEFINITION_FILE))
        .expect("dataset.yaml written");
    assert!(yaml.contains("schema_version: \"1\""));
    assert!(yaml.contains("https://www.digital.go.jp/resources/procedures-survey-results"));
    assert!(
        !yaml.contains("published_at"),
        "no invented publication date"
    );
    assert_eq!(schema::FIELDS.len(), stats.fields.len());
    for (def, real) in schema::FIELDS.iter().zip(&stats.fields) {
        assert_eq!(def.name, real.name);
        assert_eq!(def.role.as_str(), real.role, "role of {}", real.name);
        assert_eq!(
            def.multi_value, real.multi_value,
            "multi_value of {}",
            real.name
        );
        assert_eq!(def.codes(), real.codes(), "codes of {}", real.name);
        assert!(
            yaml.contains(&format!("- name: {}\n", real.name)),
            "{} in yaml",
            real.name
        );
    }
}

/// The committed default dataset is exactly what the generator makes (so the generator is
/// deterministic, and the shipped files never drift from it).
#[test]
fn committed_dataset_is_the_generated_one() {
    let Some((_, dir)) = generated() else { return };
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/procedures");
    for file in [DATA_FILE, "dataset.yaml"] {
        let fresh = std::fs::read(dir.join(file)).expect("generated file");
        let shipped = std::fs::read(committed.join(file)).expect("committed file");
        assert!(
            fresh == shipped,
            "datasets/procedures/{file} differs from the generator's output; regenerate it with \
             `cargo run --bin tally-synth -- --stats ../shared/reference/procedures-survey-r6.stats.json --out datasets/procedures`"
        );
    }
}

fn round2(n: i64) -> i64 {
    if n < 100 {
        return n;
    }
    let mut scale = 1;
    while n / scale >= 100 {
        scale *= 10;
    }
    (n + scale / 2) / scale * scale
}

/// `--rows`: a larger table of the same shape, its first chunk the default table, the next
/// chunks generated with seeds of their own, ids unique throughout.
#[test]
fn more_rows_of_the_same_shape() {
    let Some((stats, default_dir)) = generated() else {
        return;
    };
    let rows = stats.record_count + stats.record_count / 3;
    let dir = out_dir("rows");
    std::fs::create_dir_all(&dir).expect("out dir");
    let path = dir.join(DATA_FILE);
    tally_synth::write_rows(stats, DEFAULT_SEED, rows, &path).expect("generation succeeds");
    let larger = read_columns(&path);
    let default = read_columns(&default_dir.join(DATA_FILE));
    assert_eq!(
        larger.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        default.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "same columns in the same order"
    );
    let ids = larger
        .iter()
        .find(|(n, _)| n == "手続ID")
        .map(|(_, c)| c.text())
        .expect("an id column");
    assert_eq!(ids.len(), rows);
    let unique: HashSet<&Option<String>> = ids.iter().collect();
    assert_eq!(unique.len(), rows, "ids are unique");
    for ((name, big), (_, small)) in larger.iter().zip(&default) {
        let n = stats.record_count;
        match (big, small) {
            (Col::Text(b), Col::Text(s)) => assert_eq!(&b[..n], &s[..], "first chunk of {name}"),
            (Col::Count(b), Col::Count(s)) => assert_eq!(&b[..n], &s[..], "first chunk of {name}"),
            _ => panic!("{name} changed type"),
        }
    }
    // The second chunk is new rows, not a copy of the first.
    let names = larger
        .iter()
        .find(|(n, _)| n == "手続名")
        .map(|(_, c)| c.text())
        .expect("a name column");
    let n = stats.record_count;
    let same = (0..rows - n).filter(|&i| names[i] == names[n + i]).count();
    assert!(
        same < (rows - n) / 2,
        "{same} of {} names repeat the first chunk",
        rows - n
    );
    assert!(tally_synth::write_rows(stats, DEFAULT_SEED, 0, &path).is_err());
}
