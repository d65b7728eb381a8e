//! The dataset's semantic definition: column names, roles, codelists and
//! descriptions, emitted as `dataset.yaml`.
//!
//! Names, roles, codes, multi-value flags and measure types mirror the
//! published definition (they are facts about the survey's layout);
//! descriptions and notes are written for this synthetic dataset.

use std::fmt::Write as _;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Id,
    Dim,
    Attr,
    Measure,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Id => "id",
            Role::Dim => "dim",
            Role::Attr => "attr",
            Role::Measure => "measure",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Codelist {
    None,
    Auto,
    AutoSplit,
    /// `(code, description)`; the code is what the data stores.
    Static(&'static [(&'static str, Option<&'static str>)]),
}

#[derive(Clone, Copy, Debug)]
pub struct FieldDef {
    pub name: &'static str,
    pub role: Role,
    pub desc: &'static str,
    pub codelist: Codelist,
    pub multi_value: bool,
    pub notes: &'static [&'static str],
}

impl FieldDef {
    pub fn codes(&self) -> Vec<&'static str> {
        match self.codelist {
            Codelist::Static(entries) => entries.iter().map(|(code, _)| *code).collect(),
            _ => Vec::new(),
        }
    }
}

pub const TITLE: &str = "行政手続等の棚卸調査結果（合成データ）";
pub const PUBLISHER: &str = "Tally (synthetic, modelled on デジタル庁 survey)";
pub const SOURCE_URL: &str = "https://www.digital.go.jp/resources/procedures-survey-results";
pub const DESCRIPTION: &str = "デジタル庁「行政手続等の棚卸調査結果」と同じ列構成の合成データ。\
行はすべて架空で、実在の手続を表すものではない。列ごとの欠損率・上位値の件数・件数の範囲は、\
公表されている実データの列統計に合わせて生成している。\
実データは https://www.digital.go.jp/resources/procedures-survey-results で公開されている。";
pub const SOURCE_NOTE: &str = "このデータの行は合成（架空）であり、調査結果そのものではない。\
公表された列統計に合うように決定的な乱数で生成した。\
実データは上記URL（デジタル庁）で公開されている。";
pub const LICENSE: &str = "CC0-1.0";

const ACTORS: &[(&str, Option<&str>)] = &[
    ("1 国", Some("国の行政機関")),
    (
        "2 独立行政法人等",
        Some("独立行政法人・特殊法人・認可法人・指定法人など（地方公共団体の機関を除く）"),
    ),
    ("3 地方等", Some("地方公共団体とその機関")),
    (
        "4-1 国又は独立行政法人等",
        Some("国と独立行政法人等の両方が該当する"),
    ),
    (
        "4-2 独立行政法人等又は地方等",
        Some("独立行政法人等と地方等の両方が該当する"),
    ),
    ("4-3 国又は地方等", Some("国と地方等の両方が該当する")),
    (
        "4-4 国、独立行政法人等又は地方等",
        Some("国・独立行政法人等・地方等のすべてが該当する"),
    ),
    (
        "5 国民等",
        Some("事業者としてではなく個人の立場で関わる者（外国籍の人を含む）"),
    ),
    ("6 民間事業者等", Some("事業を営む者（個人事業主を含む）")),
    (
        "7 国民等、民間事業者等",
        Some("国民等と民間事業者等の両方が該当する"),
    ),
];

const PLAIN_NOTE: &str = "値は架空の件数で、実データにならい有効数字2桁に丸めている。";
const NULL_NOTE: &str =
    "この合成データでは、空欄（null）は件数が不明であることを、0 は件数がゼロであることを表す。";

pub const FIELDS: &[FieldDef] = &[
    FieldDef {
        name: "手続ID",
        role: Role::Id,
        desc: "合成データ内で手続を一意に識別する番号（実データのIDとは無関係）。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "所管府省庁",
        role: Role::Dim,
        desc: "手続の根拠法令を所管する府省庁。",
        codelist: Codelist::Auto,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "手続名",
        role: Role::Attr,
        desc: "手続の名称（合成データでは架空の名称）。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "法令名",
        role: Role::Dim,
        desc: "手続の根拠となる法令の題名。",
        codelist: Codelist::Auto,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "法令番号",
        role: Role::Dim,
        desc: "根拠法令の番号（公布年と種別・番号）。法令番号を持たない要綱等は「-」又は空欄。",
        codelist: Codelist::Auto,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "根拠条項号",
        role: Role::Attr,
        desc: "手続を定めている条・項・号。主なもの一つを記載し、全角数字や漢数字などの表記の揺れを含む。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "手続類型",
        role: Role::Dim,
        desc: "手続の種類。行政機関等への申請等、行政機関等からの処分通知等、民間同士の交付等、縦覧等、作成・保存等に分かれる。",
        codelist: Codelist::Static(&[
            (
                "1 申請等",
                Some("国民や事業者等が法令に基づき行政機関等へ行う申請・届出など"),
            ),
            (
                "2-1 申請等に基づく処分通知等",
                Some("申請等を受けて行政機関等が行う許可などの処分の通知"),
            ),
            (
                "2-2 申請等に基づかない処分通知等",
                Some("申請等によらず行政機関等が行う命令・通知など"),
            ),
            (
                "2-3 交付等（民間手続）",
                Some("法令に基づき民間事業者等が相手方に行う書面の交付・提供など"),
            ),
            (
                "3 縦覧等",
                Some("書類や電磁的記録を縦覧・閲覧させ、又は謄写させるもの"),
            ),
            (
                "4 作成・保存等",
                Some("書類や電磁的記録を作成・記載・保存などするもの"),
            ),
        ]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "手続主体",
        role: Role::Dim,
        desc: "手続を行う側の種別。",
        codelist: Codelist::Static(ACTORS),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "手続の受け手",
        role: Role::Dim,
        desc: "手続を受ける側の種別。申請等・処分通知等・交付等（類型1〜2-3）で記入し、縦覧等と作成・保存等では空欄。",
        codelist: Codelist::Static(ACTORS),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "経由機関",
        role: Role::Attr,
        desc: "法令上、特定の機関を経由して手続を行う場合の経由先の種別。経由しない手続では空欄。",
        codelist: Codelist::Static(ACTORS),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "独立行政法人等の名称",
        role: Role::Attr,
        desc: "手続主体・受け手・経由機関に独立行政法人等が含まれる場合の法人名。すべての法人が対象なら「全独立行政法人等」。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "事務区分",
        role: Role::Dim,
        desc: "地方公共団体が関わる手続での事務の種類（自治事務か法定受託事務か等）。",
        codelist: Codelist::Static(&[
            ("1 自治事務", None),
            ("2 第1号法定受託事務", None),
            ("3 第2号法定受託事務", None),
            ("4 地方の事務でない", None),
        ]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "府省共通手続",
        role: Role::Dim,
        desc: "複数の府省で共通に行われる手続かどうか。○は全府省、●は一部の府省で共通、×は共通でない。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "実施府省庁",
        role: Role::Attr,
        desc: "手続を実際に行う府省庁。府省共通手続では該当する府省庁を列挙する。",
        codelist: Codelist::None,
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "オンライン化の実施状況",
        role: Role::Dim,
        desc: "手続がオンラインでできるかどうか。",
        codelist: Codelist::Static(&[
            ("1 実施済", None),
            ("2 未実施", None),
            ("3 適用除外", None),
            ("4 その他", None),
            (
                "5 一部実施済",
                Some("府省共通手続のうち、一部の府省庁だけがオンライン化を済ませたもの"),
            ),
        ]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "オンライン化の実施予定及び検討時の懸念点",
        role: Role::Attr,
        desc: "オンライン化の予定、又はオンライン化を検討したときの懸念点（複数選択）。実施済の手続では空欄。",
        codelist: Codelist::Static(&[
            ("0 オンライン化実施予定", None),
            (
                "1 制度改正が必要であり、制度改正のための時間確保が困難",
                None,
            ),
            (
                "2 制度改正が必要であり、制度改正の業務上の優先順位が高くない",
                None,
            ),
            ("3 電子化に必要なシステムが省庁内に備わっていない", None),
            (
                "4 一部の必要書類の原本が紙であり、電子化してもオンライン処理が完結しない",
                None,
            ),
            ("5 性質上、電子化すべきでない", None),
            ("6 オンライン化の費用対効果が小さい又は不明", None),
            ("7 上記に該当しない", None),
        ]),
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "オンライン化実施時期",
        role: Role::Attr,
        desc: "オンライン化を予定している年度。懸念点に「0 オンライン化実施予定」を含む手続で記入。",
        codelist: Codelist::Static(&[
            ("1 2024年度", None),
            ("2 2025年度", None),
            ("3 2026年度", None),
            ("4 2027年度", None),
            ("5 2028年度", None),
            ("6 2029年度", None),
            ("7 2030年度以降", None),
        ]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "申請等における本人確認手法",
        role: Role::Attr,
        desc: "申請等で本人を確かめる方法（複数選択）。主にオンライン化されていない申請等で記入。",
        codelist: Codelist::None,
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "手数料等の納付有無",
        role: Role::Attr,
        desc: "手数料等の支払が必要かどうか。申請等で記入。",
        codelist: Codelist::Static(&[("1 手数料等無し", None), ("2 手数料等有り", None)]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "手数料等の納付方法",
        role: Role::Attr,
        desc: "手数料等の支払方法（複数選択）。「1-」は窓口などオフライン、「2-」はオンラインでの支払。手数料等がある申請等で記入。",
        codelist: Codelist::None,
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "手数料等のオンライン納付時の優遇措置",
        role: Role::Attr,
        desc: "オンラインで支払うと手数料等が減免されるかどうか。オンラインで納付できる手続で記入。",
        codelist: Codelist::Static(&[("1 減免措置有り", None), ("2 減免措置無し", None)]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "処理期間(オンライン)",
        role: Role::Attr,
        desc: "オンラインで手続した場合の標準的な処理期間（自由記述）。府省共通手続では幅で書かれることがある。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "処理期間(非オンライン)",
        role: Role::Attr,
        desc: "窓口や郵送などオンライン以外で手続した場合の標準的な処理期間（自由記述）。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "情報システム(申請)",
        role: Role::Dim,
        desc: "申請等を受け付けるシステムの名称。オンライン化済み又は予定の申請等で記入。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "情報システム(事務処理)",
        role: Role::Dim,
        desc: "受け付けた後の審査や処理に使うシステムの名称。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "総手続件数",
        role: Role::Measure,
        desc: "1年間に行われた手続の件数（令和5年度に相当）。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[NULL_NOTE, PLAIN_NOTE],
    },
    FieldDef {
        name: "オンライン手続件数",
        role: Role::Measure,
        desc: "1年間の件数のうち、オンラインで行われたもの。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[
            NULL_NOTE,
            "オンライン化が実施済（一部実施済を含む）でない手続では、空欄か 0 になる。",
            PLAIN_NOTE,
        ],
    },
    FieldDef {
        name: "非オンライン手続件数",
        role: Role::Measure,
        desc: "1年間の件数のうち、窓口・郵送などオンライン以外で行われたもの。",
        codelist: Codelist::None,
        multi_value: false,
        notes: &[NULL_NOTE, PLAIN_NOTE],
    },
    FieldDef {
        name: "申請書等に記載させる情報",
        role: Role::Attr,
        desc: "申請書等に必ず書かせる代表的な情報（複数選択）。申請等で記入。",
        codelist: Codelist::None,
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "申請時に添付させる書類",
        role: Role::Attr,
        desc: "申請時に必ず添付させる代表的な書類（複数選択）。申請等で記入。",
        codelist: Codelist::None,
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "添付書類等提出の撤廃/省略状況",
        role: Role::Attr,
        desc: "添付書類の提出をなくす・省く取組の状況。添付書類のある申請等で記入。",
        codelist: Codelist::Static(&[
            ("1 撤廃・省略済", None),
            ("2 撤廃・省略予定", None),
            ("3 撤廃・省略不可", None),
            ("4 その他", None),
        ]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "添付書類等の提出方法",
        role: Role::Attr,
        desc: "添付書類等を電子と紙のどちらで出すか（複数選択）。撤廃・省略済でない手続で記入。",
        codelist: Codelist::Static(&[
            ("0 電子・原紙を選択可能", None),
            ("1 電子での提出のみ", None),
            ("2 原紙での提出のみ", None),
            ("3 一部電子、一部原紙での提出", None),
            ("4 その他", None),
        ]),
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "添付書類等への電子署名",
        role: Role::Attr,
        desc: "電子で出す添付書類等に電子署名が要るかどうか。",
        codelist: Codelist::Static(&[
            ("1 電子署名は必要ない", None),
            ("2 一部の書類で電子署名が必要", None),
            ("3 全ての書類で電子署名が必要", None),
        ]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "添付形式等が定められた規定",
        role: Role::Attr,
        desc: "添付書類等の出し方や形式を決めている文書の種類。撤廃・省略済でない手続で記入。",
        codelist: Codelist::Static(&[
            ("0 規定はない", None),
            ("1 法令の規定", None),
            ("2 告示等の規定", None),
            ("3 システムの仕様", None),
            ("4 その他", None),
        ]),
        multi_value: false,
        notes: &[],
    },
    FieldDef {
        name: "手続が行われるイベント(個人)",
        role: Role::Attr,
        desc: "手続のきっかけとなる個人の出来事（複数選択）。出生、引越し、就職、介護、相続など。",
        codelist: Codelist::None,
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "手続が行われるイベント(法人)",
        role: Role::Attr,
        desc: "手続のきっかけとなる法人の出来事（複数選択）。設立、役員変更、事業開始、定期報告など。",
        codelist: Codelist::None,
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "申請に関連する士業",
        role: Role::Attr,
        desc: "申請等を代わりに行える士業（複数選択）。申請等で記入。",
        codelist: Codelist::Static(&[
            ("士業が介在しない", None),
            ("弁護士", None),
            ("行政書士", None),
            ("税理士", None),
            ("社会保険労務士", None),
            ("弁理士", None),
            ("海事代理士", None),
            ("司法書士", None),
            ("医療系職種", None),
            ("公認会計士", None),
            ("土地家屋調査士", None),
            ("中小企業診断士", None),
            ("その他", None),
        ]),
        multi_value: true,
        notes: &[],
    },
    FieldDef {
        name: "申請を提出する機関",
        role: Role::Attr,
        desc: "申請等の提出先となる機関（複数選択）。受け手が国又は地方等である申請等で記入。",
        codelist: Codelist::AutoSplit,
        multi_value: true,
        notes: &[],
    },
];

pub const COMPUTED_MEASURE_DESC: &str =
    "オンライン化が実施済の手続の割合（実施済の手続数 ÷ 全手続数。件数ではなく手続の種類で数える）";

pub fn field(name: &str) -> &'static FieldDef {
    FIELDS
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("unknown field {name}"))
}

/// Codes of a static codelist, in order.
pub fn codes(name: &str) -> Vec<&'static str> {
    field(name).codes()
}

/// A YAML scalar: plain when that reads back as the same string, otherwise
/// double-quoted (JSON string syntax is valid YAML).
fn scalar(s: &str) -> String {
    let needs_quotes = s.is_empty()
        || s.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@` ".contains(c))
        || s.ends_with(' ')
        || s.contains(": ")
        || s.contains(" #")
        || s.ends_with(':')
        || s.parse::<f64>().is_ok()
        || matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "~"
        );
    if needs_quotes {
        serde_json::to_string(s).expect("strings always serialise")
    } else {
        s.to_string()
    }
}

/// The definition file in the project's `schema_version: "1"` format.
pub fn dataset_yaml() -> String {
    let mut y = String::new();
    // Writing into a String cannot fail; the results are ignored.
    // Editors that read the first line check the file against the published schema.
    let _ = writeln!(
        y,
        "# yaml-language-server: $schema={}",
        tally_semantic::definition::schema_url()
    );
    let _ = writeln!(
        y,
        "# Synthetic dataset definition generated by tally-synth."
    );
    let _ = writeln!(y, "schema_version: \"1\"");
    let _ = writeln!(y, "title: {}", scalar(TITLE));
    let _ = writeln!(y, "publisher: {}", scalar(PUBLISHER));
    let _ = writeln!(y, "description: {}", scalar(DESCRIPTION));
    let _ = writeln!(y, "license: {}", scalar(LICENSE));
    let _ = writeln!(y, "id_field: {}", scalar("手続ID"));
    let _ = writeln!(y, "source:");
    let _ = writeln!(y, "  url: {}", scalar(SOURCE_URL));
    let _ = writeln!(y, "  note: {}", scalar(SOURCE_NOTE));
    let _ = writeln!(y, "data_file: data.parquet");
    let _ = writeln!(y, "fields:");
    for f in FIELDS {
        let _ = writeln!(y, "- name: {}", scalar(f.name));
        let _ = writeln!(y, "  role: {}", f.role.as_str());
        if f.role == Role::Measure {
            let _ = writeln!(y, "  data_type: integer");
        }
        let _ = writeln!(y, "  desc: {}", scalar(f.desc));
        match f.codelist {
            Codelist::None => {}
            Codelist::Auto => {
                let _ = writeln!(y, "  codelist: auto");
            }
            Codelist::AutoSplit => {
                let _ = writeln!(y, "  codelist: auto_split");
            }
            Codelist::Static(entries) => {
                let _ = writeln!(y, "  codelist:");
                for (code, desc) in entries {
                    match desc {
                        Some(d) => {
                            let _ = writeln!(y, "  - {}: {}", scalar(code), scalar(d));
                        }
                        None => {
                            let _ = writeln!(y, "  - {}", scalar(code));
                        }
                    }
                }
            }
        }
        if f.multi_value {
            let _ = writeln!(y, "  multi_value: true");
        }
        if !f.notes.is_empty() {
            let _ = writeln!(y, "  notes:");
            for n in f.notes {
                let _ = writeln!(y, "  - {}", scalar(n));
            }
        }
    }
    let _ = writeln!(y, "computed_measures:");
    let _ = writeln!(y, "- name: オンライン率");
    let _ = writeln!(y, "  mode: count_where");
    let _ = writeln!(y, "  condition_field: オンライン化の実施状況");
    let _ = writeln!(y, "  condition_values:");
    let _ = writeln!(y, "  - 1 実施済");
    let _ = writeln!(y, "  desc: {}", scalar(COMPUTED_MEASURE_DESC));
    let _ = writeln!(y, "generic_values:");
    let _ = writeln!(y, "- その他");
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_quote_only_when_needed() {
        assert_eq!(scalar("1 国"), "1 国");
        assert_eq!(scalar("1"), "\"1\"");
        assert_eq!(scalar("a: b"), "\"a: b\"");
        assert_eq!(scalar("-"), "\"-\"");
    }

    #[test]
    fn the_first_line_names_the_schema_editors_check_it_against() {
        let yaml = dataset_yaml();
        let first = yaml.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!(
                "# yaml-language-server: $schema={}",
                tally_semantic::definition::schema_url()
            )
        );
    }

    #[test]
    fn thirty_eight_fields() {
        assert_eq!(FIELDS.len(), 38);
        let yaml = dataset_yaml();
        assert_eq!(yaml.matches("\n- name: ").count(), 39);
    }
}
