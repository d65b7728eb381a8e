//! Hand-written vocabularies: the domain knowledge the statistics do not
//! carry (which ministry owns which law, what a procedure is called, which
//! system belongs to whom). Everything here is invented or general public
//! knowledge; no row of the real survey is reproduced.
//!
//! One module per kind of table: the ministries and the bodies around them
//! (`ministries`), laws (`laws`), procedure names (`names`), information
//! systems (`systems`), and what filing a procedure involves (`filing`).

mod filing;
mod laws;
mod ministries;
mod names;
mod systems;

pub(crate) use filing::{
    ATTACH_ADMIN, ATTACH_BUSINESS, ATTACH_PERSON, EVENTS_BUSINESS, EVENTS_PERSON, FORM_INFO_ADMIN,
    FORM_INFO_BUSINESS, FORM_INFO_PERSON, IDENTITY_CHECKS, NO_ATTACHMENT, NO_PROFESSIONAL,
    OTHER_EVENT, PAYMENT_OFFLINE, PAYMENT_ONLINE, PROFESSIONALS,
};
pub(crate) use laws::{LAW_TEMPLATES, LawKind, UNNUMBERED_TEMPLATES, known_law};
pub(crate) use ministries::{
    AGENCY_TEMPLATES, GENERIC_DOMAINS, GENERIC_RECEIVERS, Ministry, ministry,
};
pub(crate) use names::{
    NAME_ACTIONS, NAME_DECISIONS, NAME_DOCUMENTS, NAME_OBJECTS, NAME_PATTERNS, NAME_RECORDS,
};
pub(crate) use systems::{SYSTEM_SUFFIXES_APPLY, SYSTEM_SUFFIXES_BACK, system_owners};
