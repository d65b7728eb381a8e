//! Opaque paging cursors.
//!
//! A cursor names the dataset version, the query it belongs to (a fingerprint of the resolved
//! filters, search and order) and the offset of the next page. Order is total (file order
//! breaks every tie), so offset paging never repeats or skips a row while the version is the
//! same; a cursor from another version or another query is refused, not misapplied.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tally_semantic::{ErrorCode, RequestError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Payload {
    /// Dataset version.
    v: String,
    /// Query fingerprint.
    q: String,
    /// Offset of the next row.
    o: usize,
}

/// A short fingerprint of a query's identity (what it selects and in which order).
pub fn fingerprint(identity: &serde_json::Value) -> String {
    let digest = Sha256::digest(identity.to_string().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();

/// Signs cursors with a key derived from `seed` instead of a random one. The command line
/// uses this (seeded with the datasets directory) so that a cursor printed by one `tally
/// query` is accepted by the next; a server keeps its random per-process key. Must be called
/// before the first cursor is made; later calls are ignored.
pub fn derive_key(seed: &[u8]) {
    let key: [u8; 32] = Sha256::new()
        .chain_update(b"tally cursor key v1\0")
        .chain_update(seed)
        .finalize()
        .into();
    let _ = KEY.set(key);
}

/// Signs cursors with `key` (the one kept in the cache directory, see
/// [`tally_storage::cache::Cache::cursor_key`]), so that every process of one datasets directory
/// accepts the cursors of the others. Must be called before the first cursor is made; later
/// calls are ignored.
pub fn set_key(key: [u8; 32]) {
    let _ = KEY.set(key);
}

/// The key cursors are signed with: random per server process when none was set, so a cursor cannot be edited
/// (an offset of 2^64−1, another query's offset) without being refused, and one from an
/// earlier process is refused like any stale cursor. (A cursor is not a capability: any
/// offset can be reached by paging. The signature keeps edited and foreign cursors from
/// being misread.)
fn key() -> &'static [u8; 32] {
    KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        if getrandom::fill(&mut key).is_err() {
            // No system random source: derive a per-process key from what differs between
            // processes (unpredictable enough to stop edits, which is what the MAC is for).
            let seed = format!(
                "{:?}{:?}{}",
                std::time::SystemTime::now(),
                std::thread::current().id(),
                std::process::id()
            );
            key = Sha256::digest(seed.as_bytes()).into();
        }
        key
    })
}

/// HMAC-SHA-256 (RFC 2104) of `message` under the process key.
fn mac(message: &[u8]) -> [u8; 32] {
    let key = key();
    let mut inner_pad = [0x36u8; 64];
    let mut outer_pad = [0x5cu8; 64];
    for (i, k) in key.iter().enumerate() {
        inner_pad[i] ^= k;
        outer_pad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(inner_pad)
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(outer_pad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// Bytes of the MAC kept in a cursor: 128 bits cannot be guessed.
const MAC_BYTES: usize = 16;

/// Whether `tag` is the kept part of `expected`, compared in constant time: how many bytes
/// matched must not show in the time taken.
fn tag_matches(tag: &[u8], expected: &[u8; 32]) -> bool {
    tag.len() == MAC_BYTES
        && tag
            .iter()
            .zip(&expected[..MAC_BYTES])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

pub fn encode(version: &str, fingerprint: &str, offset: usize) -> String {
    let payload = Payload {
        v: version.to_string(),
        q: fingerprint.to_string(),
        o: offset,
    };
    let body = serde_json::to_vec(&payload).unwrap_or_default();
    let tag = mac(&body);
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(&body),
        URL_SAFE_NO_PAD.encode(&tag[..MAC_BYTES])
    )
}

fn invalid(message: &str) -> RequestError {
    RequestError::new(ErrorCode::InvalidCursor, message.to_string())
        .at("cursor")
        .hint("pass next_cursor exactly as returned, with the same other arguments; omit cursor to start from the first page")
}

/// The offset a cursor points at, if this server issued it for this dataset version and
/// query, and it lies within the `total` rows the query matches.
pub fn decode(
    cursor: &str,
    version: &str,
    fingerprint: &str,
    total: usize,
) -> Result<usize, RequestError> {
    let foreign = || invalid("the cursor is not one this server issued (or it was edited)");
    if cursor.len() > 1024 {
        return Err(foreign());
    }
    let (body, tag) = cursor.trim().split_once('.').ok_or_else(foreign)?;
    let body = URL_SAFE_NO_PAD.decode(body).map_err(|_| foreign())?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| foreign())?;
    let same = tag_matches(&tag, &mac(&body));
    if !same {
        return Err(invalid(
            "the cursor was not issued by this server process or was edited (cursors are signed; a server restart also ends them)",
        ));
    }
    let payload: Payload = serde_json::from_slice(&body).map_err(|_| foreign())?;
    if payload.v != version {
        return Err(invalid(
            "the cursor is stale: the dataset changed since it was issued, so its pages would not line up",
        ));
    }
    if payload.q != fingerprint {
        return Err(invalid(
            "the cursor belongs to a different query (its filters, search, order or selection differ)",
        ));
    }
    if payload.o > total {
        return Err(invalid("the cursor points past the last row of this query"));
    }
    Ok(payload.o)
}

/// `payload` sealed for `purpose` under the process key (a `requestState` the client echoes
/// back): readable, but any change to it, or its use for another purpose, is detected by
/// [`open`].
pub fn seal(purpose: &str, payload: &[u8]) -> String {
    let tag = mac(&[purpose.as_bytes(), b"\0", payload].concat());
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(payload),
        URL_SAFE_NO_PAD.encode(&tag[..MAC_BYTES])
    )
}

/// The payload [`seal`] sealed for `purpose`, if `sealed` is exactly what this server (its
/// key) sealed for it.
pub fn open(purpose: &str, sealed: &str) -> Option<Vec<u8>> {
    let (body, tag) = sealed.split_once('.')?;
    let body = URL_SAFE_NO_PAD.decode(body).ok()?;
    let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
    let same = tag_matches(&tag, &mac(&[purpose.as_bytes(), b"\0", &body].concat()));
    same.then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_state_opens_only_unchanged_and_for_its_purpose() {
        let sealed = seal("choice", b"{\"a\":1}");
        assert_eq!(open("choice", &sealed).as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(open("cursor", &sealed), None);
        assert_eq!(open("choice", &format!("{sealed}-TAMPERED")), None);
        let (body, tag) = sealed.split_once('.').unwrap();
        let edited = URL_SAFE_NO_PAD.encode(b"{\"a\":2}");
        assert_eq!(open("choice", &format!("{edited}.{tag}")), None);
        assert_eq!(open("choice", body), None);
    }

    #[test]
    fn round_trip_and_refusals() {
        let c = encode("v1", "abc", 50);
        assert_eq!(decode(&c, "v1", "abc", 100), Ok(50));
        assert!(decode(&c, "v2", "abc", 100).is_err_and(|e| e.message.contains("stale")));
        assert!(decode(&c, "v1", "xyz", 100).is_err_and(|e| e.message.contains("different query")));
        assert!(decode(&c, "v1", "abc", 10).is_err_and(|e| e.message.contains("past the last")));
        assert!(decode("not a cursor!", "v1", "abc", 100).is_err());
        assert!(decode("eyJ4IjoxfQ", "v1", "abc", 100).is_err());
    }

    /// Regression (issue 14, "an edited cursor offset"): a cursor whose offset was rewritten
    /// (to 2^64−1, or to anything else) fails its MAC and is refused as a caller error, never
    /// reaching the planner.
    #[test]
    fn edited_cursor_offset_is_refused() {
        let c = encode("v1", "abc", 50);
        let (body, tag) = c.split_once('.').expect("two parts");
        let payload = String::from_utf8(URL_SAFE_NO_PAD.decode(body).expect("b64")).expect("utf8");
        for forged in [u64::MAX.to_string(), "0".to_string(), "51".to_string()] {
            let edited = payload.replace("\"o\":50", &format!("\"o\":{forged}"));
            let cursor = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(edited.as_bytes()));
            let err = decode(&cursor, "v1", "abc", usize::MAX).expect_err("edited");
            assert_eq!(err.code, ErrorCode::InvalidCursor);
            assert!(err.message.contains("edited"), "{}", err.message);
        }
        // Without a MAC at all (the old format), also refused.
        assert!(decode(body, "v1", "abc", 100).is_err());
    }
}
