//! The functions, each called as a plan calls it: over plain text, views and dictionaries.

use datafusion::arrow::array::{Array, ArrayRef, StringArray, UInt32Array};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl};

use super::codes::DICTIONARIES_KEPT;
use super::parts::parts_of;
use super::text::over_text;
use super::*;

#[test]
fn icontains_ignores_case_and_handles_japanese() {
    assert!(icontains("電子メール等", "メール"));
    assert!(icontains("Electronic MAIL", "mail"));
    assert!(!icontains("電子メール", "郵送"));
    assert!(icontains("", ""));
    assert!(!icontains("", "x"));
    // Full-width text is found by its usual form (issue 15).
    assert!(icontains(
        "国税電子申告・納税システム（ｅ－Ｔａｘ）",
        "e-tax"
    ));
    assert!(icontains("押印＋印鑑証明", "押印+印鑑"));
    // A half-width voiced mark composes with the letter before it: `カﾞ` is `ガ`, which
    // does not hold `カ`.
    assert!(!icontains("カﾞ", "カ"));
    assert!(icontains("カﾞ", "ガ"));
    assert!(!icontains("e\u{301}", "e"));
}

/// Text read from files as views: rows holding the same view are worked on once, and the
/// answer per row is the same as row by row (nulls, short values held in their views,
/// long ones in a buffer).
#[test]
fn distinct_views_answer_as_row_by_row() {
    use datafusion::arrow::array::StringViewArray;
    let long = "手続が行われるイベント;引越し;結婚";
    let rows: Vec<Option<&str>> = (0..200)
        .map(|i| match i % 5 {
            0 => None,
            1 => Some("a; b"),
            2 => Some(long),
            3 => Some(""),
            _ => Some("結婚;死亡"),
        })
        .collect();
    // As decoded from a dictionary page: a long value is one view in every row.
    let mut builder = datafusion::arrow::array::StringViewBuilder::new().with_deduplicate_strings();
    builder.extend(rows.iter().copied());
    let view = builder.finish();
    let (index, firsts) = crate::views::distinct_views(&view).expect("few distinct views");
    assert_eq!(firsts.len(), 4, "{firsts:?}");
    // Each long value a view of its own (as a builder without a dictionary makes them):
    // still the same answers, through more distinct views.
    let copied = StringViewArray::from(rows.clone());
    let (index_copied, firsts_copied) =
        crate::views::distinct_views(&copied).expect("under half distinct");
    assert!(firsts_copied.len() > 4);
    for (r, want) in rows.iter().enumerate() {
        let i = index_copied.value(r) as usize;
        let got = (i < firsts_copied.len()).then(|| copied.value(firsts_copied[i]));
        assert_eq!(got, *want, "row {r}");
    }
    for (r, want) in rows.iter().enumerate() {
        let i = index.value(r) as usize;
        let got = (i < firsts.len()).then(|| view.value(firsts[i]));
        assert_eq!(got, *want, "row {r}");
    }
    // Mostly distinct: row by row instead.
    let free: Vec<String> = (0..200).map(|i| format!("value number {i}")).collect();
    assert!(
        crate::views::distinct_views(&StringViewArray::from_iter_values(free.iter())).is_none()
    );
    // Parts and codes over views agree with plain strings.
    let plain = StringArray::from(rows.clone());
    let as_parts = |a: ArrayRef| parts_rows_of(ColumnarValue::Array(a), rows.len());
    assert_eq!(
        as_parts(Arc::new(view.clone())),
        as_parts(Arc::new(plain.clone()))
    );
    let codes = Arc::new(StreamCodes::default());
    let udf = Code {
        signature: user_defined(),
        codes: Arc::clone(&codes),
    };
    let run = |a: ArrayRef| -> Vec<Option<String>> {
        let out = udf
            .invoke_with_args(ScalarFunctionArgs {
                args: vec![ColumnarValue::Array(a)],
                arg_fields: vec![Arc::new(Field::new("t", DataType::Utf8View, true))],
                number_rows: rows.len(),
                return_field: Arc::new(Field::new("c", DataType::UInt32, false)),
                config_options: Arc::new(Default::default()),
            })
            .expect("codes")
            .to_array(rows.len())
            .expect("array");
        let values = codes.values().expect("values");
        let out = out.as_any().downcast_ref::<UInt32Array>().expect("u32");
        out.values()
            .iter()
            .map(|c| (*c != 0).then(|| values.value(*c as usize).to_string()))
            .collect()
    };
    let want: Vec<Option<String>> = rows
        .iter()
        .map(|v| v.filter(|v| !v.is_empty()).map(str::to_string))
        .collect();
    assert_eq!(run(Arc::new(view)), want);
    assert_eq!(run(Arc::new(plain)), want);
    assert_eq!(codes.values().expect("values").len(), 4);
}

/// Codes of dictionary arrays (text read from its files as a column chunk stores it):
/// batches sharing a chunk's dictionary number its values once, another chunk's
/// dictionary holding some of the same values gives them the same codes, and a null key,
/// a null value and `""` are code 0.
#[test]
fn codes_of_dictionary_arrays_name_each_rows_text_and_are_made_once_per_dictionary() {
    use datafusion::arrow::array::{DictionaryArray, UInt32Array as Keys};
    use datafusion::arrow::datatypes::UInt32Type;
    let codes = StreamCodes::default();
    let first: ArrayRef = Arc::new(StringArray::from(vec![
        Some("国土交通省"),
        Some(""),
        Some("所管12"),
        None,
    ]));
    let batch = |values: &ArrayRef, keys: Vec<Option<u32>>| {
        DictionaryArray::<UInt32Type>::try_new(Keys::from(keys), Arc::clone(values))
            .expect("dictionary")
    };
    let text_of = |c: u32| -> Option<String> {
        let values = codes.values().expect("values");
        (c != 0).then(|| values.value(c as usize).to_string())
    };
    let a = codes
        .code_dictionary(&batch(
            &first,
            vec![Some(0), Some(2), None, Some(1), Some(3), Some(0)],
        ))
        .expect("codes");
    let got: Vec<Option<String>> = a.values().iter().map(|c| text_of(*c)).collect();
    let want = |v: &[Option<&str>]| v.iter().map(|t| t.map(str::to_string)).collect::<Vec<_>>();
    assert_eq!(
        got,
        want(&[
            Some("国土交通省"),
            Some("所管12"),
            None,
            None,
            None,
            Some("国土交通省")
        ])
    );
    // The next batch of the chunk: the same dictionary, no more values numbered.
    let b = codes
        .code_dictionary(&batch(&first, vec![Some(2), Some(2), Some(0)]))
        .expect("codes");
    assert_eq!(b.values().as_ref(), &[a.value(1), a.value(1), a.value(0)]);
    assert_eq!(codes.lock_dictionaries().expect("lock").len(), 1);
    // Another chunk: its own dictionary, a value met before keeps its code.
    let second: ArrayRef = Arc::new(StringArray::from(vec![Some("デジタル庁"), Some("所管12")]));
    let c = codes
        .code_dictionary(&batch(&second, vec![Some(1), Some(0)]))
        .expect("codes");
    assert_eq!(c.value(0), a.value(1));
    assert_eq!(text_of(c.value(1)).as_deref(), Some("デジタル庁"));
    assert_eq!(codes.lock_dictionaries().expect("lock").len(), 2);
    // More chunks than are kept: the oldest is let go, codes stay the table's.
    for k in 0..DICTIONARIES_KEPT + 3 {
        let values: ArrayRef = Arc::new(StringArray::from(vec![format!("値{k}"), "所管12".into()]));
        let d = codes
            .code_dictionary(&batch(&values, vec![Some(1), Some(0)]))
            .expect("codes");
        assert_eq!(d.value(0), a.value(1));
        assert_eq!(text_of(d.value(1)), Some(format!("値{k}")));
    }
    assert_eq!(
        codes.lock_dictionaries().expect("lock").len(),
        DICTIONARIES_KEPT
    );
    // A chunk of which a condition kept one row: only that row's value is numbered.
    let before = codes.values().expect("values").len();
    let wide: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..1000).map(|k| format!("法令{k}")),
    ));
    let e = codes
        .code_dictionary(&batch(&wide, vec![Some(5)]))
        .expect("codes");
    assert_eq!(text_of(e.value(0)).as_deref(), Some("法令5"));
    assert_eq!(codes.values().expect("values").len(), before + 1);
}

/// Codes by view, batch after batch, from more code tables than a thread keeps, each
/// batch's views built anew (a long value's view names another buffer in each): every
/// row's code names its own text in its own table.
#[test]
fn codes_by_view_name_each_rows_text_across_batches_and_tables() {
    use datafusion::arrow::array::StringViewBuilder;
    let tables: Vec<Arc<StreamCodes>> = (0..crate::views::TABLES_KEPT + 2)
        .map(|_| Arc::new(StreamCodes::default()))
        .collect();
    let value = |k: usize| match k % 4 {
        0 => format!("v{k}"),
        1 => format!("とても長い手続の名前 {k}"),
        2 => String::new(),
        _ => format!("所管{k}"),
    };
    // First as many tables as a thread keeps, batch after batch (each table's short
    // views found again, the tables' places rotating), then more than it keeps.
    let runs = (0..6usize)
        .flat_map(|batch| (0..crate::views::TABLES_KEPT).map(move |t| (batch, t)))
        .chain((6..12usize).flat_map(|batch| (0..tables.len()).map(move |t| (batch, t))))
        .chain((12..15usize).map(|batch| (batch, 1)));
    for (batch, t) in runs {
        let table = &tables[t];
        {
            let rows: Vec<Option<String>> = (0..if batch >= 12 { 8000 } else { 3000 })
                .map(|r| {
                    // The last batches draw from more short values than a table keeps.
                    let keys = if batch >= 12 { 40_000 } else { 5000 };
                    let k = (r * 7919 + batch * 31 + t * 17) % keys;
                    (r % 13 != 0).then(|| value(k))
                })
                .collect();
            let mut builder = StringViewBuilder::new();
            if batch % 2 == 0 {
                builder = builder.with_deduplicate_strings();
            }
            builder.extend(rows.iter().map(|v| v.as_deref()));
            let array = builder.finish();
            let codes = table.code_views(&array).expect("codes");
            let values = table.values().expect("values");
            for (r, want) in rows.iter().enumerate() {
                let code = codes.value(r) as usize;
                let got = (code != 0).then(|| values.value(code).to_string());
                let want = want.clone().filter(|v| !v.is_empty());
                assert_eq!(got, want, "batch {batch}, table {t}, row {r}");
            }
        }
    }
}

#[test]
fn exact_integers_are_128_bit_decimals_unchecked_and_floats_cast() {
    use datafusion::arrow::array::{AsArray, Float64Array, Int64Array, UInt64Array};
    use datafusion::arrow::datatypes::Decimal128Type;
    let udf = Exact {
        signature: user_defined(),
    };
    let run = |a: ArrayRef| -> Vec<Option<i128>> {
        let n = a.len();
        let t = a.data_type().clone();
        let coerced = udf.coerce_types(std::slice::from_ref(&t)).expect("coerces");
        let a = datafusion::arrow::compute::cast(&a, &coerced[0]).expect("coerced");
        let out = udf
            .invoke_with_args(ScalarFunctionArgs {
                args: vec![ColumnarValue::Array(a)],
                arg_fields: vec![Arc::new(Field::new("n", coerced[0].clone(), true))],
                number_rows: n,
                return_field: Arc::new(Field::new("e", DataType::Decimal128(38, 0), true)),
                config_options: Arc::new(Default::default()),
            })
            .expect("exact")
            .to_array(n)
            .expect("array");
        assert_eq!(out.data_type(), &DataType::Decimal128(38, 0));
        out.as_primitive::<Decimal128Type>().iter().collect()
    };
    assert_eq!(
        run(Arc::new(Int64Array::from(vec![
            Some(i64::MIN),
            None,
            Some(7),
            Some(i64::MAX)
        ]))),
        vec![
            Some(i128::from(i64::MIN)),
            None,
            Some(7),
            Some(i128::from(i64::MAX))
        ]
    );
    assert_eq!(
        run(Arc::new(UInt64Array::from(vec![Some(u64::MAX), None]))),
        vec![Some(i128::from(u64::MAX)), None]
    );
    assert_eq!(
        run(Arc::new(datafusion::arrow::array::Int32Array::from(vec![
            Some(-3),
            None
        ]))),
        vec![Some(-3), None]
    );
    assert_eq!(
        run(Arc::new(Float64Array::from(vec![
            Some(2.0),
            None,
            Some(-5.0)
        ]))),
        vec![Some(2), None, Some(-5)]
    );
    // A float that is no integer fails the call, as the cast it replaces did.
    let nan: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.0), Some(f64::NAN)]));
    let failed = udf.invoke_with_args(ScalarFunctionArgs {
        args: vec![ColumnarValue::Array(nan)],
        arg_fields: vec![Arc::new(Field::new("n", DataType::Float64, true))],
        number_rows: 2,
        return_field: Arc::new(Field::new("e", DataType::Decimal128(38, 0), true)),
        config_options: Arc::new(Default::default()),
    });
    assert!(failed.is_err(), "{failed:?}");
    assert!(udf.coerce_types(&[DataType::Utf8]).is_err());
    assert!(
        Functions::by_name(EXACT).is_some(),
        "sent to a cluster by name"
    );
}

fn parts_rows_of(text: ColumnarValue, n: usize) -> Vec<Vec<String>> {
    let memo = Memo::default();
    let out = over_text(&text, n, &memo, "k", &|at, n| {
        Ok(parts_of(at, n, ";", true))
    })
    .expect("runs");
    let ColumnarValue::Array(arr) = out else {
        panic!("array")
    };
    let list = arr
        .as_any()
        .downcast_ref::<datafusion::arrow::array::ListArray>()
        .expect("list");
    (0..list.len())
        .map(|i| {
            let v = list.value(i);
            let s = v.as_any().downcast_ref::<StringArray>().expect("strings");
            (0..s.len()).map(|j| s.value(j).to_string()).collect()
        })
        .collect()
}

fn parts_rows(text: ColumnarValue) -> Vec<Vec<String>> {
    let memo = Memo::default();
    let out = over_text(&text, 3, &memo, "k", &|at, n| {
        Ok(parts_of(at, n, ";", true))
    })
    .expect("runs");
    let ColumnarValue::Array(arr) = out else {
        panic!("array")
    };
    let list = arr
        .as_any()
        .downcast_ref::<datafusion::arrow::array::ListArray>()
        .expect("list");
    (0..list.len())
        .map(|i| {
            let v = list.value(i);
            let s = v
                .as_any()
                .downcast_ref::<datafusion::arrow::array::StringArray>()
                .expect("strings");
            (0..s.len()).map(|j| s.value(j).to_string()).collect()
        })
        .collect()
}

#[test]
fn a_lookup_maps_each_key_once_and_travels_as_json() {
    use datafusion::arrow::array::{AsArray, DictionaryArray, StringArray};
    use datafusion::arrow::datatypes::UInt32Type;
    let table = Arc::new(LookupTable::new(
        (0..100_000).map(|i| (format!("K{i}"), format!("P{}", i % 7))),
    ));
    assert_eq!(table.len(), 100_000);
    let again = LookupTable::from_json(&table.to_json()).expect("read back");
    assert_eq!(again.len(), 100_000);
    assert_eq!(again.parent("K15"), Some("P1"));
    let lookup = Lookup {
        signature: user_defined(),
        table: Arc::clone(&table),
        memo: Memo::default(),
    };
    let run = |array: ArrayRef| {
        let n = array.len();
        let out = lookup
            .invoke_with_args(ScalarFunctionArgs {
                args: vec![ColumnarValue::Array(array)],
                arg_fields: vec![Arc::new(Field::new("k", DataType::Utf8, true))],
                number_rows: n,
                return_field: Arc::new(Field::new("p", DataType::Utf8, true)),
                config_options: Arc::new(Default::default()),
            })
            .expect("looked up")
            .to_array(n)
            .expect("array");
        out.as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect::<Vec<_>>()
    };
    let plain: ArrayRef = Arc::new(StringArray::from(vec![Some("K8"), None, Some("X")]));
    assert_eq!(run(plain), vec![Some("P1".into()), None, None]);
    let coded: DictionaryArray<UInt32Type> = vec![Some("K2"), Some("K2"), None, Some("nope")]
        .into_iter()
        .collect();
    assert_eq!(
        run(Arc::new(coded)),
        vec![Some("P2".into()), Some("P2".into()), None, None]
    );
}

#[test]
fn parts_trim_and_drop_empty() {
    let plain = ColumnarValue::Array(Arc::new(datafusion::arrow::array::StringArray::from(vec![
        Some("a; b ;;c"),
        None,
        Some("  "),
    ])));
    let expected = vec![vec!["a", "b", "c"], vec![""], vec![""]];
    assert_eq!(parts_rows(plain), expected);
    // The same over a dictionary: its values split once, rows taken by code.
    let values = datafusion::arrow::array::StringArray::from(vec!["", "a; b ;;c", "  "]);
    let keys = UInt32Array::from(vec![Some(1), None, Some(2)]);
    let dict = datafusion::arrow::array::DictionaryArray::try_new(keys, Arc::new(values))
        .expect("dictionary");
    assert_eq!(parts_rows(ColumnarValue::Array(Arc::new(dict))), expected);
}

/// A prepared table's part-code count is not the text-splitting count an executor rebuilds
/// by name: one name, one function, wherever a plan is read.
#[test]
fn the_count_of_part_codes_has_a_name_of_its_own() {
    assert_ne!(super::parts::PART_CODE_COUNT, PART_COUNT);
    assert!(
        Functions::by_name(super::parts::PART_CODE_COUNT).is_none(),
        "part codes are the server's own: no executor rebuilds them by name"
    );
    let rebuilt = Functions::by_name(PART_COUNT).expect("sent to a cluster by name");
    assert_eq!(rebuilt.name(), PART_COUNT);
}

#[test]
fn part_counts_are_the_lengths_of_the_parts() {
    use datafusion::arrow::array::{AsArray, StringViewArray};
    use datafusion::arrow::datatypes::Int64Type;
    let udf = Functions::by_name(PART_COUNT).expect("made by name, so sent to a cluster");
    let count = |text: ArrayRef| -> Vec<i64> {
        let n = text.len();
        let out = udf
            .invoke_with_args(ScalarFunctionArgs {
                args: vec![
                    ColumnarValue::Array(text),
                    ColumnarValue::Scalar(ScalarValue::Utf8(Some(";".into()))),
                ],
                arg_fields: vec![
                    Arc::new(Field::new("t", DataType::Utf8, true)),
                    Arc::new(Field::new("s", DataType::Utf8, false)),
                ],
                number_rows: n,
                return_field: Arc::new(Field::new("n", DataType::Int64, false)),
                config_options: Arc::default(),
            })
            .expect("counts")
            .to_array(n)
            .expect("an array");
        out.as_primitive::<Int64Type>().values().to_vec()
    };
    let cells = vec![
        Some("a; b ;;c"),
        None,
        Some("  "),
        Some("x"),
        Some("a; b ;;c"),
    ];
    // As many as tally_parts gives without its empty marker, for plain text and for
    // views (each distinct view counted once).
    let expected = vec![3, 0, 0, 1, 3];
    let plain: ArrayRef = Arc::new(datafusion::arrow::array::StringArray::from(cells.clone()));
    assert_eq!(count(plain), expected);
    let views: ArrayRef = Arc::new(StringViewArray::from(cells));
    assert_eq!(count(views), expected);
}
