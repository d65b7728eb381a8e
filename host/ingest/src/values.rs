//! Reading one cell as the type its column has: strict for inference, lenient (but never
//! lossy) for conversion.

use crate::input::Cell;

/// Candidate null markers: values publishers write for "no value". They are listed as
/// questions and never converted unless the person says so (`--null-marker`,
/// `source.null_markers`).
pub const NULL_MARKER_CANDIDATES: &[&str] = &[
    "-",
    "―",
    "－",
    "—",
    "‐",
    "不明",
    "該当なし",
    "N/A",
    "n/a",
    "NA",
    "#N/A",
];

/// The kinds a column can be written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Int,
    Float,
    Bool,
    /// ISO 8601 dates, kept as text (`YYYY-MM-DD`).
    Date,
}

impl Kind {
    pub fn data_type(self) -> &'static str {
        match self {
            Kind::Text => "string",
            Kind::Int => "integer",
            Kind::Float => "number",
            Kind::Bool => "boolean",
            Kind::Date => "date",
        }
    }

    pub fn from_definition(t: tally_semantic::definition::DataType) -> Kind {
        use tally_semantic::definition::DataType;
        match t {
            DataType::String => Kind::Text,
            DataType::Integer => Kind::Int,
            DataType::Number => Kind::Float,
            DataType::Boolean => Kind::Bool,
            DataType::Date => Kind::Date,
        }
    }
}

/// A value as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// How a text cell looks, for inference (strict: a value with a leading zero is a code, not
/// a number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Int,
    /// An integer written with thousands separators or full-width digits (`1,234`, `１２３`).
    LooseInt,
    Float,
    Bool,
    Date,
    /// Digits with a leading zero (`007`): a code.
    LeadingZero,
    Text,
}

pub fn shape(cell: &Cell) -> Shape {
    match cell {
        Cell::Empty => Shape::Text,
        Cell::Int(_) => Shape::Int,
        Cell::Float(f) if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 => Shape::Int,
        Cell::Float(f) if f.is_finite() => Shape::Float,
        Cell::Float(_) => Shape::Text,
        Cell::Bool(_) => Shape::Bool,
        Cell::Date(_) => Shape::Date,
        Cell::Error(_) => Shape::Text,
        Cell::Text(s) => text_shape(s),
    }
}

fn text_shape(s: &str) -> Shape {
    let t = s.trim();
    if t.is_empty() {
        return Shape::Text;
    }
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if digits.len() > 1 && digits.starts_with('0') {
            return Shape::LeadingZero;
        }
        return if t.parse::<i64>().is_ok() {
            Shape::Int
        } else {
            Shape::Text
        };
    }
    if strict_float(t).is_some() {
        return Shape::Float;
    }
    if t.eq_ignore_ascii_case("true") || t.eq_ignore_ascii_case("false") {
        return Shape::Bool;
    }
    if iso_date(t).is_some() && !t.contains('/') {
        return Shape::Date;
    }
    if loose_int(t).is_some() {
        return Shape::LooseInt;
    }
    Shape::Text
}

/// A decimal number as people write it (no `inf`, `nan`, hex, or leading `.`-less oddities).
fn strict_float(t: &str) -> Option<f64> {
    let body = t.strip_prefix(['-', '+']).unwrap_or(t);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let ok_digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !ok_digits(int) || !ok_digits(frac) {
        return None;
    }
    if int.len() > 1 && int.starts_with('0') {
        return None;
    }
    if let Some(e) = exponent {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        if e.is_empty() || !ok_digits(e) {
            return None;
        }
    }
    t.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// `1,234,567` or full-width `１２３４`: an integer however it is grouped or written, as long
/// as the reading is unambiguous.
fn loose_int(t: &str) -> Option<i64> {
    let folded: String = t
        .chars()
        .map(|c| match c {
            '０'..='９' => char::from_u32(c as u32 - '０' as u32 + '0' as u32).unwrap_or(c),
            '，' => ',',
            '－' | '−' => '-',
            '＋' => '+',
            _ => c,
        })
        .collect();
    let body = folded.strip_prefix(['-', '+']).unwrap_or(&folded);
    if body.is_empty() {
        return None;
    }
    let plain: String = if body.contains(',') {
        let groups: Vec<&str> = body.split(',').collect();
        let first_ok = (1..=3).contains(&groups[0].len());
        let rest_ok = groups[1..].iter().all(|g| g.len() == 3);
        if !first_ok || !rest_ok || groups[0].starts_with('0') {
            return None;
        }
        groups.concat()
    } else {
        if body.len() > 1 && body.starts_with('0') {
            return None;
        }
        body.to_string()
    };
    if !plain.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: i64 = plain.parse().ok()?;
    Some(if folded.starts_with('-') { -v } else { v })
}

/// `2024-04-01` or `2024/4/1` as `2024-04-01`.
pub fn iso_date(t: &str) -> Option<String> {
    let parts: Vec<&str> = t.split(['-', '/']).collect();
    if parts.len() != 3 || parts[0].len() != 4 {
        return None;
    }
    let y: i32 = parts[0].parse().ok()?;
    let m: u32 = parts[1].parse().ok()?;
    let d: u32 = parts[2].parse().ok()?;
    if parts[1].len() > 2 || parts[2].len() > 2 {
        return None;
    }
    chrono::NaiveDate::from_ymd_opt(y, m, d).map(|date| date.format("%Y-%m-%d").to_string())
}

/// A cell that does not read as its column's type (the caller reports where).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotOfType;

/// The cell as `kind`; `Err` when it does not read as one.
pub fn convert(cell: &Cell, kind: Kind) -> Result<Value, NotOfType> {
    if cell.is_empty() {
        return Ok(Value::Null);
    }
    match kind {
        Kind::Text => Ok(cell
            .as_text()
            .map_or(Value::Null, |t| Value::Text(t.into_owned()))),
        Kind::Int => match cell {
            Cell::Int(i) => Ok(Value::Int(*i)),
            Cell::Float(f) if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 => {
                Ok(Value::Int(*f as i64))
            }
            Cell::Text(s) => {
                let t = s.trim();
                t.parse::<i64>()
                    .ok()
                    .or_else(|| loose_int(t))
                    .map(Value::Int)
                    .ok_or(NotOfType)
            }
            _ => Err(NotOfType),
        },
        Kind::Float => match cell {
            Cell::Int(i) => Ok(Value::Float(*i as f64)),
            Cell::Float(f) if f.is_finite() => Ok(Value::Float(*f)),
            Cell::Text(s) => {
                let t = s.trim();
                strict_float(t)
                    .or_else(|| t.parse::<f64>().ok().filter(|f| f.is_finite()))
                    .or_else(|| loose_int(t).map(|i| i as f64))
                    .map(Value::Float)
                    .ok_or(NotOfType)
            }
            _ => Err(NotOfType),
        },
        Kind::Bool => match cell {
            Cell::Bool(b) => Ok(Value::Bool(*b)),
            Cell::Int(0) => Ok(Value::Bool(false)),
            Cell::Int(1) => Ok(Value::Bool(true)),
            Cell::Float(f) if *f == 0.0 => Ok(Value::Bool(false)),
            Cell::Float(f) if *f == 1.0 => Ok(Value::Bool(true)),
            Cell::Text(s) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(Value::Bool(true)),
                "false" | "0" => Ok(Value::Bool(false)),
                _ => Err(NotOfType),
            },
            _ => Err(NotOfType),
        },
        Kind::Date => match cell {
            Cell::Date(s) => Ok(Value::Text(s.clone())),
            Cell::Text(s) => iso_date(s.trim()).map(Value::Text).ok_or(NotOfType),
            _ => Err(NotOfType),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Cell {
        Cell::Text(s.to_string())
    }

    #[test]
    fn shapes_of_text() {
        assert_eq!(shape(&text("123")), Shape::Int);
        assert_eq!(shape(&text("-5")), Shape::Int);
        assert_eq!(shape(&text("007")), Shape::LeadingZero);
        assert_eq!(shape(&text("1.5")), Shape::Float);
        assert_eq!(shape(&text("1e3")), Shape::Float);
        assert_eq!(shape(&text("inf")), Shape::Text);
        assert_eq!(shape(&text("1,234")), Shape::LooseInt);
        assert_eq!(shape(&text("１２３")), Shape::LooseInt);
        assert_eq!(shape(&text("1,23")), Shape::Text);
        assert_eq!(shape(&text("2024-04-01")), Shape::Date);
        assert_eq!(shape(&text("TRUE")), Shape::Bool);
        assert_eq!(shape(&text("1 実施済")), Shape::Text);
        assert_eq!(shape(&Cell::Float(3.0)), Shape::Int);
    }

    #[test]
    fn conversions_never_lose_a_value() {
        assert_eq!(convert(&text(" 1,234 "), Kind::Int), Ok(Value::Int(1234)));
        assert_eq!(convert(&text("1.5"), Kind::Int), Err(NotOfType));
        assert_eq!(convert(&Cell::Float(2.5), Kind::Int), Err(NotOfType));
        assert_eq!(convert(&text("約100"), Kind::Int), Err(NotOfType));
        assert_eq!(
            convert(&Cell::Int(7), Kind::Text),
            Ok(Value::Text("7".into()))
        );
        assert_eq!(
            convert(&Cell::Float(0.1), Kind::Text),
            Ok(Value::Text("0.1".into()))
        );
        assert_eq!(
            convert(&text("2024/4/1"), Kind::Date),
            Ok(Value::Text("2024-04-01".into()))
        );
        assert_eq!(convert(&text("2024-02-30"), Kind::Date), Err(NotOfType));
    }
}
