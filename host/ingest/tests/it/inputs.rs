//! Every format `tally add` reads, and every bad input with the message it gets.

use std::io::Write;
use std::path::{Path, PathBuf};

use tally_ingest::{IngestError, Silent, add};

use crate::common::{Column, options, read_columns, types};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("fixture");
    p
}

fn datasets() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn error_of(r: Result<tally_ingest::Summary, IngestError>) -> (IngestError, String) {
    let e = r.expect_err("the input must be refused");
    let text = format!("{e} | {}", e.hint().unwrap_or(""));
    (e, text)
}

/// A workbook of one sheet `data` with the given rows (inline strings and numbers), built
/// by hand: the five parts a reader needs.
fn workbook(path: &Path, rows: &[Vec<&str>], padding_bytes: usize) {
    let mut sheet = String::from(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>"#,
    );
    for (r, row) in rows.iter().enumerate() {
        sheet.push_str(&format!(r#"<row r="{}">"#, r + 1));
        for (c, v) in row.iter().enumerate() {
            let col = tally_ingest::error::column_letters(c);
            if v.is_empty() {
                continue;
            }
            if let Some(n) = v.strip_prefix('#') {
                sheet.push_str(&format!(r#"<c r="{col}{}"><v>{n}</v></c>"#, r + 1));
            } else {
                sheet.push_str(&format!(
                    r#"<c r="{col}{}" t="inlineStr"><is><t>{v}</t></is></c>"#,
                    r + 1
                ));
            }
        }
        sheet.push_str("</row>");
    }
    sheet.push_str("</sheetData>");
    // Padding inside the XML (a comment) that compresses to almost nothing: what a zip bomb
    // does.
    if padding_bytes > 0 {
        sheet.push_str("<!--");
        sheet.push_str(&" ".repeat(padding_bytes));
        sheet.push_str("-->");
    }
    sheet.push_str("</worksheet>");
    write_workbook(path, sheet);
}

/// A workbook whose one sheet `data` is the given worksheet XML.
fn write_workbook(path: &Path, sheet: String) {
    let parts: Vec<(&str, String)> = vec![
        ("[Content_Types].xml", r#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>"#.to_string()),
        ("_rels/.rels", r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#.to_string()),
        ("xl/workbook.xml", r#"<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="data" sheetId="1" r:id="rId1"/></sheets></workbook>"#.to_string()),
        ("xl/_rels/workbook.xml.rels", r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>"#.to_string()),
        ("xl/worksheets/sheet1.xml", sheet),
    ];
    let file = std::fs::File::create(path).expect("workbook");
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(true);
    for (name, text) in parts {
        zip.start_file(name, opts).expect("part");
        zip.write_all(text.as_bytes()).expect("part bytes");
    }
    zip.finish().expect("zip");
}

#[test]
fn csv_in_each_japanese_encoding_reads_the_same() {
    let text = "手続ID,所管府省庁,件数\r\n1,デジタル庁,10\r\n2,総務省,20\r\n3,デジタル庁,\r\n";
    let mut results = Vec::new();
    for (name, bytes) in [
        ("utf8.csv", text.as_bytes().to_vec()),
        (
            "bom.csv",
            [&[0xEF, 0xBB, 0xBF][..], text.as_bytes()].concat(),
        ),
        (
            "sjis.csv",
            encoding_rs::SHIFT_JIS.encode(text).0.into_owned(),
        ),
        ("euc.csv", encoding_rs::EUC_JP.encode(text).0.into_owned()),
        ("tabs.tsv", text.replace(',', "\t").into_bytes()),
    ] {
        let dir = datasets();
        let file = write(dir.path(), name, &bytes);
        let s = add(&options(dir.path(), "x", &file), &Silent)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.rows, 3, "{name}");
        let cols = read_columns(
            &dir.path().join("x/data.parquet"),
            &["手続ID", "所管府省庁", "件数"],
        );
        results.push((name, s.input.encoding, cols));
    }
    let expected = results[0].2.clone();
    assert_eq!(
        expected[2],
        Column::Int(vec![Some(10), Some(20), None]),
        "an empty cell is null, never 0"
    );
    for (name, _, cols) in &results {
        assert_eq!(cols, &expected, "{name}");
    }
    let encodings: Vec<_> = results.iter().map(|r| r.1).collect();
    assert_eq!(
        encodings,
        [
            Some("UTF-8"),
            Some("UTF-8"),
            Some("Shift_JIS"),
            Some("EUC-JP"),
            Some("UTF-8")
        ]
    );
}

#[test]
fn json_lines_parquet_and_workbooks_are_read() {
    let dir = datasets();
    let jsonl = write(
        dir.path(),
        "rows.jsonl",
        "{\"id\": \"a\", \"n\": 1, \"tags\": \"x;y\"}\n\n{\"id\": \"b\", \"n\": 2.5}\n{\"id\": \"c\", \"n\": null, \"extra\": true}\n"
            .as_bytes(),
    );
    let s = add(&options(dir.path(), "j", &jsonl), &Silent).expect("jsonl");
    assert_eq!(s.rows, 3);
    let cols = read_columns(&dir.path().join("j/data.parquet"), &["id", "tags"]);
    assert_eq!(
        cols[0],
        Column::Text(vec![Some("a".into()), Some("b".into()), Some("c".into())])
    );
    assert!(
        types(&dir.path().join("j/data.parquet"))
            .contains(&("n".into(), arrow::datatypes::DataType::Float64))
    );

    // The Parquet written is itself an input: converted again, it reads the same.
    let again = datasets();
    let s = add(
        &options(again.path(), "p", &dir.path().join("j/data.parquet")),
        &Silent,
    )
    .expect("parquet");
    assert_eq!(s.rows, 3);
    assert_eq!(
        read_columns(&again.path().join("p/data.parquet"), &["id", "tags"]),
        cols
    );

    let book = dir.path().join("book.xlsx");
    workbook(
        &book,
        &[
            vec!["一覧表"],
            vec!["コード", "名称", "件数"],
            vec!["001", "申請", "#12"],
            vec!["002", "届出", "#3.5"],
            vec![],
            vec!["010", "通知", "#7"],
        ],
        0,
    );
    let s = add(&options(dir.path(), "w", &book), &Silent).expect("workbook");
    assert_eq!(s.rows, 3);
    assert_eq!(s.input.header_rows, 2, "the one-cell title row is detected");
    assert!(
        s.warnings.iter().any(|w| w.contains("1 blank rows")),
        "{:?}",
        s.warnings
    );
    let cols = read_columns(&dir.path().join("w/data.parquet"), &["コード", "件数"]);
    assert_eq!(
        cols[0],
        Column::Text(vec![
            Some("001".into()),
            Some("002".into()),
            Some("010".into())
        ]),
        "codes with leading zeros stay text"
    );
    let yaml = std::fs::read_to_string(dir.path().join("w/dataset.yaml")).expect("skeleton");
    assert!(yaml.contains("title: 一覧表"), "{yaml}");
    assert!(yaml.contains("csv_header_rows: 2"), "{yaml}");
}

#[test]
fn ragged_rows_name_their_row() {
    let dir = datasets();
    let f = write(dir.path(), "r.csv", b"a,b,c\n1,2,3\n4,5\n6,7,8\n");
    let (e, text) = error_of(add(&options(dir.path(), "r", &f), &Silent));
    assert!(matches!(e, IngestError::Input { .. }));
    assert!(
        text.contains("r.csv, row 3: the row has 2 fields but the header (row 1) has 3"),
        "{text}"
    );
    let f = write(dir.path(), "r2.csv", b"a,b\n1,2\n3,4,5\n");
    let (_, text) = error_of(add(&options(dir.path(), "r", &f), &Silent));
    assert!(
        text.contains("row 3") && text.contains("3 fields") && text.contains("\"5\""),
        "{text}"
    );
    // Trailing empty fields (as spreadsheets write them) are not ragged.
    let f = write(dir.path(), "r3.csv", b"a,b\r\n1,2,,\r\n");
    add(&options(dir.path(), "r", &f), &Silent).expect("trailing empty fields");
}

#[test]
fn undecodable_bytes_name_the_line_and_the_encoding_tried() {
    let dir = datasets();
    let mut bytes = b"id,name\r\n1,ok\r\n".to_vec();
    bytes.extend_from_slice(&encoding_rs::SHIFT_JIS.encode("2,申請\r\n").0);
    let f = write(dir.path(), "u.csv", &bytes);
    let mut o = options(dir.path(), "u", &f);
    o.read.encoding = Some("utf-8".into());
    let (_, text) = error_of(add(&o, &Silent));
    assert!(
        text.contains("u.csv, row 3: bytes 90 at byte offset 17 cannot be decoded as UTF-8 (as given with --encoding)"),
        "{text}"
    );
    assert!(text.contains("--encoding"), "{text}");
    let f = write(dir.path(), "g.csv", b"a,b\n1,\xff\xff\n");
    let (_, text) = error_of(add(&options(dir.path(), "g", &f), &Silent));
    assert!(
        text.contains("not UTF-8, Shift_JIS (cp932) or EUC-JP"),
        "{text}"
    );
    let mut o = options(dir.path(), "g", &f);
    o.read.encoding = Some("klingon".into());
    let (_, text) = error_of(add(&o, &Silent));
    assert!(
        text.contains("g.csv") && text.contains("`klingon` is not an encoding name"),
        "{text}"
    );
}

#[test]
fn headers_must_name_each_column_once() {
    let dir = datasets();
    let f = write(dir.path(), "d.csv", "名称,件数,名称\n1,2,3\n".as_bytes());
    let (_, text) = error_of(add(&options(dir.path(), "d", &f), &Silent));
    assert!(
        text.contains(
            "d.csv, row 1: the header names columns a dataset cannot declare: \"名称\" heads columns 1 and 3"
        ),
        "{text}"
    );
    let f = write(dir.path(), "e.csv", b"a,,c\n1,2,3\n");
    let (_, text) = error_of(add(&options(dir.path(), "e", &f), &Silent));
    assert!(
        text.contains(
            "e.csv, row 2, column 2: holds \"2\" but its column has no name in the header (row 1)"
        ),
        "{text}"
    );
}

#[test]
fn empty_files_and_files_without_data_are_refused() {
    let dir = datasets();
    let f = write(dir.path(), "empty.csv", b"");
    let (_, text) = error_of(add(&options(dir.path(), "e", &f), &Silent));
    assert!(text.contains("empty.csv: the file is empty"), "{text}");
    let f = write(dir.path(), "header.csv", b"a,b\n");
    let (_, text) = error_of(add(&options(dir.path(), "e", &f), &Silent));
    assert!(
        text.contains("the file has a header (row 1) but no rows of data"),
        "{text}"
    );
    let f = write(dir.path(), "blank.csv", b"\n\n");
    let (_, text) = error_of(add(&options(dir.path(), "e", &f), &Silent));
    assert!(text.contains("the file holds no rows"), "{text}");
    assert!(
        !dir.path().join("e").exists(),
        "nothing is written for a refused file"
    );
}

#[test]
fn workbooks_that_are_damaged_encrypted_or_bombs_are_refused() {
    let dir = datasets();
    let f = write(dir.path(), "bad.xlsx", b"PK\x03\x04 this is no archive");
    let (_, text) = error_of(add(&options(dir.path(), "b", &f), &Silent));
    assert!(
        text.contains("bad.xlsx: the workbook is damaged or not a workbook"),
        "{text}"
    );

    let f = write(
        dir.path(),
        "page.xlsx",
        b"<!DOCTYPE html><html>Not found</html>",
    );
    let (_, text) = error_of(add(&options(dir.path(), "b", &f), &Silent));
    assert!(
        text.contains("is named .xlsx but is not a workbook (it is an HTML page)"),
        "{text}"
    );

    // An encrypted workbook is a compound file holding an `EncryptedPackage` stream.
    let mut cfb = vec![0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];
    cfb.extend(std::iter::repeat_n(0u8, 504));
    cfb.extend(
        "EncryptedPackage"
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes()),
    );
    cfb.extend(std::iter::repeat_n(0u8, 512));
    let f = write(dir.path(), "locked.xlsx", &cfb);
    let (_, text) = error_of(add(&options(dir.path(), "b", &f), &Silent));
    assert!(
        text.contains("locked.xlsx: the workbook is password-protected (encrypted)"),
        "{text}"
    );

    let f = dir.path().join("bomb.xlsx");
    workbook(&f, &[vec!["a", "b"], vec!["1", "2"]], 4 << 20);
    assert!(
        std::fs::metadata(&f).expect("bomb").len() < 64 * 1024,
        "it compresses to little"
    );
    let mut o = options(dir.path(), "b", &f);
    o.read.max_unpacked_bytes = 1 << 20;
    let (e, text) = error_of(add(&o, &Silent));
    assert!(matches!(e, IngestError::Limit { .. }));
    assert!(
        text.contains("the workbook expands to more than 1 MiB (at member xl/worksheets/sheet1.xml); it is refused as a possible zip bomb"),
        "{text}"
    );
    assert!(text.contains("--max-unpacked-mb"), "{text}");
    o.read.max_unpacked_bytes = 64 << 20;
    add(&o, &Silent).expect("under a higher cap the same workbook reads");

    let mut o = options(dir.path(), "b", &f);
    o.read.sheet = Some("nope".into());
    let (_, text) = error_of(add(&o, &Silent));
    assert!(
        text.contains("the workbook has no sheet `nope`") && text.contains("`data`"),
        "{text}"
    );
}

const DEFINITION: &str = r#"schema_version: "1"
title: t
id_field: id
fields:
- {name: id, role: id, csv_col_index: 0}
- {name: name, role: attr, csv_col_index: 1}
- {name: n, role: measure, data_type: integer, csv_col_index: 2}
"#;

fn with_definition(yaml: &str) -> tempfile::TempDir {
    let dir = datasets();
    std::fs::create_dir(dir.path().join("t")).expect("folder");
    std::fs::write(dir.path().join("t/dataset.yaml"), yaml).expect("definition");
    dir
}

#[test]
fn a_value_that_no_longer_reads_as_its_declared_type_is_drift() {
    let dir = with_definition(DEFINITION);
    let f = write(
        dir.path(),
        "m.csv",
        "id,name,n\n1,a,5\n2,b,約100\n3,c,1,200\n4,d,x\n"
            .replace("1,200", "\"1,200\"")
            .as_bytes(),
    );
    let (e, text) = error_of(add(&options(dir.path(), "t", &f), &Silent));
    let IngestError::Drift { differences, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(differences.len(), 1, "{text}");
    assert!(
        differences[0].starts_with(
            "n: 2 values cannot be read as integer (declared data_type); the first, at "
        ),
        "{text}"
    );
    assert!(
        differences[0].ends_with("m.csv, row 3, column 3 (n), is \"約100\""),
        "{text}"
    );
    assert!(!dir.path().join("t/data.parquet").exists());
    let mut o = options(dir.path(), "t", &f);
    o.accept_drift = true;
    let s = add(&o, &Silent).expect("accepted");
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("stored as empty (--accept-drift)"))
    );
    assert_eq!(
        read_columns(&dir.path().join("t/data.parquet"), &["n"])[0],
        Column::Int(vec![Some(5), None, Some(1200), None]),
        "1,200 reads as 1200; what does not read is empty, and said"
    );
}

#[test]
fn columns_missing_added_or_moved_are_listed_as_drift() {
    let dir = with_definition(DEFINITION);
    let f = write(dir.path(), "c.csv", b"id,extra,name\n1,x,a\n");
    let (e, _) = error_of(add(&options(dir.path(), "t", &f), &Silent));
    let IngestError::Drift { differences, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(
        differences,
        &vec![
            "name: declared at csv_col_index 1, but column 2 is headed \"extra\"; \"name\" is column 3 now".to_string(),
            "n: declared at csv_col_index 2, but column 3 is headed \"name\", and no column is named \"n\"".to_string(),
            "column 2 \"extra\" is in the file but not declared in dataset.yaml".to_string(),
        ]
    );
    let mut o = options(dir.path(), "t", &f);
    o.accept_drift = true;
    let s = add(&o, &Silent).expect("accepted");
    assert_eq!(s.definition, "kept");
    let cols = read_columns(&dir.path().join("t/data.parquet"), &["name", "n", "extra"]);
    assert_eq!(
        cols[0],
        Column::Text(vec![Some("a".into())]),
        "taken by name where it moved"
    );
    assert_eq!(cols[1], Column::Int(vec![None]));
    assert_eq!(
        cols[2],
        Column::Text(vec![Some("x".into())]),
        "kept, not served until declared"
    );
    let yaml = std::fs::read_to_string(dir.path().join("t/dataset.yaml")).expect("definition");
    assert_eq!(
        yaml, DEFINITION,
        "the definition is kept as the person wrote it"
    );
}

#[test]
fn a_refused_file_leaves_the_served_data_as_it_was() {
    let dir = with_definition(DEFINITION);
    let good = write(dir.path(), "good.csv", b"id,name,n\n1,a,5\n");
    add(&options(dir.path(), "t", &good), &Silent).expect("first version");
    let before = std::fs::read(dir.path().join("t/data.parquet")).expect("data");
    let bad = write(dir.path(), "bad.csv", b"id,name,n\n1,a,5\n2,b,many\n");
    error_of(add(&options(dir.path(), "t", &bad), &Silent));
    assert_eq!(
        std::fs::read(dir.path().join("t/data.parquet")).expect("data"),
        before
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("datasets")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no staging files are left: {leftovers:?}"
    );
}

#[test]
fn null_markers_are_asked_about_and_converted_only_when_named() {
    let dir = datasets();
    let f = write(
        dir.path(),
        "n.csv",
        "id,件数\n1,5\n2,-\n3,7\n4,8\n5,9\n6,10\n7,11\n8,12\n9,13\n10,14\n".as_bytes(),
    );
    let s = add(&options(dir.path(), "n", &f), &Silent).expect("add");
    assert_eq!(
        s.columns[1].data_type, "string",
        "kept as written until answered"
    );
    assert_eq!(s.questions.len(), 1);
    assert!(
        s.questions[0].starts_with("件数: cells hold `-` (1)."),
        "{:?}",
        s.questions
    );
    let yaml = std::fs::read_to_string(dir.path().join("n/dataset.yaml")).expect("skeleton");
    assert!(
        yaml.contains("# TODO (question): 件数: cells hold `-` (1)."),
        "{yaml}"
    );

    let again = datasets();
    let mut o = options(again.path(), "n", &f);
    o.null_markers = vec!["-".into()];
    let s = add(&o, &Silent).expect("add");
    assert_eq!(s.columns[1].data_type, "integer");
    assert_eq!(s.columns[1].role, Some("measure"));
    assert!(s.questions.is_empty());
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("1 cells holding a null marker (-) were stored as empty")),
        "{:?}",
        s.warnings
    );
    let yaml = std::fs::read_to_string(again.path().join("n/dataset.yaml")).expect("skeleton");
    assert!(
        yaml.contains("null_markers: [\"-\"]"),
        "the answer is recorded: {yaml}"
    );
    // A second add reads the markers from the definition it wrote.
    let s = add(&options(again.path(), "n", &f), &Silent).expect("again");
    assert_eq!(s.definition, "kept");
    assert_eq!(
        read_columns(&again.path().join("n/data.parquet"), &["件数"])[0],
        Column::Int(vec![
            Some(5),
            None,
            Some(7),
            Some(8),
            Some(9),
            Some(10),
            Some(11),
            Some(12),
            Some(13),
            Some(14)
        ])
    );
}

#[test]
fn a_definition_for_a_plugin_or_a_file_set_is_not_overwritten() {
    let dir = with_definition(
        "schema_version: \"1\"\ntitle: t\ndata_file: parts/*.parquet\nfields:\n- {name: id, role: id}\n",
    );
    let f = write(dir.path(), "x.csv", b"id\n1\n");
    let (e, text) = error_of(add(&options(dir.path(), "t", &f), &Silent));
    assert!(matches!(e, IngestError::Dataset { .. }), "{text}");
    assert!(text.contains("names a set of files"), "{text}");
    let (_, text) = error_of(add(&options(dir.path(), "../escape", &f), &Silent));
    assert!(text.contains("cannot be a dataset id"), "{text}");
}

#[test]
fn rows_are_numbered_as_lines_of_the_file_whatever_the_line_ends() {
    for (name, end) in [("lf.csv", "\n"), ("crlf.csv", "\r\n")] {
        let dir = datasets();
        let text = ["title,,", "a,b,c", "1,\"two\nlines\",3", "4,5"].join(end) + end;
        let f = write(dir.path(), name, text.as_bytes());
        let (_, message) = error_of(add(&options(dir.path(), "x", &f), &Silent));
        assert!(
            message.contains(&format!(
                "{name}, row 5: the row has 2 fields but the header (row 2) has 3"
            )),
            "{name}: {message}"
        );
    }
}

#[test]
fn an_unclosed_quote_is_refused_not_read_as_the_rest_of_the_file() {
    let dir = datasets();
    let f = write(dir.path(), "q.csv", b"a,b\n1,\"x\n2,y\n3,z\n");
    let (_, text) = error_of(add(&options(dir.path(), "q", &f), &Silent));
    assert!(
        text.contains("q.csv, row 2: a quoted value opened in this record is never closed"),
        "{text}"
    );
    // Long before the end of a large file: the record is stopped at 16 MiB.
    let mut big = b"a,b\n1,\"x\n".to_vec();
    let line = b"2,plain text that goes on and on\n";
    while big.len() < (17 << 20) {
        big.extend_from_slice(line);
    }
    let f = write(dir.path(), "long.csv", &big);
    let (_, text) = error_of(add(&options(dir.path(), "q", &f), &Silent));
    assert!(
        text.contains("long.csv, row 2: the record starting here runs past 16 MiB"),
        "{text}"
    );
}

#[test]
fn utf16_text_with_tabs_is_split_on_its_characters_not_its_bytes() {
    // Excel's "Unicode text": UTF-16LE with a BOM, tab-separated, saved as .txt. 本 is the
    // bytes 2C 67 and 上 holds 0A: read as bytes they would be a comma and a line feed.
    let text = "上位区分\t件数\r\n本省\t5\r\n上部\t7\r\n";
    let mut bytes = vec![0xFF, 0xFE];
    bytes.extend(text.encode_utf16().flat_map(|u| u.to_le_bytes()));
    let dir = datasets();
    let f = write(dir.path(), "unicode.txt", &bytes);
    let s = add(&options(dir.path(), "u", &f), &Silent).expect("add");
    assert_eq!(s.input.format, "tsv");
    assert_eq!(s.input.encoding, Some("UTF-16LE"));
    assert_eq!(
        read_columns(&dir.path().join("u/data.parquet"), &["上位区分", "件数"]),
        vec![
            Column::Text(vec![Some("本省".into()), Some("上部".into())]),
            Column::Int(vec![Some(5), Some(7)])
        ]
    );
}

#[test]
fn names_a_definition_could_not_declare_are_refused_before_converting() {
    let dir = datasets();
    let f = write(dir.path(), "n.csv", "ID,名称,id\n1,a,2\n".as_bytes());
    let (_, text) = error_of(add(&options(dir.path(), "n", &f), &Silent));
    assert!(
        text.contains("\"ID\" (column 1) and \"id\" (column 3) read as the same name"),
        "{text}"
    );
    let long = "設問".repeat(120);
    let f = write(dir.path(), "l.csv", format!("id,{long}\n1,2\n").as_bytes());
    let (_, text) = error_of(add(&options(dir.path(), "n", &f), &Silent));
    assert!(
        text.contains("column 2 is headed by 240 characters (at most 200)"),
        "{text}"
    );
    let (e, text) = error_of(add(&options(dir.path(), "my data", &f), &Silent));
    assert!(matches!(e, IngestError::Dataset { .. }), "{text}");
    assert!(
        text.contains("\"my data\" cannot be a dataset id"),
        "{text}"
    );
    let mut o = options(dir.path(), "n", &f);
    o.header_rows = Some(0);
    let (_, text) = error_of(add(&o, &Silent));
    assert!(text.contains("0 header rows"), "{text}");
}

#[test]
fn staging_folders_of_killed_runs_are_swept() {
    let dir = datasets();
    let abandoned = dir.path().join(".tally-add-x-999999999");
    std::fs::create_dir(&abandoned).expect("abandoned staging");
    std::fs::write(abandoned.join("data.parquet"), b"half").expect("half a file");
    let f = write(dir.path(), "s.csv", b"a,b\n1,2\n");
    add(&options(dir.path(), "s", &f), &Silent).expect("add");
    assert!(
        !abandoned.exists(),
        "a staging folder whose process is gone is removed"
    );
}

#[test]
fn a_sheet_cell_past_the_last_cell_is_refused_before_blank_rows_are_made() {
    let dir = datasets();
    let f = dir.path().join("far.xlsx");
    write_workbook(
        &f,
        r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></c></row><row r="2000000000"><c r="A2000000000" t="inlineStr"><is><t>x</t></is></c></row></sheetData></worksheet>"#
            .to_string(),
    );
    let (_, text) = error_of(add(&options(dir.path(), "f", &f), &Silent));
    assert!(
        text.contains(
            "a cell at row 2000000000, column 1 lies past a sheet's last cell (XFD1048576)"
        ),
        "{text}"
    );
}

#[test]
fn a_json_line_past_the_record_cap_is_refused_with_its_line() {
    let dir = datasets();
    let mut bytes = b"{\"a\": \"short\"}\n{\"a\": \"".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 17 << 20));
    bytes.extend_from_slice(b"\"}\n");
    let f = write(dir.path(), "long.jsonl", &bytes);
    let (_, text) = error_of(add(&options(dir.path(), "j", &f), &Silent));
    assert!(
        text.contains("long.jsonl, row 2: the line is longer than 16 MiB"),
        "{text}"
    );
}
