//! `summarize_records` calls resolved: groups, metrics, comparisons, and the result's
//! columns that `having` and `order_by` name.

use super::conditions::{parse_order_key, resolve_as_of};
use super::plan::{
    ColumnSort, Compare, Filter, HavingFilter, Latest, Metric, RelativeEnd, Resolution,
    SummarizePlan,
};
use super::plan::{MAX_CANDIDATES, SAMPLE_SIZE};
use super::resolver::{Period, Resolver};
use crate::definition::{Aggregation, DatasetDef, FieldId, Role};
use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names::{self, Match, normalize};
use crate::request::{CompareArg, Condition, Notice, Op, Scalar, SummarizeArgs};
use serde_json::json;

/// Resolves a `summarize_records` call against `def`.
pub fn resolve_summarize(
    def: &DatasetDef,
    args: SummarizeArgs,
) -> Result<SummarizePlan, RequestError> {
    let mut r = Resolver {
        def,
        tool: "summarize_records",
        resolved: Vec::new(),
        notices: args.notices,
        chosen: args.chosen,
        latest: None,
    };
    let metric_inputs = if args.metrics.is_empty() {
        vec!["count".to_string()]
    } else {
        args.metrics
    };
    let metrics = r.summary_metrics(&metric_inputs)?;

    let mut group_by = r.fields(&args.group_by, "group_by")?;
    r.check_groupable(&group_by)?;

    let explode = r.explode(&args.explode, &mut group_by)?;

    let mut filters = r.filters(args.conditions)?;
    let compare = match args.compare {
        Some(c) => Some(r.compare(c, &mut group_by, &mut filters, &explode)?),
        None => None,
    };

    let result = SummaryColumns::new(
        def,
        &metric_inputs,
        &metrics,
        &group_by,
        compare.as_ref(),
        args.rank,
    );
    let having = r.having(args.having, &result)?;
    let order_by = r.order_by(&args.order_by, &result)?;

    let as_of = resolve_as_of(def, args.as_of.as_deref(), &filters)?;
    // Over a dataset of several periods, a summary is of one period, or of several told
    // apart: with no condition on the time field and no grouping by it, the latest.
    let latest = match (r.latest, def.time_field()) {
        (Some((field, previous)), _) => Some(Latest {
            field,
            defaulted: false,
            previous,
        }),
        // `last:` reads each group at its own latest period, so the others are read too.
        (None, Some(time))
            if !group_by.contains(&time)
                && !filters.iter().any(|f| f.field == time)
                && !metrics.iter().any(|m| matches!(m, Metric::Last(_))) =>
        {
            Some(Latest {
                field: time,
                defaulted: true,
                previous: false,
            })
        }
        _ => None,
    };
    r.check_aggregations(&metrics, &group_by, &filters, latest)?;
    Ok(SummarizePlan {
        dataset_id: def.id.clone(),
        metrics,
        group_by,
        filters,
        having,
        explode,
        order_by,
        limit: args.limit,
        as_of,
        latest,
        compare,
        rank: args.rank,
        resolved_fields: r.resolved,
        notices: r.notices,
    })
}

impl Resolver<'_> {
    /// Refuses a derived field (a roll-up level, a related dataset's field) where the
    /// records' own columns are read: it is grouped and filtered by, not read record by record.
    pub(super) fn columns_only(
        &self,
        fields: &[FieldId],
        parameter: &str,
    ) -> Result<(), RequestError> {
        let def = self.def;
        match fields.iter().find(|f| !def.fields[**f].is_column()) {
            Some(f) => {
                let name = &def.fields[*f].name;
                let key = def.fields[*f]
                    .derived
                    .as_ref()
                    .map(|d| def.fields[d.key].name.clone())
                    .unwrap_or_default();
                Err(RequestError::invalid(
                    format!("{parameter}.{name}"),
                    format!("`{name}` is looked up from `{key}` (a roll-up or a related dataset's field): it is grouped and filtered by, not read record by record"),
                )
                .hint(format!("{parameter} `{key}`; or summarize_records with group_by `{name}`")))
            }
            None => Ok(()),
        }
    }

    /// Resolves `compare` against the dataset's time field: two periods (each one period,
    /// read as a condition on the time field is) are kept and grouped by; `previous` groups
    /// by the time field. Refused on a dataset without a time field, with a condition or
    /// grouping that contradicts it, or with exploded fields.
    pub(super) fn compare(
        &mut self,
        arg: CompareArg,
        group_by: &mut Vec<FieldId>,
        filters: &mut Vec<Filter>,
        explode: &[FieldId],
    ) -> Result<Compare, RequestError> {
        let def = self.def;
        let Some(time) = def.time_field() else {
            return Err(RequestError::invalid(
                "compare",
                format!(
                    "`compare` sets periods of a time field side by side, and dataset `{}` declares none (`role: time` in dataset.yaml)",
                    def.id
                ),
            )
            .hint("group_by the field that holds the periods and compare the rows; or declare it `role: time` with its `grain`"));
        };
        let t = def.fields[time].name.clone();
        if !explode.is_empty() {
            return Err(RequestError::invalid(
                "compare",
                "`compare` cannot be combined with exploded multi-value fields",
            )
            .hint(
                "compare whole records (leave explode out), or ask each period in its own call",
            ));
        }
        match arg {
            CompareArg::Previous => {
                let grouped = group_by.contains(&time);
                if !grouped {
                    group_by.push(time);
                }
                Ok(Compare::Previous {
                    field: time,
                    grouped,
                })
            }
            CompareArg::Periods { from, to } => {
                if group_by.contains(&time) {
                    return Err(RequestError::invalid(
                        format!("group_by.{t}"),
                        format!("`compare` sets the periods of `{t}` side by side as columns, so `{t}` is not also a group_by key"),
                    )
                    .hint(format!("leave `{t}` out of group_by; or send `\"compare\": \"previous\"` to keep one row per period with the change from the one before")));
                }
                if filters.iter().any(|f| f.field == time) {
                    return Err(RequestError::invalid(
                        format!("where.{t}"),
                        format!("`compare` names the periods of `{t}` read, so `where` holds no condition on `{t}`"),
                    )
                    .hint(format!("leave the condition on `{t}` out of where")));
                }
                let mut relative = Vec::new();
                let mut period = |end: &'static str,
                                  value: Scalar|
                 -> Result<Scalar, RequestError> {
                    let parameter = format!("compare.{end}");
                    let cond = Condition {
                        target: t.clone(),
                        op: Op::Eq(value.clone()),
                        plain: false,
                    };
                    let op = match self.period(time, cond)? {
                        Period::Other(c) => self.check_operand(time, c.op)?,
                        // Set by the engine, which reads the periods there are.
                        Period::Latest(previous) => {
                            relative.push(RelativeEnd {
                                end,
                                previous,
                                input: value.text(),
                            });
                            Op::Eq(Scalar::Str(
                                if previous { "previous" } else { "latest" }.into(),
                            ))
                        }
                        Period::Range(..) => {
                            return Err(RequestError::invalid(
                                parameter.clone(),
                                format!("`{parameter}` is one period of `{t}` (such as 2020); `{}` is not one", value.text()),
                            )
                            .hint("name each period; inspect_dataset lists the periods of the time field"));
                        }
                    };
                    self.said_of(&t, &parameter);
                    match op {
                        Op::Eq(v) => Ok(v),
                        _ => Err(RequestError::invalid(
                            parameter.clone(),
                            format!("`{parameter}` is one period of `{t}` (such as 2020)"),
                        )),
                    }
                };
                let from = period("from", from)?;
                let to = period("to", to)?;
                if from.text() == to.text() {
                    return Err(RequestError::invalid(
                        "compare",
                        format!(
                            "`compare` needs two different periods; both are {}",
                            from.text()
                        ),
                    ));
                }
                // With an end relative to the data, the engine adds the condition once it is set.
                if relative.is_empty() {
                    filters.push(Filter {
                        field: time,
                        op: Op::In(vec![from.clone(), to.clone()]),
                    });
                }
                group_by.push(time);
                Ok(Compare::Periods {
                    field: time,
                    from,
                    to,
                    relative,
                })
            }
        }
    }

    /// The readings and notices [`Resolver::period`] records are of a condition on the time
    /// field `t`; said of `parameter` (an end of `compare`) instead.
    pub(super) fn said_of(&mut self, t: &str, parameter: &str) {
        for r in &mut self.resolved {
            if r.parameter == format!("where.{t}")
                || r.parameter.starts_with(&format!("where.{t}."))
            {
                r.parameter = parameter.to_string();
            }
        }
        for n in &mut self.notices {
            if n.parameter == format!("where.{t}") {
                n.parameter = parameter.to_string();
            }
        }
    }

    /// Refuses a metric a measure's `aggregation` forbids, with the reason and the forms that
    /// are allowed: a rate summed, a rate averaged with no declared weight, a stock summed
    /// over several periods.
    pub(super) fn check_aggregations(
        &self,
        metrics: &[Metric],
        group_by: &[FieldId],
        filters: &[Filter],
        latest: Option<Latest>,
    ) -> Result<(), RequestError> {
        let def = self.def;
        let time = def.time_field();
        // Whether a group may hold records of several periods.
        let periods = time.filter(|t| {
            latest.is_none()
                && !group_by.contains(t)
                && !filters.iter().any(|f| {
                    f.field == *t
                        && match &f.op {
                            Op::Eq(_) => true,
                            Op::In(values) => values.len() == 1,
                            _ => false,
                        }
                })
        });
        for m in metrics {
            if let Metric::Last(f) = m {
                self.check_last(*f, time)?;
                continue;
            }
            let (field, summed) = match m {
                Metric::Sum(f) => (*f, true),
                Metric::Avg(f) => (*f, false),
                _ => continue,
            };
            let f = &def.fields[field];
            let name = &f.name;
            let refusal = match (f.aggregation, summed) {
                (Some(Aggregation::Rate), true) => Some((
                    format!(
                        "`{name}` is a rate: rates are not summed (the rates of two prefectures do not add up to the rate of both)"
                    ),
                    match f.weight {
                        Some(w) => format!(
                            "`avg:{name}` is its average weighted by `{}`; `min:{name}`/`max:{name}`, or query_records for each record's value",
                            def.fields[w].name
                        ),
                        None => format!(
                            "`min:{name}`/`max:{name}`, or query_records for each record's value"
                        ),
                    },
                )),
                (Some(Aggregation::Rate), false) if f.weight.is_none() => Some((
                    format!(
                        "`{name}` is a rate, and an unweighted average of rates is wrong (a small prefecture would count as much as a large one); dataset.yaml declares no `weight` to average it by"
                    ),
                    format!(
                        "`min:{name}`/`max:{name}`, or query_records for each record's value; or declare `weight: <the measure the rate is of>` on `{name}` in dataset.yaml"
                    ),
                )),
                (Some(Aggregation::Stock), true) if periods.is_some() => {
                    let t = &def.fields[periods.unwrap_or(field)].name;
                    Some((
                        format!(
                            "`{name}` is a stock (a level at a point in time): summed over several periods of `{t}` it would count the same things once a period"
                        ),
                        format!(
                            "group_by `{t}`, or a condition on one period (`{{\"{t}\": 2020}}` or `\"latest\"`); `avg:{name}` is its mean level over the periods, `last:{name}` its level at each group's latest period"
                        ),
                    ))
                }
                _ => None,
            };
            if let Some((message, hint)) = refusal {
                return Err(RequestError::new(ErrorCode::NotAdditive, message)
                    .at(format!("metrics.{}", m.column(def)))
                    .hint(hint));
            }
        }
        Ok(())
    }
}

impl Resolver<'_> {
    /// `last:F` needs a time field, and sums F over a group's records of one period: refused
    /// for a rate (which is never summed).
    pub(super) fn check_last(&self, f: FieldId, time: Option<FieldId>) -> Result<(), RequestError> {
        let def = self.def;
        let name = &def.fields[f].name;
        if time.is_none() {
            return Err(RequestError::invalid(
                format!("metrics.last:{name}"),
                format!("`last:{name}` is the value at each group's latest period, and dataset `{}` declares no time field", def.id),
            )
            .hint(format!("`sum:{name}`, `max:{name}`; or declare the field holding the periods `role: time` with its `grain`")));
        }
        if def.fields[f].aggregation == Some(Aggregation::Rate) {
            return Err(RequestError::new(
                ErrorCode::NotAdditive,
                format!("`{name}` is a rate: `last:` sums a group's records of its latest period, and rates are not summed"),
            )
            .at(format!("metrics.last:{name}"))
            .hint(format!("a condition on one period (`\"latest\"`) with `min:{name}`/`max:{name}` or its weighted `avg:`, or query_records for each record's value")));
        }
        Ok(())
    }

    /// Resolves a summary's metrics, each once, recording those typed in another form.
    pub(super) fn summary_metrics(
        &mut self,
        metric_inputs: &[String],
    ) -> Result<Vec<Metric>, RequestError> {
        let def = self.def;
        let mut metrics: Vec<Metric> = Vec::new();
        for input in metric_inputs {
            let m = self.metric(input)?;
            let column = m.column(def);
            if column != *input {
                self.resolved.push(Resolution {
                    parameter: "metrics".into(),
                    input: input.clone(),
                    canonical: column,
                });
            }
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
        Ok(metrics)
    }

    /// Refuses a `group_by` field that cannot be grouped by, naming those that can.
    pub(super) fn check_groupable(&self, group_by: &[FieldId]) -> Result<(), RequestError> {
        let def = self.def;
        for &g in group_by {
            let f = &def.fields[g];
            if !f.groupable {
                let groupable: Vec<Candidate> = def
                    .fields
                    .iter()
                    .filter(|f| f.groupable)
                    .map(|f| Candidate::described(f.name.clone(), f.desc.as_deref()))
                    .collect();
                let total = groupable.len();
                let names = names::rank(&f.name, groupable.iter().map(|c| c.name.as_str()));
                let best = names.first().map(|s| s.to_string()).unwrap_or_default();
                let ranked: Vec<Candidate> = names
                    .iter()
                    .take(MAX_CANDIDATES)
                    .filter_map(|n| groupable.iter().find(|c| c.name == *n).cloned())
                    .collect();
                let why = match f.role {
                    Role::Measure => {
                        "it is a measure: aggregate it with sum:/avg:/min:/max: instead".to_string()
                    }
                    Role::Id => "it identifies single records".to_string(),
                    _ => "its definition says `groupable: false`".to_string(),
                };
                let err = RequestError::new(
                    ErrorCode::RoleMismatch,
                    format!("`{}` cannot be grouped by: {why}", f.name),
                )
                .at("group_by")
                .candidates(ranked, total);
                return Err(self.example_with(err, "group_by", &best));
            }
        }
        Ok(())
    }

    /// Resolves the fields to explode, refusing single-value ones; adds each to `group_by`, and
    /// explodes every multi-value field grouped by, saying so in a notice.
    pub(super) fn explode(
        &mut self,
        inputs: &[String],
        group_by: &mut Vec<FieldId>,
    ) -> Result<Vec<FieldId>, RequestError> {
        let def = self.def;
        let mut explode = self.fields(inputs, "explode")?;
        for &e in &explode {
            let f = &def.fields[e];
            if !f.is_multi_value() {
                let multi: Vec<Candidate> = def
                    .fields
                    .iter()
                    .filter(|f| f.is_multi_value())
                    .map(|f| Candidate::described(f.name.clone(), f.desc.as_deref()))
                    .collect();
                let total = multi.len();
                let best = multi.first().map(|c| c.name.clone()).unwrap_or_default();
                let err = RequestError::new(
                    ErrorCode::RoleMismatch,
                    format!(
                        "`{}` holds one value per record; only multi-value fields can be exploded",
                        f.name
                    ),
                )
                .at("explode")
                .candidates(multi.into_iter().take(SAMPLE_SIZE).collect(), total);
                return Err(self.example_with(err, "explode", &best));
            }
            if !group_by.contains(&e) {
                group_by.push(e);
                self.notices.push(Notice {
                    parameter: "explode".into(),
                    message: format!(
                        "`{}` was added to group_by: exploding splits its parts into groups",
                        f.name
                    ),
                });
            }
        }
        for &g in group_by.iter() {
            let f = &def.fields[g];
            if f.is_multi_value() && !explode.contains(&g) {
                explode.push(g);
                self.notices.push(Notice {
                    parameter: "explode".into(),
                    message: format!(
                        "`{}` holds several values per record; each part was counted in its own group (explode)",
                        f.name
                    ),
                });
            }
        }
        Ok(explode)
    }

    /// Resolves `having` conditions against the summary's result columns.
    pub(super) fn having(
        &mut self,
        conditions: Vec<Condition>,
        result: &SummaryColumns<'_>,
    ) -> Result<Vec<HavingFilter>, RequestError> {
        let mut having = Vec::with_capacity(conditions.len());
        for cond in conditions {
            let canonical = result_column(
                self.def,
                &cond.target,
                &result.columns,
                &result.metric_columns,
            )
            .map_err(|ranked| result.unknown_column("having", &cond.target, ranked))?;
            if canonical != cond.target {
                self.resolved.push(Resolution {
                    parameter: "having".into(),
                    input: cond.target.clone(),
                    canonical: canonical.clone(),
                });
            }
            having.push(HavingFilter {
                column: canonical,
                op: cond.op,
            });
        }
        Ok(having)
    }

    /// Resolves `order_by` keys against the summary's result columns, each column once.
    pub(super) fn order_by(
        &mut self,
        keys: &[String],
        result: &SummaryColumns<'_>,
    ) -> Result<Vec<ColumnSort>, RequestError> {
        let mut order_by = Vec::with_capacity(keys.len());
        for key in keys {
            let (name, descending) = parse_order_key(key);
            let canonical = result_column(self.def, name, &result.columns, &result.metric_columns)
                .map_err(|ranked| result.unknown_column("order_by", name, ranked))?;
            if canonical != name {
                self.resolved.push(Resolution {
                    parameter: "order_by".into(),
                    input: key.clone(),
                    canonical: format!("{}{canonical}", if descending { "-" } else { "" }),
                });
            }
            if !order_by.iter().any(|s: &ColumnSort| s.column == canonical) {
                order_by.push(ColumnSort {
                    column: canonical,
                    descending,
                });
            }
        }
        Ok(order_by)
    }
}

/// The columns of a summary's result, which `having` and `order_by` name.
pub(super) struct SummaryColumns<'a> {
    pub(super) def: &'a DatasetDef,
    /// The metrics as typed (or `count` when none), for the example of an error.
    pub(super) metric_inputs: &'a [String],
    /// Every column of the result: metrics, the columns they exclude nulls on, group keys.
    pub(super) columns: Vec<String>,
    pub(super) metric_columns: Vec<String>,
    pub(super) group_names: Vec<String>,
}

impl<'a> SummaryColumns<'a> {
    /// Lists the result's columns from the resolved metrics and groups.
    pub(super) fn new(
        def: &'a DatasetDef,
        metric_inputs: &'a [String],
        metrics: &[Metric],
        group_by: &[FieldId],
        compare: Option<&Compare>,
        rank: bool,
    ) -> Self {
        let mut columns: Vec<String> = Vec::new();
        let mut metric_columns: Vec<String> = Vec::new();
        let mut push = |columns: &mut Vec<String>, name: String, main: bool| {
            let names = match compare {
                Some(c) => c.columns(&name, main),
                None => vec![name],
            };
            for n in names {
                if !columns.contains(&n) {
                    if main {
                        metric_columns.push(n.clone());
                    }
                    columns.push(n);
                }
            }
        };
        for m in metrics {
            push(&mut columns, m.column(def), true);
            if let Some(c) = m.null_excluded_column(def) {
                push(&mut columns, c, false);
            }
            if compare.is_none()
                && let Some(c) = m.period_column(def)
            {
                push(&mut columns, c, false);
            }
        }
        if rank {
            for r in Compare::rank_columns(compare) {
                metric_columns.push(r.clone());
                columns.push(r);
            }
        }
        // Two periods side by side are columns, not a key.
        let keys: Vec<FieldId> = group_by
            .iter()
            .copied()
            .filter(|g| !matches!(compare, Some(Compare::Periods { field, .. }) if field == g))
            .collect();
        columns.extend(keys.iter().map(|g| def.fields[*g].name.clone()));
        let group_names: Vec<String> = keys.iter().map(|g| def.fields[*g].name.clone()).collect();
        SummaryColumns {
            def,
            metric_inputs,
            columns,
            metric_columns,
            group_names,
        }
    }

    /// The error for a `having` or `order_by` name that is no column of the result.
    pub(super) fn unknown_column(
        &self,
        parameter: &str,
        target: &str,
        ranked: Vec<&str>,
    ) -> RequestError {
        let def = self.def;
        let metric_columns = &self.metric_columns;
        let group_names = &self.group_names;
        let metric_inputs = self.metric_inputs;
        // A field that several metrics asked for carry (`sum:F` and `avg:F`): say so.
        let owners: Vec<&String> = metric_columns
            .iter()
            .filter(|c| {
                c.split_once(':')
                    .is_some_and(|(_, f)| normalize(f) == normalize(target))
            })
            .collect();
        let ranked: Vec<&str> = owners
            .iter()
            .map(|c| c.as_str())
            .chain(
                ranked
                    .into_iter()
                    .filter(|c| !owners.iter().any(|o| o == c)),
            )
            .collect();
        let candidates = ranked
            .iter()
            .take(MAX_CANDIDATES)
            .map(|c| Candidate::new(*c))
            .collect();
        let message = if owners.len() > 1 {
            format!(
                "`{parameter}` names `{target}`, which fits several metrics of this summary ({}); name one with its prefix",
                owners
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!("`{parameter}` names `{target}`, which is not a column of this summary")
        };
        let first = metric_columns
            .first()
            .cloned()
            .unwrap_or_else(|| "count".into());
        let example = if parameter == "having" {
            json!({ "dataset_id": def.id, "group_by": group_names, "metrics": metric_inputs, "having": { first: { "$gte": 10 } } })
        } else {
            json!({ "dataset_id": def.id, "group_by": group_names, "metrics": metric_inputs, "order_by": [format!("-{first}")], "limit": 5 })
        };
        RequestError::new(ErrorCode::UnknownColumn, message)
        .at(format!("{parameter}.{target}"))
        .candidates(candidates, self.columns.len())
        .hint(format!("{parameter} names a column of the result: a metric you asked for (e.g. `count`, or a metric's field without its `avg:`/`sum:` prefix when only one metric has it) or a group_by field"))
        .example("summarize_records", example)
    }
}

/// A column of a summary's result named in `having` or `order_by`: exact or NFKC; a metric
/// written as `kind:F` (resolved as in `metrics`, then required to be asked for); a metric's
/// field without its prefix when exactly one metric asked for has it (`オンライン率` for
/// `avg:オンライン率`); else a close match. `Err`: the columns ranked by closeness.
pub(super) fn result_column<'c>(
    def: &DatasetDef,
    target: &str,
    columns: &'c [String],
    metric_columns: &[String],
) -> Result<String, Vec<&'c str>> {
    let ranked = || names::rank(target, columns.iter().map(String::as_str));
    let found = names::resolve(target, columns.iter().map(String::as_str));
    if let Ok(res) = &found
        && res.how != Match::Fuzzy
    {
        return Ok(res.canonical.to_string());
    }
    if target.contains([':', '：']) {
        // `kind:F` goes through metric resolution only, never a fuzzy column match.
        let mut probe = Resolver {
            def,
            tool: "summarize_records",
            resolved: Vec::new(),
            notices: Vec::new(),
            chosen: Vec::new(),
            latest: None,
        };
        return probe
            .metric(target)
            .ok()
            .map(|m| m.column(def))
            .filter(|c| columns.contains(c))
            .ok_or_else(ranked);
    }
    // The field part of each metric column asked for, once (`avg:F` → `F`).
    let fields: Vec<&str> = metric_columns
        .iter()
        .filter_map(|c| c.split_once(':').map(|(_, f)| f))
        .collect();
    if let Ok(res) = names::resolve(target, fields.iter().copied()) {
        let mut owners = metric_columns
            .iter()
            .filter(|c| c.split_once(':').is_some_and(|(_, f)| f == res.canonical));
        if let (Some(one), None) = (owners.next(), owners.next()) {
            return Ok(one.clone());
        }
    }
    found.map(|res| res.canonical.to_string()).map_err(|r| {
        let _ = r;
        ranked()
    })
}
