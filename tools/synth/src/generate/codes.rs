//! The codes rows are classed by: indices into the static codelists of 手続類型, 手続主体 and
//! オンライン化の実施状況 (checked against the schema in tests), and the classes of rows
//! without one.

pub(super) mod kind {
    pub const APPLY: usize = 0;
    pub const NOTICE_ON_REQUEST: usize = 1;
    pub const NOTICE_EX_OFFICIO: usize = 2;
    pub const PRIVATE_DELIVERY: usize = 3;
    pub const INSPECTION: usize = 4;
    pub const RECORDS: usize = 5;
}

/// Class ids for rows without a 手続類型 / 手続主体, and the number of
/// actor classes (ten codes plus none), used to combine both in one id.
pub(super) const KIND_NONE: usize = 6;
pub(super) const ACTOR_NONE: usize = 10;
pub(super) const ACTOR_CLASSES: usize = 11;

pub(super) mod actor {
    pub const STATE: usize = 0;
    pub const AGENCY: usize = 1;
    pub const LOCAL: usize = 2;
    pub const STATE_AGENCY: usize = 3;
    pub const AGENCY_LOCAL: usize = 4;
    pub const STATE_LOCAL: usize = 5;
    pub const ALL_PUBLIC: usize = 6;
    pub const PERSON: usize = 7;
    pub const BUSINESS: usize = 8;
    pub const PERSON_BUSINESS: usize = 9;

    pub fn is_public(a: usize) -> bool {
        a <= ALL_PUBLIC
    }
    pub fn has_state(a: usize) -> bool {
        matches!(a, STATE | STATE_AGENCY | STATE_LOCAL | ALL_PUBLIC)
    }
    pub fn has_agency(a: usize) -> bool {
        matches!(a, AGENCY | STATE_AGENCY | AGENCY_LOCAL | ALL_PUBLIC)
    }
    pub fn has_local(a: usize) -> bool {
        matches!(a, LOCAL | AGENCY_LOCAL | STATE_LOCAL | ALL_PUBLIC)
    }
}

pub(super) mod status {
    pub const DONE: usize = 0;
    pub const NOT_YET: usize = 1;
    pub const EXEMPT: usize = 2;
    pub const OTHER: usize = 3;
    pub const PARTLY: usize = 4;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;

    #[test]
    fn code_indices_match_schema() {
        let kinds = schema::codes("手続類型");
        assert_eq!(kinds[kind::APPLY], "1 申請等");
        assert_eq!(
            kinds[kind::NOTICE_ON_REQUEST],
            "2-1 申請等に基づく処分通知等"
        );
        assert_eq!(
            kinds[kind::NOTICE_EX_OFFICIO],
            "2-2 申請等に基づかない処分通知等"
        );
        assert_eq!(kinds[kind::PRIVATE_DELIVERY], "2-3 交付等（民間手続）");
        assert_eq!(kinds[kind::INSPECTION], "3 縦覧等");
        assert_eq!(kinds[kind::RECORDS], "4 作成・保存等");
        let actors = schema::codes("手続主体");
        assert_eq!(actors[actor::AGENCY], "2 独立行政法人等");
        assert_eq!(
            actors[actor::ALL_PUBLIC],
            "4-4 国、独立行政法人等又は地方等"
        );
        assert_eq!(actors[actor::PERSON], "5 国民等");
        assert_eq!(actors[actor::PERSON_BUSINESS], "7 国民等、民間事業者等");
        let s = schema::codes("オンライン化の実施状況");
        assert_eq!(s[status::DONE], "1 実施済");
        assert_eq!(s[status::PARTLY], "5 一部実施済");
        assert_eq!(s[status::OTHER], "4 その他");
        assert_eq!(schema::codes("事務区分")[3], "4 地方の事務でない");
    }
}
