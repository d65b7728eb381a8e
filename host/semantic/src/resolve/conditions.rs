//! The conditions of a call resolved: each field's operand read in the field's type, a
//! time field's periods, codes found by one rule in every form a value comes in, and
//! provisions read by their locators; the `as_of` date and `order_by` keys.

use super::plan::{Filter, Resolution};
use crate::definition::{Codelist, DatasetDef, Field, FieldId, Grain, Role};
use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names::{self, normalize};
use crate::request::{Condition, Notice, Op, Scalar};
use serde_json::json;

use super::resolver::{Period, Resolver};

impl Resolver<'_> {
    pub(super) fn filters(
        &mut self,
        conditions: Vec<Condition>,
    ) -> Result<Vec<Filter>, RequestError> {
        let mut out = Vec::with_capacity(conditions.len());
        for cond in conditions {
            let field = self.field(&cond.target, &format!("where.{}", cond.target))?;
            let cond = match self.period(field, cond)? {
                Period::Latest(previous) => {
                    self.latest = Some((field, previous));
                    continue;
                }
                Period::Range(from, to) => {
                    out.push(Filter { field, op: from });
                    out.push(Filter { field, op: to });
                    continue;
                }
                Period::Other(cond) => cond,
            };
            let op = if cond.plain {
                self.plain_code(field, cond.op)
            } else {
                cond.op
            };
            let op = self.check_operand(field, op)?;
            // Two conditions of one kind on one field (a name written two ways) would be one
            // condition too many to write back as the call resolved (`provenance.query`), and
            // say something the caller may not mean: refused, with what to do.
            // Several `$ne` of one field are `$nin` (written back as such), never a conflict.
            if !matches!(op, Op::Ne(_))
                && out
                    .iter()
                    .any(|f: &Filter| f.field == field && f.op.name() == op.name())
            {
                return Err(RequestError::invalid(
                    format!("where.{}", cond.target),
                    format!(
                        "`where` names the field `{}` twice with `{}` (as `{}` and another spelling)",
                        self.def.fields[field].name,
                        op.name(),
                        cond.target
                    ),
                )
                .hint("write the field once, with every value of the condition in one list (`$in`) or one operator each"));
            }
            out.push(Filter { field, op });
        }
        Ok(out)
    }

    /// A condition on the time field written as a period: `"latest"` (or `最新`), `"previous"`
    /// (the period before the latest), a range `"2010..2020"` (also `2010〜2020`,
    /// `2010年から2020年まで`, a year grain also `2010-2020`), one period as people write it
    /// (`"2020年度"`, `"FY2020"`, `"令和2年度"`, `"平成元年"`, `"2020年4月"`: [`crate::period`]).
    /// Each reading is disclosed in `resolved_fields`; a form naming another kind of year than
    /// the field holds (a fiscal year on a calendar-year field) is said in `notices`.
    pub(super) fn period(
        &mut self,
        field_id: FieldId,
        cond: Condition,
    ) -> Result<Period, RequestError> {
        let field = &self.def.fields[field_id];
        let Some(grain) = field.grain.filter(|_| field.role == Role::Time) else {
            return Ok(Period::Other(cond));
        };
        let text = match &cond.op {
            Op::Contains(t) if cond.plain => t.clone(),
            Op::Eq(Scalar::Str(t)) => t.clone(),
            _ => return Ok(Period::Other(cond)),
        };
        let parameter = format!("where.{}", field.name);
        let folded: String = crate::names::nfkc_value(&text).to_lowercase();
        let relative = match folded.as_str() {
            "latest" | "最新" | "最新年" | "最新年度" | "last" | "直近" => Some(false),
            "previous" | "prior" | "前年" | "前年度" | "前期" => Some(true),
            _ => None,
        };
        if let Some(previous) = relative {
            self.resolved.push(Resolution {
                parameter,
                input: text,
                canonical: if previous { "previous" } else { "latest" }.into(),
            });
            return Ok(Period::Latest(previous));
        }
        let name = field.name.clone();
        let integer = field.data_type == crate::definition::DataType::Integer;
        let mut other_kind = false;
        let mut value = |t: &str| -> Option<Scalar> {
            let t = t.trim();
            let read = crate::period::read(t, grain);
            if let Some(r) = &read {
                other_kind |= crate::period::other_kind(r.kind, grain);
            }
            if grain.is_year() {
                return read.and_then(|r| r.canonical.parse::<i64>().ok().map(Scalar::Int));
            }
            // A month or a day: written with 年/月/日 or an era, read as `2020-04`; as digits
            // and separators, kept as written (the data's own form).
            let t = match read {
                Some(r) if !t.is_ascii() => r.canonical,
                _ => t.to_string(),
            };
            if integer {
                t.replace('-', "").parse::<i64>().ok().map(Scalar::Int)
            } else {
                (!t.is_empty()).then_some(Scalar::Str(t))
            }
        };
        let separators: &[&str] = if grain.is_year() {
            &["..", "～", "~", "〜", "から", "–", "—", "-"]
        } else {
            &["..", "～", "~", "〜", "から"]
        };
        let ranged = folded.trim_end_matches("まで").trim();
        for sep in separators {
            if let Some((a, b)) = ranged.split_once(sep)
                && let (Some(from), Some(to)) = (value(a), value(b))
            {
                let canonical = format!("{}..{}", from.text(), to.text());
                if canonical != text {
                    self.resolved.push(Resolution {
                        parameter: parameter.clone(),
                        input: text.clone(),
                        canonical,
                    });
                }
                self.say_other_kind(other_kind, &parameter, &text, &name, grain);
                return Ok(Period::Range(Op::Gte(from), Op::Lte(to)));
            }
        }
        if let Some(one) = value(&folded) {
            if one.text() != text {
                self.resolved.push(Resolution {
                    parameter: parameter.clone(),
                    input: text.clone(),
                    canonical: one.text(),
                });
            }
            self.say_other_kind(other_kind, &parameter, &text, &name, grain);
            return Ok(Period::Other(Condition {
                target: cond.target,
                op: Op::Eq(one),
                plain: false,
            }));
        }
        Ok(Period::Other(cond))
    }

    /// Says that a period was written as another kind of year than the field holds.
    pub(super) fn say_other_kind(
        &mut self,
        other: bool,
        parameter: &str,
        text: &str,
        name: &str,
        grain: Grain,
    ) {
        if !other {
            return;
        }
        let (written, held) = match grain {
            Grain::FiscalYear => (
                "a calendar year",
                "fiscal years (年度, named by the year they start in)",
            ),
            _ => ("a fiscal year", "calendar years"),
        };
        self.notices.push(Notice {
            parameter: parameter.to_string(),
            message: format!(
                "\"{text}\" names {written}, and `{name}` holds {held}: read as the period of the same number"
            ),
        });
    }

    /// Types and codelists: ordering comparisons on numeric fields need numbers; values
    /// compared exactly on a field with a static codelist must be codes.
    pub(super) fn check_operand(&mut self, field_id: FieldId, op: Op) -> Result<Op, RequestError> {
        let field = &self.def.fields[field_id];
        let parameter = format!("where.{}", field.name);
        if field.data_type.is_numeric() && (op.is_ordering() || op.is_exact()) {
            // A number sent as text (`"1000000"`, `"１,０００"`) has one reading: it is read as
            // the number and the reading disclosed. Text that is no number is refused: a
            // substring search on the digits is written as a plain string.
            let op_name = op.name();
            let mut read = |value: Scalar| -> Result<Scalar, RequestError> {
                match value {
                    Scalar::Int(_) | Scalar::Float(_) => Ok(value),
                    Scalar::Str(t) => match loose_number(&t) {
                        Some(n) => {
                            self.resolved.push(Resolution {
                                parameter: format!("{parameter}.{op_name} value"),
                                input: t,
                                canonical: n.text(),
                            });
                            Ok(n)
                        }
                        None => Err(not_a_number(
                            self,
                            field,
                            &parameter,
                            op_name,
                            &format!("the string \"{t}\""),
                        )),
                    },
                    other => Err(not_a_number(
                        self,
                        field,
                        &parameter,
                        op_name,
                        &format!("`{}`", other.text()),
                    )),
                }
            };
            return Ok(match op {
                Op::Gt(v) => Op::Gt(read(v)?),
                Op::Gte(v) => Op::Gte(read(v)?),
                Op::Lt(v) => Op::Lt(read(v)?),
                Op::Lte(v) => Op::Lte(read(v)?),
                Op::Eq(v) => Op::Eq(read(v)?),
                Op::Ne(v) => Op::Ne(read(v)?),
                Op::In(vs) => Op::In(vs.into_iter().map(&mut read).collect::<Result<_, _>>()?),
                Op::Nin(vs) => Op::Nin(vs.into_iter().map(&mut read).collect::<Result<_, _>>()?),
                other => other,
            });
        }
        if field.locator == Some(crate::definition::LocatorKind::Law) {
            // A provision is looked up, never searched as a substring: `"第5条"` names the
            // article (and what is inside it), not every locator containing those characters.
            let op = match op {
                Op::Contains(t) => Op::Eq(Scalar::Str(t)),
                Op::NotContains(t) => Op::Ne(Scalar::Str(t)),
                other => other,
            };
            if op.is_exact() {
                return self.law_locators(field_id, op, &parameter);
            }
            return Ok(op);
        }
        if !op.is_exact() {
            return Ok(op);
        }
        let Some(Codelist::Static(_)) = &field.codelist else {
            return Ok(op);
        };
        Ok(match op {
            Op::In(values) => Op::In(
                values
                    .into_iter()
                    .map(|v| self.code(field_id, v, &parameter))
                    .collect::<Result<_, _>>()?,
            ),
            Op::Eq(v) => Op::Eq(self.code(field_id, v, &parameter)?),
            Op::Ne(v) => Op::Ne(self.code(field_id, v, &parameter)?),
            Op::Nin(values) => Op::Nin(
                values
                    .into_iter()
                    .map(|v| self.code(field_id, v, &parameter))
                    .collect::<Result<_, _>>()?,
            ),
            other => other,
        })
    }

    /// The provisions a list of law references names, each once, at most
    /// [`crate::request::MAX_VALUES`] in all (a reference may name several: `第1条から第3条まで`),
    /// so the condition planned from them stays one bounded set.
    pub(super) fn provisions_of(
        values: &[Scalar],
        read: &mut impl FnMut(&Scalar) -> Result<Vec<Scalar>, RequestError>,
        parameter: &str,
        op: &str,
    ) -> Result<Vec<Scalar>, RequestError> {
        let mut all: Vec<Scalar> = Vec::new();
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        for v in values {
            for r in read(v)? {
                if seen.insert(r.text()) {
                    all.push(r);
                }
            }
            if all.len() > crate::request::MAX_VALUES {
                return Err(RequestError::invalid(
                    format!("{parameter}.{op}"),
                    format!(
                        "the references listed name more than {} provisions; `{op}` accepts at most {}",
                        crate::request::MAX_VALUES,
                        crate::request::MAX_VALUES
                    ),
                )
                .hint("name fewer provisions, or whole articles (an article holds its paragraphs and items)"));
            }
        }
        Ok(all)
    }

    /// Values of a `locator: law` field read as law references (`第5の2条第1項` →
    /// `第五条の二第一項`, lists → several provisions); each rewrite is disclosed.
    pub(super) fn law_locators(
        &mut self,
        field_id: FieldId,
        op: Op,
        parameter: &str,
    ) -> Result<Op, RequestError> {
        let field = &self.def.fields[field_id];
        let mut read = |value: &Scalar| -> Result<Vec<Scalar>, RequestError> {
            let text = value.text();
            let refs = tally_plugin_api::locator::normalize_references(&text);
            if refs.is_empty() {
                return Err(RequestError::invalid(
                    format!("{parameter} value"),
                    format!(
                        "`{text}` names no article of a law, so it cannot be looked up in `{}`",
                        field.name
                    ),
                )
                .hint("write the provision with its article, e.g. 第5条第1項, 第五条の二 or 附則第3条; a paragraph alone (第2項) does not say which article")
                .example(self.tool, json!({ "dataset_id": self.def.id, "where": { field.name.clone(): "第5条第1項" } })));
            }
            if refs.len() != 1 || refs[0] != text {
                self.resolved.push(Resolution {
                    parameter: format!("{parameter} value"),
                    input: text,
                    canonical: refs.join(", "),
                });
            }
            Ok(refs.into_iter().map(Scalar::Str).collect())
        };
        Ok(match op {
            Op::Eq(v) => {
                let mut refs = read(&v)?;
                if refs.len() == 1 {
                    Op::Eq(refs.remove(0))
                } else {
                    Op::In(refs)
                }
            }
            Op::In(values) => Op::In(Self::provisions_of(&values, &mut read, parameter, "$in")?),
            Op::Nin(values) => Op::Nin(Self::provisions_of(&values, &mut read, parameter, "$nin")?),
            Op::Ne(v) => {
                let refs = read(&v)?;
                match <[Scalar; 1]>::try_from(refs) {
                    Ok([one]) => Op::Ne(one),
                    Err(refs) => {
                        return Err(RequestError::invalid(
                            format!("{parameter}.$ne"),
                            format!(
                                "`{}` names {} provisions; `$ne` takes one",
                                v.text(),
                                refs.len()
                            ),
                        )
                        .hint("exclude one provision at a time"));
                    }
                }
            }
            other => other,
        })
    }

    /// A plain string on a field with a static codelist that is one code (or one code's
    /// label: `実施済` for `1 実施済`) means that code, not every code containing it
    /// (`5 一部実施済` too); the reading is disclosed. Anything else stays a substring.
    pub(super) fn plain_code(&mut self, field_id: FieldId, op: Op) -> Op {
        let Op::Contains(text) = &op else {
            return op;
        };
        let field = &self.def.fields[field_id];
        if !matches!(field.codelist, Some(Codelist::Static(_))) {
            return op;
        }
        let codes = field.static_codes().unwrap_or(&[]);
        match find_code(codes, text) {
            Some(code) => {
                // Disclosed even when typed exactly: the plain string was read as `[code]`,
                // not as the substring search it means elsewhere.
                self.resolved.push(Resolution {
                    parameter: format!("where.{} value", field.name),
                    input: text.clone(),
                    canonical: code.to_string(),
                });
                Op::Eq(Scalar::Str(code.to_string()))
            }
            None => op,
        }
    }

    /// A value of a static codelist: exact → NFKC → the code with or without its prefix
    /// (`実施済` ↔ `1 実施済`, or the bare number `1`); never a fuzzy guess.
    pub(super) fn code(
        &mut self,
        field_id: FieldId,
        value: Scalar,
        parameter: &str,
    ) -> Result<Scalar, RequestError> {
        let field: &Field = &self.def.fields[field_id];
        let codes = field.static_codes().unwrap_or(&[]);
        let text = value.text();
        if codes.iter().any(|c| c.value == text) {
            return Ok(Scalar::Str(text));
        }
        let fits = || names::ambiguous(&text, codes.iter().map(|c| c.value.as_str()));
        if let Some(choice) = self
            .chosen
            .iter()
            .find(|c| c.parameter == parameter && c.input == text)
            && fits().contains(&choice.name.as_str())
        {
            let code = choice.name.clone();
            self.resolved.push(Resolution {
                parameter: parameter.to_string(),
                input: text,
                canonical: code.clone(),
            });
            return Ok(Scalar::Str(code));
        }
        let wanted = normalize(&text);
        match find_code(codes, &text) {
            Some(code) => {
                self.resolved.push(Resolution {
                    parameter: format!("{parameter} value"),
                    input: text,
                    canonical: code.to_string(),
                });
                Ok(Scalar::Str(code.to_string()))
            }
            None => {
                // Closest first: the input compared with each code and with its label.
                let mut ranked: Vec<(f64, usize)> = codes
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let by_value = names::similarity(&wanted, &normalize(&c.value));
                        let by_label = c
                            .label()
                            .map_or(0.0, |l| names::similarity(&wanted, &normalize(l)));
                        (by_value.max(by_label), i)
                    })
                    .collect();
                ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                let candidates: Vec<Candidate> = ranked
                    .iter()
                    .map(|(_, i)| {
                        Candidate::described(
                            codes[*i].value.clone(),
                            codes[*i].description.as_deref(),
                        )
                    })
                    .collect();
                let first = candidates
                    .first()
                    .map(|c| c.name.clone())
                    .unwrap_or_default();
                let fits = fits();
                let message = if fits.len() > 1 {
                    format!(
                        "`{text}` is ambiguous among the codes of `{}`: it fits {} ({}); name one exactly",
                        field.name,
                        fits.len(),
                        fits.iter()
                            .map(|c| format!("`{c}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!("`{text}` is not a code of `{}`", field.name)
                };
                let mut err = RequestError::new(ErrorCode::InvalidCode, message)
                    .at(parameter.to_string())
                    .candidates(candidates, codes.len())
                    .hint("exact comparisons (an array, $eq, $in, $ne) take codes as listed; for a substring search pass a plain string instead")
                    .example(
                        self.tool,
                        json!({ "dataset_id": self.def.id, "where": { field.name.clone(): [first] } }),
                    );
                if fits.len() > 1 {
                    err.ambiguous = Some(Box::new(crate::error::Ambiguous {
                        what: "code",
                        parameter: parameter.to_string(),
                        input: text.clone(),
                        choices: fits
                            .iter()
                            .filter_map(|v| codes.iter().find(|c| c.value == *v))
                            .map(|c| {
                                Candidate::described(c.value.clone(), c.description.as_deref())
                            })
                            .collect(),
                    }));
                }
                Err(err)
            }
        }
    }
}

/// The one code of a static codelist that `text` names, by one rule for every form a value
/// comes in (a plain string, an array, `$eq`, `$in`, `$ne`): the code as listed → the same
/// under NFKC → its label alone (`実施済` for `1 実施済`) → its number alone (`2` for
/// `2 独立行政法人等`) → the code written with a prefix it does not have (`1 弁護士` for
/// `弁護士`). A text that fits several codes names none (never a guess).
pub fn find_code<'c>(codes: &'c [crate::definition::Code], text: &str) -> Option<&'c str> {
    if let Some(c) = codes.iter().find(|c| c.value == text) {
        return Some(c.value.as_str());
    }
    let wanted = normalize(text);
    let by = |f: &dyn Fn(&crate::definition::Code) -> bool| -> Option<&'c str> {
        let mut hits = codes.iter().filter(|c| f(c));
        match (hits.next(), hits.next()) {
            (Some(one), None) => Some(one.value.as_str()),
            _ => None,
        }
    };
    by(&|c| normalize(&c.value) == wanted)
        .or_else(|| by(&|c| c.label().is_some_and(|l| normalize(l) == wanted)))
        .or_else(|| {
            by(&|c| {
                c.label().is_some()
                    && c.value
                        .split_once([' ', '\u{3000}'])
                        .is_some_and(|(p, _)| normalize(p) == wanted)
            })
        })
        .or_else(|| {
            let (_, rest) = text.split_once([' ', '\u{3000}'])?;
            by(&|c| c.label().is_none() && normalize(&c.value) == normalize(rest))
        })
}

/// A number written as text: NFKC (full-width digits), without thousands separators or
/// surrounding space; `None` unless the whole text is one finite number.
pub(super) fn loose_number(text: &str) -> Option<Scalar> {
    let t = names::nfkc_value(text).replace([',', '_'], "");
    if t.is_empty() {
        return None;
    }
    if let Ok(i) = t.parse::<i64>() {
        return Some(Scalar::Int(i));
    }
    t.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && t.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)))
        .map(Scalar::Float)
}

pub(super) fn not_a_number(
    r: &Resolver<'_>,
    field: &Field,
    parameter: &str,
    op: &str,
    found: &str,
) -> RequestError {
    RequestError::invalid(
        format!("{parameter}.{op}"),
        format!(
            "`{}` is a number field ({}); `{op}` needs a number, found {found}",
            field.name,
            field.data_type.as_str()
        ),
    )
    .hint("send a number (quotes are fine: \"1000\"); to search the digits as text use a plain string, e.g. {\"F\": \"100\"}")
    .example(
        r.tool,
        json!({ "dataset_id": r.def.id, "where": { field.name.clone(): { "$gte": 100 } } }),
    )
}

/// The `as_of` date of a call: `YYYY-MM-DD` (full-width digits read too), on a dataset that
/// declares `revisions`, whose revision fields the call does not also filter on.
pub fn resolve_as_of(
    def: &DatasetDef,
    given: Option<&str>,
    filters: &[Filter],
) -> Result<Option<String>, RequestError> {
    let Some(given) = given.map(str::trim).filter(|g| !g.is_empty()) else {
        return Ok(None);
    };
    let Some(revisions) = &def.revisions else {
        return Err(RequestError::invalid(
            "as_of",
            format!(
                "dataset `{}` has no revisions: as_of reads the revision in force on a date, for datasets that declare `revisions` (law texts)",
                def.id
            ),
        )
        .hint("leave out as_of"));
    };
    let date: String = names::nfkc_value(given);
    let valid = date.len() == 10
        && date.as_bytes()[4] == b'-'
        && date.as_bytes()[7] == b'-'
        && date
            .char_indices()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && {
            let month: u32 = date[5..7].parse().unwrap_or(0);
            let day: u32 = date[8..10].parse().unwrap_or(0);
            (1..=12).contains(&month) && (1..=31).contains(&day)
        };
    if !valid {
        return Err(RequestError::invalid(
            "as_of",
            format!("as_of `{given}` is not a date written YYYY-MM-DD"),
        )
        .hint("write the date as YYYY-MM-DD, e.g. \"2020-04-01\""));
    }
    if let Some(f) = filters
        .iter()
        .find(|f| f.field == revisions.effective || revisions.id == Some(f.field))
    {
        return Err(RequestError::invalid(
            "as_of",
            format!(
                "as_of picks the revision in force on {date}, and `where` also names the revision by `{}`",
                def.fields[f.field].name
            ),
        )
        .hint(format!(
            "leave out as_of to read the revision `where` names, or leave the condition on `{}` out",
            def.fields[f.field].name
        )));
    }
    Ok(Some(date))
}

/// `F`, `-F`, `+F`, `F desc`, `F asc`.
pub(super) fn parse_order_key(key: &str) -> (&str, bool) {
    let key = key.trim();
    if let Some(rest) = key.strip_prefix('-') {
        return (rest.trim(), true);
    }
    if let Some(rest) = key.strip_prefix('+') {
        return (rest.trim(), false);
    }
    let lower = key.to_ascii_lowercase();
    if lower.ends_with(" desc") {
        return (key[..key.len() - 5].trim(), true);
    }
    if lower.ends_with(" asc") {
        return (key[..key.len() - 4].trim(), false);
    }
    (key, false)
}
