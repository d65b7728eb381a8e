//! Tests of the prepared table: what preparing counts of each field, a share over views, rows
//! taken across chunks.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field as ArrowField, Schema, UInt32Type};
use tally_semantic::definition::{FieldId, MeasureId};

use super::{Builder, CHUNK_ROWS, InMemory, Layout, Share, Store};

/// A store of `chunks` chunks over one text and one number field.
fn store(chunks: usize) -> Store {
    let def = tally_semantic::definition::load_definition(
        "d.yaml",
        "d",
        "title: t\nfields:\n- {name: s, role: attr}\n- {name: n, role: measure, data_type: integer}\n",
    )
    .expect("definition")
    .dataset;
    let source = Schema::new(vec![
        ArrowField::new("s", DataType::Utf8, true),
        ArrowField::new("n", DataType::Int64, true),
    ]);
    let layout = Arc::new(Layout::of(&def, &source).expect("layout"));
    let mut builder = Builder::new("d", Arc::clone(&layout));
    let mut sink = InMemory::default();
    for c in 0..chunks {
        let text: StringArray = (0..CHUNK_ROWS)
            .map(|r| Some(format!("value {}", (c * CHUNK_ROWS + r) % 1000)))
            .collect();
        let numbers = Int64Array::from_iter_values((0..CHUNK_ROWS as i64).map(|r| r + c as i64));
        let batch = RecordBatch::try_new(
            Arc::new(source.clone()),
            vec![Arc::new(text), Arc::new(numbers)],
        )
        .expect("batch");
        builder.push(&batch, &mut sink).expect("pushed");
    }
    let (values, stats) = builder.finish(&mut sink).expect("finished");
    Store::in_memory("d", layout, sink.chunks, values, stats).expect("store")
}

#[test]
fn preparing_counts_each_fields_fill_and_numbers_as_inspect_does() {
    let def = tally_semantic::definition::load_definition(
        "d.yaml",
        "d",
        "title: t\nfields:\n- {name: s, role: attr}\n- {name: n, role: measure, data_type: integer}\n- {name: x, role: measure, data_type: number}\n",
    )
    .expect("definition")
    .dataset;
    let source = Schema::new(vec![
        ArrowField::new("s", DataType::Utf8, true),
        ArrowField::new("n", DataType::Int32, true),
        ArrowField::new("x", DataType::Float64, true),
    ]);
    let layout = Arc::new(Layout::of(&def, &source).expect("layout"));
    let mut builder = Builder::new("d", Arc::clone(&layout));
    let mut sink = InMemory::default();
    // Blank is spaces only (as `btrim`): a full-width space or a tab is a value.
    type Batch<'a> = (Vec<Option<&'a str>>, Vec<Option<i32>>, Vec<Option<f64>>);
    let batches: [Batch<'_>; 2] = [
        (
            vec![Some("a"), None, Some(""), Some("  ")],
            vec![Some(3), None, Some(0), Some(-7)],
            vec![Some(0.5), Some(f64::NAN), None, Some(0.0)],
        ),
        (
            vec![Some("\u{3000}"), Some("a"), Some("\t"), None],
            vec![Some(0), Some(12), None, None],
            vec![None, Some(-2.0), Some(4.0), None],
        ),
    ];
    for (text, ints, floats) in batches {
        let batch = RecordBatch::try_new(
            Arc::new(source.clone()),
            vec![
                Arc::new(StringArray::from(text)),
                Arc::new(datafusion::arrow::array::Int32Array::from(ints)),
                Arc::new(datafusion::arrow::array::Float64Array::from(floats)),
            ],
        )
        .expect("batch");
        builder.push(&batch, &mut sink).expect("pushed");
    }
    let (_, stats) = builder.finish(&mut sink).expect("finished");
    assert_eq!(stats[0].filled, 4, "a, a, the full-width space and the tab");
    assert_eq!(stats[0].min, None);
    let n = &stats[1];
    assert_eq!((n.filled, n.zeros), (5, 2));
    assert_eq!(
        (n.min.clone(), n.max.clone()),
        (Some((-7).into()), Some(12.into()))
    );
    assert_eq!(n.mean(), Some(8.0 / 5.0));
    let x = &stats[2];
    assert_eq!((x.filled, x.zeros), (5, 1));
    assert_eq!(x.min, serde_json::Number::from_f64(-2.0));
    assert_eq!(x.max, serde_json::Number::from_f64(4.0));
    assert!(
        x.mean().is_some_and(f64::is_nan),
        "a NaN makes the mean NaN, as avg does"
    );
}

/// A share over views (short and long values, nulls, `""`, a long value that only
/// starts like a counted one, views built with and without a shared buffer) is the share
/// decided on the text itself.
#[test]
fn a_share_over_views_is_the_share_over_the_text() {
    use datafusion::arrow::array::{StringArray, StringViewBuilder};
    let counted = "オンライン化の実施済の手続";
    let share = |separator: Option<&str>| Share {
        measure: MeasureId::at(0),
        field: FieldId::at(0),
        separator: separator.map(str::to_string),
        values: vec!["1 実施済".into(), counted.into(), "abc".into()],
    };
    let values = [
        Some("1 実施済"),
        Some("2 未実施"),
        Some(counted),
        Some("オンライン化の実施済の手続でない"),
        Some("オンライン化の未実施の手続"),
        None,
        Some(""),
        Some("abc"),
        Some("abcd"),
        Some("1 実施済; abc"),
    ];
    let rows: Vec<Option<&str>> = (0..500).map(|i| values[(i * 7) % values.len()]).collect();
    for separator in [None, Some(";")] {
        let share = share(separator);
        let want: Vec<f64> = rows
            .iter()
            .map(|v| f64::from(u8::from(v.is_some_and(|v| share.counts(v)))))
            .collect();
        for dedup in [false, true] {
            let mut builder = StringViewBuilder::new();
            if dedup {
                builder = builder.with_deduplicate_strings();
            }
            builder.extend(rows.iter().copied());
            let got = share.column(&builder.finish()).expect("share");
            let got = got.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
            assert_eq!(got.values().to_vec(), want, "{separator:?}, dedup {dedup}");
        }
        let plain = share
            .column(&StringArray::from(rows.clone()))
            .expect("share");
        let plain = plain.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        assert_eq!(plain.values().to_vec(), want);
    }
}

#[test]
fn rows_taken_across_chunks_share_the_one_dictionary() {
    let store = store(4);
    let rows: Vec<u64> = vec![5, (CHUNK_ROWS * 3 + 7) as u64, (CHUNK_ROWS + 1) as u64];
    let names = vec!["s".to_string(), "n".to_string()];
    let batch = store
        .take_rows(&rows, &[FieldId::at(0), FieldId::at(1)], &names)
        .expect("taken");
    let text = batch
        .column(0)
        .as_dictionary_opt::<UInt32Type>()
        .expect("dictionary");
    // The values are not copied per chunk: the page refers to the table's dictionary.
    assert!(Arc::ptr_eq(
        text.values(),
        &store.shared_values(FieldId::at(0)).expect("values")
    ));
    let shown: Vec<String> = (0..3)
        .map(|i| {
            text.values()
                .as_string::<i32>()
                .value(text.keys().value(i) as usize)
                .to_string()
        })
        .collect();
    assert_eq!(shown, ["value 5", "value 311", "value 769"]);
    let numbers = batch
        .column(1)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    assert_eq!(numbers.values().to_vec(), vec![5, 10, 2]);
}
