//! The shapes that once took `tally add`'s memory or time without bound: files of 100,000
//! columns, JSON Lines with a new key on every line, workbooks of tiny shared strings or
//! style records, a JSON line of millions of numbers. Each is refused at a bound named in the
//! error (with the flag that raises it), quickly, in memory measured in a process of its
//! own; none ends in an internal error.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tally_ingest::{IngestError, Silent, add};

use crate::common::{Column, options, peak_rss_kib_alone, read_columns};

/// Memory a refused extreme may take at most, in KiB: the test binary itself and the data of
/// one bounded record are far less; the refused shapes took 1.6–2.3 GiB before.
const REFUSED_PEAK_KIB: u64 = 512 * 1024;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("fixture");
    p
}

fn refusal(r: Result<tally_ingest::Summary, IngestError>) -> (IngestError, String) {
    let e = r.expect_err("the input must be refused");
    let text = format!("{e} | {}", e.hint().unwrap_or(""));
    assert!(
        !matches!(e, IngestError::Internal(_)),
        "a refusal, not a bug: {text}"
    );
    (e, text)
}

fn report(what: &str, kib: Option<u64>) {
    if let Some(kib) = kib {
        eprintln!("{what}: peak resident memory {} MiB", kib / 1024);
        assert!(
            kib < REFUSED_PEAK_KIB,
            "{what} took {} MiB, more than {} MiB",
            kib / 1024,
            REFUSED_PEAK_KIB / 1024
        );
    }
}

#[test]
fn a_csv_of_100000_columns_is_refused_at_the_column_cap() {
    let peak = peak_rss_kib_alone(
        "limits::a_csv_of_100000_columns_is_refused_at_the_column_cap",
        || {
            let dir = tempfile::tempdir().expect("temp dir");
            // The probe's shape: 1.3 MB, a header of 100,000 names and three rows of ones.
            let n = 100_000;
            let mut text = (0..n)
                .map(|i| format!("c{i:05}"))
                .collect::<Vec<_>>()
                .join(",");
            text.push('\n');
            for _ in 0..3 {
                text.push_str(&vec!["1"; n].join(","));
                text.push('\n');
            }
            let f = write(dir.path(), "wide.csv", text.as_bytes());
            let (e, text) = refusal(add(&options(dir.path(), "wide", &f), &Silent));
            assert!(matches!(e, IngestError::Limit { .. }), "{text}");
            assert!(
                text.contains("wide.csv, row 1: the row has 100,000 fields (field 10,001 holds a value), more than the 10,000 columns tally add reads (--max-columns)"),
                "{text}"
            );
            assert!(text.contains("raise the cap with --max-columns"), "{text}");
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .expect("datasets")
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .filter(|n| n != "wide.csv")
                .collect();
            assert!(left.is_empty(), "nothing written: {left:?}");
        },
    );
    report("a CSV of 100,000 columns", peak);
}

#[test]
fn json_lines_with_a_new_key_on_every_line_are_refused_at_the_column_cap() {
    let peak = peak_rss_kib_alone(
        "limits::json_lines_with_a_new_key_on_every_line_are_refused_at_the_column_cap",
        || {
            let dir = tempfile::tempdir().expect("temp dir");
            let mut text = String::new();
            for i in 0..16_384 {
                text.push_str(&format!("{{\"k{i:05}\": {i}}}\n"));
            }
            let f = write(dir.path(), "keys.jsonl", text.as_bytes());
            let (e, text) = refusal(add(&options(dir.path(), "keys", &f), &Silent));
            assert!(matches!(e, IngestError::Limit { .. }), "{text}");
            assert!(
                text.contains("keys.jsonl, row 10001: the key \"k10000\" makes the objects' keys number 10,001 (each key is a column), more than the 10,000 columns tally add reads (--max-columns)"),
                "{text}"
            );
        },
    );
    report("JSON Lines with 16,384 keys", peak);
}

#[test]
fn json_lines_whose_keys_appear_late_convert_with_each_key_in_its_own_column() {
    // Under the cap a new key on every line is a table of mostly empty cells: each row costs
    // the keys it holds (the cells it set are emptied again), and a key first seen on the
    // last line is not a reason to go back over the rows before it.
    let dir = tempfile::tempdir().expect("temp dir");
    let n = 600;
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "{{\"id\": \"r{i}\", \"k{i:03}\": {i}, \"nested\": {{\"a\": [1, 2.5, null, \"x\"], \"b\": true}}}}\n"
        ));
    }
    let f = write(dir.path(), "late.jsonl", text.as_bytes());
    let mut o = options(dir.path(), "late", &f);
    o.read.max_columns = n + 2;
    let s = add(&o, &Silent).expect("converted");
    assert_eq!(s.rows, n as u64);
    assert_eq!(s.columns.len(), n + 2);
    let data = dir.path().join("late/data.parquet");
    let cols = read_columns(&data, &["k000", "k599", "nested"]);
    let mut first = vec![None; n];
    first[0] = Some(0);
    assert_eq!(cols[0], Column::Int(first));
    let mut last = vec![None; n];
    last[n - 1] = Some(599);
    assert_eq!(cols[1], Column::Int(last), "a key of the last line only");
    assert_eq!(
        cols[2],
        Column::Text(vec![
            Some(r#"{"a":[1,2.5,null,"x"],"b":true}"#.to_string());
            n
        ]),
        "nested values are kept as their compact JSON text"
    );

    let mut o = options(dir.path(), "late2", &f);
    o.read.max_columns = n;
    let (e, text) = refusal(add(&o, &Silent));
    assert!(matches!(e, IngestError::Limit { .. }), "{text}");
    assert!(
        text.contains("more than the 600 columns tally add reads (--max-columns)"),
        "{text}"
    );
}

#[test]
fn a_json_line_of_more_keys_than_the_cap_is_refused_as_it_is_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let object = (0..50)
        .map(|i| format!("\"k{i}\": {i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let f = write(
        dir.path(),
        "wide.jsonl",
        format!("{{\"a\": 1}}\n{{{object}}}\n").as_bytes(),
    );
    let mut o = options(dir.path(), "w", &f);
    o.read.max_columns = 40;
    let (_, text) = refusal(add(&o, &Silent));
    assert!(
        text.contains("wide.jsonl, row 2: the key \"k39\" makes the objects' keys number 41 (each key is a column), more than the 40 columns tally add reads (--max-columns)"),
        "{text}"
    );
    // One key written over and over is still read key by key, up to the cap.
    let same = vec!["\"a\": 1"; 50].join(", ");
    let f = write(dir.path(), "same.jsonl", format!("{{{same}}}\n").as_bytes());
    let mut o = options(dir.path(), "s", &f);
    o.read.max_columns = 40;
    let (_, text) = refusal(add(&o, &Silent));
    assert!(
        text.contains("same.jsonl, row 1: the object has more than 40 keys"),
        "{text}"
    );
    let long = "鍵".repeat(201);
    let f = write(
        dir.path(),
        "long.jsonl",
        format!("{{\"{long}\": 1}}\n").as_bytes(),
    );
    let (_, text) = refusal(add(&options(dir.path(), "l", &f), &Silent));
    assert!(
        text.contains("long.jsonl, row 1: a key of 201 characters"),
        "{text}"
    );
}

#[test]
fn a_json_line_holding_an_array_of_millions_of_numbers_is_read_as_text_not_a_tree() {
    let peak = peak_rss_kib_alone(
        "limits::a_json_line_holding_an_array_of_millions_of_numbers_is_read_as_text_not_a_tree",
        || {
            let dir = tempfile::tempdir().expect("temp dir");
            // 15 MiB of `0,`: 7.8 million numbers, half a GiB as a tree of JSON values.
            let mut line = String::from("{\"id\": \"a\", \"xs\": [0");
            while line.len() < (15 << 20) {
                line.push_str(",0");
            }
            line.push_str("]}\n");
            let f = write(dir.path(), "array.jsonl", line.as_bytes());
            let s = add(&options(dir.path(), "a", &f), &Silent).expect("converted");
            assert_eq!(s.rows, 1);
        },
    );
    if let Some(kib) = peak {
        eprintln!(
            "a JSON line of 7.8 million numbers: peak resident memory {} MiB",
            kib / 1024
        );
        assert!(kib < 320 * 1024, "{} MiB", kib / 1024);
    }
}

/// A workbook of one sheet `data`, its cells the given XML rows, with shared strings and
/// styles parts as given.
fn workbook(path: &Path, rows: &str, shared: Option<&str>, styles: Option<&str>) {
    let mut parts: Vec<(&str, String)> = vec![
        ("[Content_Types].xml", r#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>"#.to_string()),
        ("_rels/.rels", r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#.to_string()),
        ("xl/workbook.xml", r#"<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="data" sheetId="1" r:id="rId1"/></sheets></workbook>"#.to_string()),
        ("xl/_rels/workbook.xml.rels", r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>"#.to_string()),
        ("xl/worksheets/sheet1.xml", format!(r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>{rows}</sheetData></worksheet>"#)),
    ];
    if let Some(s) = shared {
        parts.push(("xl/sharedStrings.xml", s.to_string()));
    }
    if let Some(s) = styles {
        parts.push(("xl/styles.xml", s.to_string()));
    }
    let file = std::fs::File::create(path).expect("workbook");
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, text) in parts {
        zip.start_file(name, opts).expect("part");
        zip.write_all(text.as_bytes()).expect("part bytes");
    }
    zip.finish().expect("zip");
}

const TWO_ROWS: &str = r#"<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row><row r="2"><c r="A2" t="s"><v>2</v></c><c r="B2"><v>5</v></c></row>"#;

fn shared_strings(count_attribute: &str, strings: usize) -> String {
    let mut sst = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"{count_attribute}><si><t>name</t></si><si><t>n</t></si><si><t>a</t></si>"#
    );
    for _ in 0..strings {
        sst.push_str("<si><t>x</t></si>");
    }
    sst.push_str("</sst>");
    sst
}

#[test]
fn a_workbook_of_hundreds_of_thousands_of_tiny_shared_strings_is_refused_by_the_shared_string_bound()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    // 400,000 strings of one letter: 6.8 MB of XML, under a 16 MiB unpacked cap, but as the
    // sheet reader holds them (a String and a heap block each) about twice the cap.
    let f = dir.path().join("tiny.xlsx");
    workbook(&f, TWO_ROWS, Some(&shared_strings("", 400_000)), None);
    let mut o = options(dir.path(), "t", &f);
    o.read.max_unpacked_bytes = 16 << 20;
    let (e, text) = refusal(add(&o, &Silent));
    assert!(matches!(e, IngestError::Limit { .. }), "{text}");
    assert!(
        text.contains(
            "tiny.xlsx: the sheet reader would hold more than 16 MiB in memory for this workbook ("
        ) && text.contains("shared strings with"),
        "{text}"
    );
    assert!(text.contains("--max-unpacked-mb"), "{text}");
    assert!(!dir.path().join("t").exists());
    // Under a cap that covers what the reader holds, the same workbook reads.
    o.read.max_unpacked_bytes = 64 << 20;
    let s = add(&o, &Silent).expect("under a higher cap");
    assert_eq!(s.rows, 1);
    assert_eq!(
        read_columns(&dir.path().join("t/data.parquet"), &["name"])[0],
        Column::Text(vec![Some("a".into())])
    );
}

#[test]
fn a_workbook_declaring_a_trillion_shared_strings_is_refused_before_the_reader_reserves_them() {
    // The sheet reader reserves room for the count an `<sst>` declares before reading one.
    let dir = tempfile::tempdir().expect("temp dir");
    let f = dir.path().join("liar.xlsx");
    workbook(
        &f,
        TWO_ROWS,
        Some(&shared_strings(
            r#" count="3" uniqueCount="1000000000000""#,
            0,
        )),
        None,
    );
    let (e, text) = refusal(add(&options(dir.path(), "l", &f), &Silent));
    assert!(matches!(e, IngestError::Limit { .. }), "{text}");
    assert!(
        text.contains("3 shared strings (it declares 1,000,000,000,000)"),
        "{text}"
    );
}

#[test]
fn a_workbook_of_many_tiny_style_records_is_refused_by_the_same_bound() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut styles = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?><styleSheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><cellXfs>"#,
    );
    for _ in 0..200_000 {
        styles.push_str(r#"<xf numFmtId="0"/>"#);
    }
    styles.push_str("</cellXfs></styleSheet>");
    let f = dir.path().join("styles.xlsx");
    workbook(&f, TWO_ROWS, Some(&shared_strings("", 0)), Some(&styles));
    let mut o = options(dir.path(), "s", &f);
    o.read.max_unpacked_bytes = 8 << 20;
    let (e, text) = refusal(add(&o, &Silent));
    assert!(matches!(e, IngestError::Limit { .. }), "{text}");
    assert!(
        text.contains(" style records") && text.contains("more than 8 MiB in memory"),
        "{text}"
    );
}

#[test]
fn every_format_refuses_columns_past_the_cap_and_reads_up_to_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let capped = |file: &Path, cap: usize| {
        let mut o = options(dir.path(), "c", file);
        o.read.max_columns = cap;
        add(&o, &Silent)
    };

    // CSV: empty fields past the cap, as spreadsheets write them, are no columns.
    let f = write(dir.path(), "c.csv", b"a,b,c,,,\n1,2,3,,,,,,\n");
    capped(&f, 3).expect("three columns under a cap of three");
    let f = write(dir.path(), "d.csv", b"a,b,c,d\n1,2,3,4\n");
    let (_, text) = refusal(capped(&f, 3));
    assert!(
        text.contains(
            "d.csv, row 1: the row has 4 fields (field 4 holds a value), more than the 3 columns"
        ),
        "{text}"
    );
    let f = write(dir.path(), "e.csv", b"a,b,c\n1,2,3,,,,9\n");
    let (_, text) = refusal(capped(&f, 3));
    assert!(
        text.contains("e.csv, row 2: the row has 7 fields (field 7 holds a value)"),
        "{text}"
    );

    // A sheet: a value past the cap names its cell.
    let f = dir.path().join("w.xlsx");
    workbook(
        &f,
        r#"<row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></c><c r="B1" t="inlineStr"><is><t>b</t></is></c><c r="C1" t="inlineStr"><is><t>c</t></is></c></row><row r="2"><c r="A2"><v>1</v></c><c r="B2"><v>2</v></c><c r="C2"><v>3</v></c></row>"#,
        None,
        None,
    );
    capped(&f, 3).expect("three columns under a cap of three");
    let (_, text) = refusal(capped(&f, 2));
    assert!(
        text.contains(
            "w.xlsx, cell C1: the sheet has a value in column 3, more than the 2 columns"
        ),
        "{text}"
    );

    // Parquet: by its schema, before a row is read.
    let schema = Arc::new(arrow::datatypes::Schema::new(
        ["a", "b", "c"]
            .iter()
            .map(|n| arrow::datatypes::Field::new(*n, arrow::datatypes::DataType::Int64, true))
            .collect::<Vec<_>>(),
    ));
    let columns: Vec<arrow::array::ArrayRef> = (0..3)
        .map(|i| Arc::new(arrow::array::Int64Array::from(vec![i, i + 1])) as _)
        .collect();
    let batch = arrow::array::RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch");
    let f = dir.path().join("p.parquet");
    let mut writer = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&f).expect("file"),
        schema,
        None,
    )
    .expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    capped(&f, 3).expect("three columns under a cap of three");
    let (_, text) = refusal(capped(&f, 2));
    assert!(
        text.contains("p.parquet: the file has 3 columns, more than the 2 columns"),
        "{text}"
    );
}

#[test]
fn a_file_whose_definition_would_pass_the_size_a_definition_may_be_is_refused_by_name() {
    // 9,000 columns named by 179 characters each: 4.7 MB of names alone, past the 4 MiB a
    // dataset.yaml may be. Refused before the data is converted, as a limit, not a bug.
    let dir = tempfile::tempdir().expect("temp dir");
    let names: Vec<String> = (0..9_000)
        .map(|i| format!("{}{i:05}", "設問".repeat(87)))
        .collect();
    let mut text = names.join(",");
    text.push('\n');
    text.push_str(&vec!["1"; names.len()].join(","));
    text.push('\n');
    let f = write(dir.path(), "long-names.csv", text.as_bytes());
    let (e, text) = refusal(add(&options(dir.path(), "n", &f), &Silent));
    assert!(matches!(e, IngestError::Limit { .. }), "{text}");
    assert!(
        text.contains("long-names.csv: a dataset.yaml declaring its 9,000 columns would be 5.1 MiB even without comments, more than the 4.0 MiB a definition may be"),
        "{text}"
    );
    assert!(!dir.path().join("n").exists());
}

/// A `dataset.yaml` beside the data larger than the server would ever read (a mistake, or a
/// file that grows without end) is refused before it is read, with its size and the cap, as
/// the server and `tally check` refuse it; nothing is converted.
#[test]
fn a_definition_larger_than_the_server_reads_is_refused_unread() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = write(dir.path(), "input.csv", b"a,b\n1,2\n");
    let datasets = dir.path().join("datasets");
    let folder = datasets.join("big");
    std::fs::create_dir_all(&folder).expect("folder");
    let mut huge = std::fs::File::create(folder.join("dataset.yaml")).expect("definition");
    let line = format!("# {}\n", "x".repeat(1022));
    for _ in 0..(tally_semantic::yaml::MAX_DOCUMENT_BYTES / line.len() + 2) {
        huge.write_all(line.as_bytes()).expect("write");
    }
    drop(huge);
    let (_, text) = refusal(add(&options(&datasets, "big", &input), &Silent));
    assert!(
        text.contains("dataset.yaml")
            && text.contains(&format!(
                "at most {} bytes are read",
                tally_semantic::yaml::MAX_DOCUMENT_BYTES
            )),
        "{text}"
    );
    assert!(
        !folder.join("data.parquet").exists(),
        "nothing converted beside a definition that was not read"
    );
}
