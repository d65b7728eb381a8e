//! The resolver of one dataset's names: fields, codes and conditions as a caller wrote
//! them, matched to what the definition declares (corrections collected, ties refused).

use super::plan::{MAX_CANDIDATES, SAMPLE_SIZE, resolution};
use super::plan::{Metric, MetricKind, Resolution};
use crate::definition::{DatasetDef, FieldId, MeasureId, Role};
use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names::{self, Match, normalize};
use crate::request::{Choice, Condition, Notice, Op};
use serde_json::json;

/// Resolves names of one dataset, collecting corrections.
pub(super) struct Resolver<'d> {
    pub(super) def: &'d DatasetDef,
    pub(super) tool: &'static str,
    pub(super) resolved: Vec<Resolution>,
    pub(super) notices: Vec<Notice>,
    /// Names the user chose for ambiguous ones.
    pub(super) chosen: Vec<Choice>,
    /// The time field was asked for its latest period (`{"年度": "latest"}`), or the one
    /// before it (`"previous"`: true).
    pub(super) latest: Option<(FieldId, bool)>,
}

/// A condition on the time field, as [`Resolver::period`] reads it.
pub(super) enum Period {
    /// The latest period in the data (false), or the one before it (true).
    Latest(bool),
    /// From one period to another, both included.
    Range(Op, Op),
    /// Any other condition, as written (or one year written as text, as a number).
    Other(Condition),
}

impl<'d> Resolver<'d> {
    /// A name that is (exactly or under NFKC) a column of the data that the definition does
    /// not declare, or that is closer to one than the margin that a correction to `resolved`
    /// needs: refused, never corrected to a different, declared thing that merely looks alike.
    pub(super) fn undeclared(
        &self,
        input: &str,
        parameter: &str,
        resolved: Option<names::Resolved<'_>>,
    ) -> Option<RequestError> {
        let def = self.def;
        if resolved.is_some_and(|r| r.how != Match::Fuzzy) || def.undeclared.is_empty() {
            return None;
        }
        let wanted = normalize(input);
        let column = def
            .undeclared
            .iter()
            .find(|c| normalize(c) == wanted)
            .or_else(|| {
                let r = resolved?;
                let to_resolved = names::similarity(&wanted, &normalize(r.canonical));
                def.undeclared.iter().find(|c| {
                    names::similarity(&wanted, &normalize(c)) + names::FUZZY_MARGIN >= to_resolved
                })
            })?;
        // What a caller can use instead: the served names closest to what it asked for (the
        // measures when it asked for a metric), then the column itself, said to be unserved.
        let metric = parameter == "metrics";
        let served: Vec<&str> = def
            .fields
            .iter()
            .filter(|f| !metric || f.role == Role::Measure)
            .map(|f| f.name.as_str())
            .collect();
        let closest: Vec<&str> = names::rank(input, served.iter().copied())
            .into_iter()
            .take(MAX_CANDIDATES)
            .collect();
        let mut candidates: Vec<Candidate> = closest
            .iter()
            .map(|name| {
                Candidate::described(*name, def.field(name).and_then(|f| f.desc.as_deref()))
            })
            .collect();
        candidates.push(Candidate::described(
            column.clone(),
            Some("undeclared column: present in the data, not served"),
        ));
        let kind = if metric { "measures" } else { "fields" };
        let err = RequestError::new(
            ErrorCode::UnknownField,
            format!(
                "`{input}` is a column present in the data of `{}` but not declared in its dataset.yaml, so it is not served{}; the served {kind} closest to it are {}",
                def.id,
                resolved.map_or(String::new(), |r| format!(
                    " (it is not `{}`, which only looks alike)",
                    r.canonical
                )),
                if closest.is_empty() {
                    "none".to_string()
                } else {
                    closest.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                }
            ),
        )
        .at(parameter.to_string())
        .candidates(candidates, served.len() + 1)
        .hint(format!(
            "use one of the served {kind} named above (inspect_dataset describes each); `{column}` can be served only by whoever maintains the dataset, by declaring it under `fields:` in its dataset.yaml"
        ));
        let best = closest.first().copied().unwrap_or("");
        let best = if metric && !best.is_empty() {
            format!("sum:{best}")
        } else {
            best.to_string()
        };
        Some(if best.is_empty() {
            err
        } else {
            self.example_with(err, parameter, &best)
        })
    }

    pub(super) fn field(&mut self, input: &str, parameter: &str) -> Result<FieldId, RequestError> {
        if let Some(id) = self.chosen_field(input, parameter) {
            return Ok(id);
        }
        let names = self.def.fields.iter().map(|f| f.name.as_str());
        let outcome = names::resolve(input, names);
        if let Some(err) = self.undeclared(input, parameter, outcome.as_ref().ok().copied()) {
            return Err(err);
        }
        match outcome {
            Ok(r) => {
                if let Some(res) = resolution(parameter, input, r) {
                    self.resolved.push(res);
                }
                Ok(FieldId::at(r.index))
            }
            Err(ranked) => Err(self.unknown_field(input, parameter, &ranked)),
        }
    }

    /// The field the user chose for `input` typed in `parameter`, when it is one that `input`
    /// is ambiguous between (a choice of anything else is ignored, and the name refused as
    /// before).
    pub(super) fn chosen_field(&mut self, input: &str, parameter: &str) -> Option<FieldId> {
        let choice = self
            .chosen
            .iter()
            .find(|c| c.input == input && c.parameter == parameter)?;
        let fits = names::ambiguous(input, self.def.fields.iter().map(|f| f.name.as_str()));
        if !fits.contains(&choice.name.as_str()) {
            return None;
        }
        let index = self.def.fields.iter().position(|f| f.name == choice.name)?;
        self.resolved.push(Resolution {
            parameter: parameter.to_string(),
            input: input.to_string(),
            canonical: choice.name.clone(),
        });
        Some(FieldId::at(index))
    }

    /// The measure (a measure field or a computed measure) the user chose for `target` named
    /// in `metrics`, when `target` is ambiguous between it and others; the choice is disclosed.
    pub(super) fn chosen_measure(&mut self, target: &str, measures: &[&str]) -> Option<String> {
        let choice = self
            .chosen
            .iter()
            .find(|c| c.parameter == "metrics" && c.input == target)?;
        let pool = measures
            .iter()
            .copied()
            .chain(self.def.computed_measures.iter().map(|m| m.name.as_str()));
        if !names::ambiguous(target, pool).contains(&choice.name.as_str()) {
            return None;
        }
        self.resolved.push(Resolution {
            parameter: "metrics".into(),
            input: target.to_string(),
            canonical: choice.name.clone(),
        });
        Some(choice.name.clone())
    }

    /// What a measure field or a computed measure is, in the definition's words.
    pub(super) fn measure_description(&self, name: &str) -> Option<&'d str> {
        let def = self.def;
        def.field(name).and_then(|f| f.desc.as_deref()).or_else(|| {
            def.computed_measures
                .iter()
                .find(|m| m.name == name)
                .and_then(|m| m.desc.as_deref())
        })
    }

    pub(super) fn unknown_field(
        &self,
        input: &str,
        parameter: &str,
        ranked: &[&str],
    ) -> RequestError {
        let def = self.def;
        let candidates = ranked
            .iter()
            .take(MAX_CANDIDATES)
            .map(|name| {
                Candidate::described(*name, def.field(name).and_then(|f| f.desc.as_deref()))
            })
            .collect();
        let fits = names::ambiguous(input, def.fields.iter().map(|f| f.name.as_str()));
        let message = if fits.len() > 1 {
            format!(
                "`{input}` is ambiguous in dataset `{}`: it fits {} fields ({}); name one exactly",
                def.id,
                fits.len(),
                fits.iter()
                    .take(MAX_CANDIDATES)
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!("dataset `{}` has no field `{input}`", def.id)
        };
        let mut err = RequestError::new(ErrorCode::UnknownField, message)
            .at(parameter.to_string())
            .candidates(candidates, def.fields.len())
            .sample(def.fields.iter().map(|f| f.name.as_str()), SAMPLE_SIZE);
        if fits.len() > 1 {
            err.ambiguous = Some(Box::new(crate::error::Ambiguous {
                what: "field",
                parameter: parameter.to_string(),
                input: input.to_string(),
                choices: fits
                    .iter()
                    .map(|name| {
                        Candidate::described(*name, def.field(name).and_then(|f| f.desc.as_deref()))
                    })
                    .collect(),
            }));
        }
        let ascii_guess = input.is_ascii() && def.fields.iter().all(|f| !f.name.is_ascii());
        err = if ascii_guess {
            err.hint(format!(
                "field names are in the dataset's language, not translated; call inspect_dataset(\"{}\") for the exact names",
                def.id
            ))
        } else {
            err.hint(format!(
                "call inspect_dataset(\"{}\") for every field and its meaning",
                def.id
            ))
        };
        let best = ranked.first().copied().unwrap_or("");
        self.example_with(err, parameter, best)
    }

    /// Adds a working example call that uses `name` in the parameter that failed.
    pub(super) fn example_with(
        &self,
        err: RequestError,
        parameter: &str,
        name: &str,
    ) -> RequestError {
        let def = self.def;
        let id = def.id.as_str();
        let top = parameter.split(['.', '[']).next().unwrap_or(parameter);
        let groupable = def
            .fields
            .iter()
            .find(|f| f.groupable)
            .map(|f| f.name.as_str());
        let args = match top {
            "where" => {
                json!({ "dataset_id": id, "where": { name: { "$not_empty": true } }, "limit": 5 })
            }
            "group_by" | "explode" => {
                json!({ "dataset_id": id, "group_by": [name], "metrics": ["count"] })
            }
            "metrics" | "having" => match groupable {
                Some(g) => json!({ "dataset_id": id, "group_by": [g], "metrics": [name] }),
                None => json!({ "dataset_id": id, "metrics": [name] }),
            },
            "order_by" => json!({ "dataset_id": id, "order_by": [format!("-{name}")], "limit": 5 }),
            "search_fields" => {
                json!({ "dataset_id": id, "q": "…", "search_fields": [name], "limit": 5 })
            }
            _ => json!({ "dataset_id": id, "select": [name], "limit": 5 }),
        };
        err.example(self.tool, args)
    }

    pub(super) fn fields(
        &mut self,
        inputs: &[String],
        parameter: &str,
    ) -> Result<Vec<FieldId>, RequestError> {
        let mut out = Vec::with_capacity(inputs.len());
        for input in inputs {
            let id = self.field(input, parameter)?;
            if !out.contains(&id) {
                out.push(id);
            }
        }
        Ok(out)
    }

    pub(super) fn metric(&mut self, input: &str) -> Result<Metric, RequestError> {
        let def = self.def;
        let normalized = normalize(input).replace('：', ":");
        let (kind, target) = match normalized.split_once(':') {
            Some((k, _)) => (k.trim().to_string(), Some(input_target(input))),
            None => (normalized.trim().to_string(), None),
        };
        let measures: Vec<&str> = def
            .fields
            .iter()
            .filter(|f| f.role == Role::Measure)
            .map(|f| f.name.as_str())
            .collect();
        let example_metric = match (measures.first(), def.computed_measures.first()) {
            (_, Some(m)) => format!("avg:{}", m.name),
            (Some(f), None) => format!("sum:{f}"),
            (None, None) => "count".to_string(),
        };
        let kind = self.metric_kind(input, &kind, &example_metric)?;
        if kind == MetricKind::Count {
            if target.is_some() {
                let err = RequestError::new(
                    ErrorCode::UnknownMetric,
                    format!("`{input}`: count takes no field"),
                )
                .at("metrics")
                .candidates(
                    vec![Candidate::described("count", Some("rows in each group"))],
                    1,
                )
                .hint("write `count`; it counts the rows of each group");
                return Err(self.example_with(err, "metrics", "count"));
            }
            return Ok(Metric::Count);
        }
        let Some(target) = target.filter(|t| !t.is_empty()) else {
            let err = RequestError::invalid("metrics", format!("`{input}` names no field")).hint(
                format!(
                    "write `{kind}:<measure>`; measures: {}",
                    measures.join(", ")
                ),
            );
            return Err(self.example_with(err, "metrics", &example_metric));
        };
        let target = self.chosen_measure(&target, &measures).unwrap_or(target);
        if kind != MetricKind::Count
            && let Some(computed) = self.computed_metric(input, kind, &target)?
        {
            return Ok(computed);
        }
        let field = self.measure_field(input, kind, &target, &measures, &example_metric)?;
        self.check_measure_role(input, kind, field, &measures, &example_metric)?;
        Ok(match kind {
            MetricKind::Sum => Metric::Sum(field),
            MetricKind::Avg => Metric::Avg(field),
            MetricKind::Min => Metric::Min(field),
            MetricKind::Max => Metric::Max(field),
            MetricKind::Last => Metric::Last(field),
            // Answered above: `count` takes no field.
            MetricKind::Count => Metric::Count,
        })
    }

    /// The kind of a metric (`count`, `sum`, …) named by `kind`, the part before its `:`.
    pub(super) fn metric_kind(
        &self,
        input: &str,
        kind: &str,
        example_metric: &str,
    ) -> Result<MetricKind, RequestError> {
        let kind = match names::resolve(kind, MetricKind::ALL.map(MetricKind::as_str)) {
            Ok(r) => Some(MetricKind::ALL[r.index]),
            Err(_) => MetricKind::synonym(kind),
        };
        let Some(kind) = kind else {
            let err = RequestError::new(ErrorCode::UnknownMetric, format!("unknown metric `{input}`"))
                .at("metrics")
                .candidates(
                    self.ranked_metric_candidates(input).into_iter().take(MAX_CANDIDATES).collect(),
                    self.metric_candidates().len(),
                )
                .hint(if self.def.time_field().is_some() {
                    "a metric is `count`, or `sum:F`, `avg:F`, `min:F`, `max:F`, `last:F` (at each group's latest period) with F a measure, or `avg:<computed measure>`"
                } else {
                    "a metric is `count`, or `sum:F`, `avg:F`, `min:F`, `max:F` with F a measure, or `avg:<computed measure>`"
                });
            return Err(self.example_with(err, "metrics", example_metric));
        };
        Ok(kind)
    }

    /// The computed measure `target` names, if any: only averaged; `None` when it names none.
    pub(super) fn computed_metric(
        &self,
        input: &str,
        kind: MetricKind,
        target: &str,
    ) -> Result<Option<Metric>, RequestError> {
        let def = self.def;
        let computed = def.computed_measures.iter().map(|m| m.name.as_str());
        let outcome = names::resolve(target, computed);
        let declared = def.field(target).is_some();
        if !declared
            && let Some(err) = self.undeclared(target, "metrics", outcome.as_ref().ok().copied())
        {
            return Err(err);
        }
        if let Ok(r) = outcome {
            let index = r.index;
            if kind != MetricKind::Avg {
                let err = RequestError::new(
                    ErrorCode::RoleMismatch,
                    format!(
                        "`{input}`: `{}` is a computed measure (a ratio); it can only be averaged",
                        r.canonical
                    ),
                )
                .at("metrics")
                .candidates(vec![Candidate::new(format!("avg:{}", r.canonical))], 1)
                .hint(format!("use `avg:{}`", r.canonical));
                return Err(self.example_with(err, "metrics", &format!("avg:{}", r.canonical)));
            }
            return Ok(Some(Metric::AvgComputed(MeasureId::at(index))));
        }
        Ok(None)
    }

    /// The declared field `target` names, refused with the measures ranked when none fits.
    pub(super) fn measure_field(
        &self,
        input: &str,
        kind: MetricKind,
        target: &str,
        measures: &[&str],
        example_metric: &str,
    ) -> Result<FieldId, RequestError> {
        let def = self.def;
        let field_names = def.fields.iter().map(|f| f.name.as_str());
        let outcome = names::resolve(target, field_names);
        if let Some(err) = self.undeclared(target, "metrics", outcome.as_ref().ok().copied()) {
            return Err(err);
        }
        match outcome {
            Ok(r) => Ok(FieldId::at(r.index)),
            Err(_) => {
                let pool: Vec<&str> = measures
                    .iter()
                    .copied()
                    .chain(def.computed_measures.iter().map(|m| m.name.as_str()))
                    .collect();
                let ranked = names::rank(target, pool.iter().copied());
                let candidates = ranked
                    .iter()
                    .take(MAX_CANDIDATES)
                    .map(|n| Candidate::new(format!("{kind}:{n}")))
                    .collect();
                let fits = names::ambiguous(target, pool.iter().copied());
                let message = if fits.len() > 1 {
                    format!(
                        "`{input}`: `{target}` is ambiguous in dataset `{}`: it fits {} measures ({}); name one exactly",
                        def.id,
                        fits.len(),
                        fits.iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!("`{input}`: dataset `{}` has no measure `{target}`", def.id)
                };
                let mut err = RequestError::new(ErrorCode::UnknownMetric, message)
                    .at("metrics")
                    .candidates(candidates, pool.len())
                    .hint(format!("measures: {}", pool.join(", ")));
                if fits.len() > 1 {
                    err.ambiguous = Some(Box::new(crate::error::Ambiguous {
                        what: "measure",
                        parameter: "metrics".into(),
                        input: target.to_string(),
                        choices: fits
                            .iter()
                            .map(|n| Candidate::described(*n, self.measure_description(n)))
                            .collect(),
                    }));
                }
                let best = ranked
                    .first()
                    .map(|b| format!("{kind}:{b}"))
                    .unwrap_or_else(|| example_metric.to_string());
                Err(self.example_with(err, "metrics", &best))
            }
        }
    }

    /// Refuses a field that is not a measure: only measures are aggregated.
    pub(super) fn check_measure_role(
        &self,
        input: &str,
        kind: MetricKind,
        field: FieldId,
        measures: &[&str],
        example_metric: &str,
    ) -> Result<(), RequestError> {
        let f = &self.def.fields[field];
        if f.role != Role::Measure {
            let err = RequestError::new(
                ErrorCode::RoleMismatch,
                format!(
                    "`{input}`: `{}` has role `{}`; only measures can be aggregated",
                    f.name,
                    f.role.as_str()
                ),
            )
            .at("metrics")
            .candidates(
                measures.iter().map(|m| Candidate::new(format!("{kind}:{m}"))).collect(),
                measures.len(),
            )
            .hint(format!(
                "to count rows per value of `{}`, group by it: \"group_by\": [\"{}\"], \"metrics\": [\"count\"]",
                f.name, f.name
            ));
            return Err(self.example_with(err, "metrics", example_metric));
        }
        Ok(())
    }

    /// Every valid metric, closest to `input` first.
    pub(super) fn ranked_metric_candidates(&self, input: &str) -> Vec<Candidate> {
        let all = self.metric_candidates();
        names::rank(input, all.iter().map(|c| c.name.as_str()))
            .iter()
            .filter_map(|n| all.iter().find(|c| c.name == *n).cloned())
            .collect()
    }

    pub(super) fn metric_candidates(&self) -> Vec<Candidate> {
        let def = self.def;
        let mut out = vec![Candidate::described("count", Some("rows in each group"))];
        for f in def.fields.iter().filter(|f| f.role == Role::Measure) {
            // `last:` is of data with periods.
            let timed = def.time_field().is_some();
            for kind in MetricKind::ALL
                .iter()
                .filter(|k| k.takes_field() && (timed || **k != MetricKind::Last))
            {
                out.push(Candidate::new(format!("{kind}:{}", f.name)));
            }
        }
        for m in &def.computed_measures {
            out.push(Candidate::described(
                format!("avg:{}", m.name),
                m.desc.as_deref(),
            ));
        }
        out
    }
}

/// The part after the colon, as typed (names are resolved separately).
pub(super) fn input_target(input: &str) -> String {
    input
        .split_once([':', '：'])
        .map(|(_, t)| t.trim().to_string())
        .unwrap_or_default()
}
