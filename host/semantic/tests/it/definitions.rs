//! The table of definition files: each `NAME.yaml` under `tests/data/definitions` has its
//! expected diagnostics in `NAME.expected`.

use tally_semantic::definition::{Severity, load_definition};

use crate::harness::{cases, check, data_dir, finish};

#[test]
fn definition_files() {
    let dir = data_dir("definitions");
    let mut failures = Vec::new();
    for path in cases(&dir, "yaml") {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path).expect("readable case");
        let label = format!("datasets/{stem}/dataset.yaml");
        let (served, diagnostics) = match load_definition(&label, &stem, &text) {
            Ok(loaded) => (true, loaded.warnings),
            Err(err) => (false, err.diagnostics),
        };

        // Every diagnostic names the file, a line, and says how to fix it; every one but a
        // whole-document problem names its key path.
        for d in &diagnostics {
            assert_eq!(d.file, label, "{stem}: file named in {d}");
            assert!(d.line >= 1 && d.column >= 1, "{stem}: position in {d}");
            assert!(!d.fix.trim().is_empty(), "{stem}: fix in {d}");
            let whole_document = d.message.contains("the file is empty")
                || d.message.contains("expected a mapping of keys")
                || d.message.contains("second YAML document");
            assert!(
                whole_document || !d.path.is_empty(),
                "{stem}: key path in {d}"
            );
        }
        let errors = diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        let warnings = diagnostics.len() - errors;
        if stem.starts_with("bad_") {
            assert!(
                !served && errors > 0,
                "{stem}: a bad file must be refused with errors"
            );
        } else if stem.starts_with("warn_") {
            assert!(
                served && errors == 0 && warnings > 0,
                "{stem}: must load with warnings"
            );
        } else {
            assert!(
                served && diagnostics.is_empty(),
                "{stem}: must load cleanly: {diagnostics:?}"
            );
        }

        let mut actual = String::new();
        actual.push_str(if served { "served\n" } else { "refused\n" });
        for d in &diagnostics {
            actual.push_str(&d.to_string());
            actual.push('\n');
        }
        check(&path.with_extension("expected"), &actual, &mut failures);
    }
    finish(failures);
}

#[test]
fn valid_file_keeps_every_key() {
    let text = std::fs::read_to_string(data_dir("definitions").join("ok_backends_and_dates.yaml"))
        .expect("readable");
    let loaded = load_definition(
        "ok_backends_and_dates/dataset.yaml",
        "ok_backends_and_dates",
        &text,
    )
    .expect("valid");
    let def = loaded.dataset;
    assert_eq!(def.id, "ok_backends_and_dates");
    assert_eq!(
        def.published_at.as_ref().map(|d| d.as_str()),
        Some("2024-04-01")
    );
    assert!(matches!(
        def.retrieved_at,
        Some(tally_semantic::definition::DateValue::DateTime(_))
    ));
    assert!(!def.enabled);
    assert_eq!(def.tags, ["law", "行政手続"]);
    assert_eq!(def.notes, ["改正履歴を含む"]);
    assert_eq!(
        def.backend.kind,
        tally_semantic::definition::BackendKind::Wasm
    );
    assert_eq!(
        def.backend.plugin,
        Some(tally_semantic::definition::PluginRef::Builtin("law".into()))
    );
    assert_eq!(def.backend.config["limits"]["memory_mb"], 64);
    assert_eq!(def.fields[2].multi_value.as_deref(), Some("|"));
    assert!(!def.fields[1].groupable);
    assert!(!def.fields[0].groupable, "id fields are not groupable");
}

/// Regression (issue 14, "a folder name that is not a valid id"): a folder named with a space,
/// a quote, a right-to-left mark or a newline is refused with the name escaped, and the
/// refusal names the folder so it can be renamed.
#[test]
fn folder_name_that_is_not_a_valid_id_is_refused() {
    let text = "title: t\nfields:\n- {name: a, role: dim}\n";
    for folder in [
        "a b",
        "quo\"te",
        "rtl\u{200f}mark",
        "new\nline",
        ".hidden",
        "",
    ] {
        let label = "datasets/x/dataset.yaml";
        let err = match load_definition(label, folder, text) {
            Ok(_) => panic!("folder {folder:?} must be refused"),
            Err(e) => e,
        };
        let message = err
            .errors()
            .map(|d| d.message.clone())
            .collect::<Vec<_>>()
            .join("; ");
        assert!(
            message.contains("not a valid dataset id"),
            "{folder:?}: {message}"
        );
        assert!(
            !message.contains('\n') && !message.contains('\u{200f}'),
            "{folder:?}: the name is escaped in {message:?}"
        );
    }
    assert!(load_definition("datasets/ok-1.x/dataset.yaml", "ok-1.x", text).is_ok());
}

#[test]
fn aliases_resolve_to_the_fields_they_name() {
    let text =
        std::fs::read_to_string(data_dir("definitions").join("aliases.yaml")).expect("readable");
    let def = load_definition("aliases/dataset.yaml", "aliases", &text)
        .expect("valid")
        .dataset;
    let names = |field: &str| -> Vec<&str> {
        def.field(field)
            .expect("declared")
            .aliases
            .iter()
            .map(|id| def.fields[*id].name.as_str())
            .collect()
    };
    assert_eq!(names("law_title"), ["law_abbrev", "law_num"]);
    // One name alone is a list of one.
    assert_eq!(names("law_title_kana"), ["law_title"]);
    assert!(names("law_num").is_empty());
}

/// Issue 38: the fields `revisions` and `links` name are resolved once, when the definition
/// is read; each id is the field of that name (and a field of the dataset linked to is
/// resolved against that dataset's definition, by `Link::resolve`).
#[test]
fn revisions_and_links_resolve_to_the_fields_they_name() {
    let text = std::fs::read_to_string(data_dir("definitions").join("revisions_and_links.yaml"))
        .expect("readable");
    let def = load_definition("refs/dataset.yaml", "refs", &text)
        .expect("valid")
        .dataset;
    let name = |id: tally_semantic::FieldId| def.fields[id].name.as_str();
    let revisions = def.revisions.as_ref().expect("revisions");
    assert_eq!(name(revisions.key), "law_id");
    assert_eq!(revisions.title.map(name), Some("law_title"));
    assert_eq!(name(revisions.effective), "revision_date");
    assert_eq!(revisions.id.map(name), Some("revision_id"));

    let [link] = def.links.as_slice() else {
        panic!("one link: {:?}", def.links);
    };
    assert_eq!(link.to, "laws");
    let here: Vec<(&str, &str)> = link
        .on
        .iter()
        .map(|(h, t)| (name(*h), t.as_str()))
        .collect();
    assert_eq!(here, [("法令番号", "law_num"), ("根拠条項号", "locator")]);

    // The dataset linked to declares its fields in another order; one of the link's is missing
    // from a second version of it.
    let laws = "title: Laws\nfields:\n- {name: text, role: attr}\n- {name: locator, role: attr, locator: law}\n- {name: law_num, role: dim}\n";
    let laws = load_definition("laws/dataset.yaml", "laws", laws)
        .expect("valid")
        .dataset;
    let linked = link.resolve(&laws);
    let there: Vec<(&str, Result<&str, &str>)> = linked
        .on
        .iter()
        .map(|(h, t)| (name(*h), t.map(|t| laws.fields[t].name.as_str())))
        .collect();
    assert_eq!(
        there,
        [("法令番号", Ok("law_num")), ("根拠条項号", Ok("locator"))]
    );
    assert_eq!(
        linked.text.map(|t| laws.fields[t].name.as_str()),
        Ok("text")
    );

    let renamed = "title: Laws\nfields:\n- {name: law_no, role: dim}\n- {name: locator, role: attr, locator: law}\n";
    let renamed = load_definition("laws/dataset.yaml", "laws", renamed)
        .expect("valid")
        .dataset;
    let linked = link.resolve(&renamed);
    assert_eq!(linked.on[0].1, Err("law_num"));
    assert_eq!(linked.on[1].1, Ok(tally_semantic::FieldId::at(1)));
    assert_eq!(linked.text, Err("text"));
}

/// `unit:` on a measure and on a ratio is kept (trimmed) and travels with every metric over
/// it, with what the metric is; a share of records has none, and `count` has none.
#[test]
fn units_and_what_each_metric_is() {
    use tally_semantic::definition::Mode;
    use tally_semantic::resolve::{Metric, ValueKind};
    let text =
        std::fs::read_to_string(data_dir("definitions").join("units.yaml")).expect("readable");
    let def = load_definition("units/dataset.yaml", "units", &text)
        .expect("valid")
        .dataset;
    assert_eq!(def.fields[1].unit.as_deref(), Some("件"));
    assert_eq!(def.fields[2].unit.as_deref(), Some("円"));
    assert_eq!(def.fields[0].unit, None);
    let share = &def.computed_measures[0];
    let ratio = &def.computed_measures[1];
    assert_eq!(
        (share.mode(), ratio.mode()),
        (Mode::CountWhere, Mode::SumRatio)
    );
    assert_eq!(ratio.unit.as_deref(), Some("円/件"));
    let field = |i: usize| tally_semantic::resolve::FieldId::at(i);
    let measure = |i: usize| tally_semantic::definition::MeasureId::at(i);
    let cases = [
        (Metric::Count, ValueKind::Count, None),
        (Metric::Sum(field(2)), ValueKind::Sum, Some("円")),
        (Metric::Avg(field(1)), ValueKind::Average, Some("件")),
        (Metric::Min(field(1)), ValueKind::Min, Some("件")),
        (Metric::Max(field(2)), ValueKind::Max, Some("円")),
        (Metric::AvgComputed(measure(0)), ValueKind::Share, None),
        (
            Metric::AvgComputed(measure(1)),
            ValueKind::Ratio,
            Some("円/件"),
        ),
    ];
    for (metric, kind, unit) in cases {
        assert_eq!(metric.value_kind(&def), kind, "{metric:?}");
        assert_eq!(metric.unit(&def), unit, "{metric:?}");
        assert_eq!(ValueKind::parse(kind.as_str()), Some(kind));
        assert_eq!(
            kind.additive(),
            matches!(kind, ValueKind::Count | ValueKind::Sum)
        );
    }
    for mode in Mode::ALL {
        assert_eq!(Mode::parse(mode.as_str()), Some(mode));
    }
}

#[test]
fn rollup_levels_and_related_fields_come_after_the_columns_as_derived_fields() {
    use tally_semantic::definition::DerivedSource;
    let text =
        std::fs::read_to_string(data_dir("definitions").join("relations.yaml")).expect("readable");
    let def = load_definition("relations/dataset.yaml", "relations", &text)
        .expect("valid")
        .dataset;
    let names: Vec<&str> = def.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "年度",
            "地域コード",
            "都道府県",
            "総人口",
            "地方",
            "東西",
            "地方名",
            "面積区分"
        ]
    );
    assert_eq!(def.column_fields().len(), 4);
    let region = def.fields[4].derived.as_ref().expect("derived");
    assert_eq!(def.fields[region.key].name, "都道府県");
    assert_eq!(
        region.source,
        DerivedSource::Rollup(vec![
            ("北海道".into(), vec!["北海道".into()]),
            ("東北".into(), vec!["青森県".into(), "岩手県".into()]),
        ])
    );
    // One child written without a list is a list of one.
    let DerivedSource::Rollup(east_west) = &def.fields[5].derived.as_ref().expect("derived").source
    else {
        panic!("a rollup");
    };
    assert_eq!(east_west[1], ("西".into(), vec!["沖縄県".into()]));
    let related = def.fields[6].derived.as_ref().expect("derived");
    assert_eq!(def.fields[related.key].name, "地域コード");
    assert_eq!(
        related.source,
        DerivedSource::Relation {
            dataset: "prefectures".into(),
            key: "地域コード".into(),
            field: "地方名".into(),
        }
    );
    assert!(def.fields[6].groupable && def.fields[6].role == tally_semantic::definition::Role::Dim);
}
