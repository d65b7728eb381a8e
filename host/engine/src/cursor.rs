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

pub fn encode(version: &str, fingerprint: &str, offset: usize) -> String {
    let payload = Payload {
        v: version.to_string(),
        q: fingerprint.to_string(),
        o: offset,
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&payload).unwrap_or_default())
}

fn invalid(message: &str) -> RequestError {
    RequestError::new(ErrorCode::InvalidCursor, message.to_string())
        .at("cursor")
        .hint("pass next_cursor exactly as returned, with the same other arguments; omit cursor to start from the first page")
}

/// The offset a cursor points at, if it belongs to this dataset version and query.
pub fn decode(cursor: &str, version: &str, fingerprint: &str) -> Result<usize, RequestError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor.trim())
        .map_err(|_| invalid("the cursor is not one this server issued"))?;
    let payload: Payload = serde_json::from_slice(&bytes)
        .map_err(|_| invalid("the cursor is not one this server issued"))?;
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
    Ok(payload.o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let c = encode("v1", "abc", 50);
        assert_eq!(decode(&c, "v1", "abc"), Ok(50));
        assert!(decode(&c, "v2", "abc").is_err_and(|e| e.message.contains("stale")));
        assert!(decode(&c, "v1", "xyz").is_err_and(|e| e.message.contains("different query")));
        assert!(decode("not a cursor!", "v1", "abc").is_err());
        assert!(decode("eyJ4IjoxfQ", "v1", "abc").is_err());
    }
}
