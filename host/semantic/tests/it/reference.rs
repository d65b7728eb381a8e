//! The real survey definition loads unchanged.

use tally_semantic::definition::{Codelist, Formula, load_definition};

use crate::harness::reference_dir;

#[test]
fn reference_survey_definition_loads_unchanged() {
    let Some(dir) = reference_dir() else { return };
    let path = dir.join("procedures-survey-r6.dataset.yaml");
    let text = std::fs::read_to_string(&path).expect("reference YAML readable");
    let loaded = load_definition(
        "procedures-survey-r6/dataset.yaml",
        "procedures-survey-r6",
        &text,
    )
    .unwrap_or_else(|e| panic!("the reference definition must load:\n{e}"));
    assert!(
        loaded.warnings.is_empty(),
        "no warnings expected: {:?}",
        loaded.warnings
    );
    let def = loaded.dataset;

    assert_eq!(def.fields.len(), 38);
    let count = |pred: &dyn Fn(&Option<Codelist>) -> bool| {
        def.fields.iter().filter(|f| pred(&f.codelist)).count()
    };
    assert_eq!(
        count(&|c| matches!(c, Some(Codelist::Static(_)))),
        15,
        "inline codelists"
    );
    assert_eq!(
        count(&|c| matches!(c, Some(Codelist::Auto))),
        3,
        "auto codelists"
    );
    assert_eq!(
        count(&|c| matches!(c, Some(Codelist::AutoSplit))),
        1,
        "auto_split codelists"
    );
    assert_eq!(
        def.fields.iter().filter(|f| f.is_multi_value()).count(),
        11,
        "multi-value fields"
    );

    assert_eq!(def.computed_measures.len(), 1);
    let m = &def.computed_measures[0];
    assert_eq!(m.name, "オンライン率");
    assert_eq!(
        m.formula,
        Formula::CountWhere {
            condition_field: def.field_index("オンライン化の実施状況").expect("declared"),
            condition_values: vec!["1 実施済".into()],
        }
    );
    assert_eq!(def.id_field.as_deref(), Some("手続ID"));
    assert_eq!(def.generic_values, ["その他"]);
    assert_eq!(
        def.published_at.as_ref().map(|d| d.as_str()),
        Some("2025-07-24")
    );
    assert_eq!(def.source.csv_header_rows, Some(2));

    let status = def.field("オンライン化の実施状況").expect("declared");
    let codes = status.static_codes().expect("static codelist");
    assert_eq!(codes.len(), 5);
    assert_eq!(codes[4].value, "5 一部実施済");
    assert!(codes[4].description.is_some());

    let procedure_type = def.field("手続類型").expect("declared");
    assert_eq!(
        procedure_type.static_codes().map(|c| c[1].value.as_str()),
        Some("2-1 申請等に基づく処分通知等")
    );
    let measures = def
        .fields
        .iter()
        .filter(|f| f.role == tally_semantic::definition::Role::Measure)
        .count();
    assert_eq!(measures, 3);
    assert_eq!(
        def.field("オンライン手続件数").map(|f| f.notes.len()),
        Some(2)
    );
}
