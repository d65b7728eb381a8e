//! Unit tests of the guard: tokens, Host names, the rate bucket and the requests in flight.

use std::time::Instant;

use tally_engine::Scope;

use super::admit::asks;
use super::state::{ANSWERS_BEYOND, Guard, Share, Slot};
use super::tokens::Tokens;
use crate::view::Caller;

#[test]
fn tokens_are_found_by_digest_and_checked() {
    let mut t = Tokens::default();
    t.add("a", "0123456789abcdef", Scope::All).expect("ok");
    assert!(
        t.add("b", "short", Scope::All)
            .unwrap_err()
            .contains("fewer than 16")
    );
    assert!(
        t.add("a", "0123456789abcdefX", Scope::All)
            .unwrap_err()
            .contains("twice")
    );
    assert_eq!(t.find("0123456789abcdef").map(|t| t.id.as_str()), Some("a"));
    assert!(t.find("0123456789abcdeF").is_none());
}

#[test]
fn hosts_match_with_or_without_port() {
    let g = Guard::new(
        Tokens::default(),
        vec![
            "127.0.0.1".into(),
            "example.org:8443".into(),
            "[::1]".into(),
        ],
        vec![],
        1.0,
        1.0,
        1,
        1024,
    );
    assert!(g.host_allowed("127.0.0.1:8765"));
    assert!(g.host_allowed("EXAMPLE.org:8443"));
    assert!(g.host_allowed("[::1]:80"));
    assert!(!g.host_allowed("evil.example:8765"));
    assert!(!g.host_allowed(""));
}

#[test]
fn the_bucket_refills() {
    use std::time::Duration;
    // A burst of 2 at 1,000 a second, on a clock the test gives.
    let g = Guard::new(Tokens::default(), vec![], vec![], 1000.0, 2.0, 1, 1024);
    let t0 = Instant::now();
    assert_eq!(g.take_at("x", t0), Ok(()));
    assert_eq!(g.take_at("x", t0), Ok(()));
    assert_eq!(g.take_at("x", t0), Err(1), "the burst is spent");
    assert_eq!(
        g.take_at("x", t0 + Duration::from_micros(500)),
        Err(1),
        "half a token is not one"
    );
    assert_eq!(
        g.take_at("x", t0 + Duration::from_millis(1)),
        Ok(()),
        "refilled"
    );
    // Never more than the burst, however long the caller was away.
    let later = t0 + Duration::from_secs(60);
    assert_eq!(g.take_at("x", later), Ok(()));
    assert_eq!(g.take_at("x", later), Ok(()));
    assert_eq!(g.take_at("x", later), Err(1), "the burst caps the refill");
    let slow = Guard::new(Tokens::default(), vec![], vec![], 0.5, 1.0, 1, 1024);
    assert_eq!(slow.take_at("y", t0), Ok(()));
    assert_eq!(slow.take_at("y", t0), Err(2), "Retry-After rounds up");
    assert_eq!(
        slow.take_at("z", t0),
        Ok(()),
        "callers have their own buckets"
    );
}

/// Regression (issue 54, "first come holds the slots"): without tokens every local HTTP
/// client was one caller, so all of them shared 8 requests in flight. Each session now has
/// its own share, within a server-wide cap; with tokens, a token's sessions share one.
#[test]
fn requests_in_flight_are_counted_per_share_and_in_all() {
    let mut open = Guard::new(Tokens::default(), vec![], vec![], 1.0, 1.0, 2, 1024);
    open.max_in_flight = 5;
    let local = Caller {
        id: "ip:127.0.0.1".into(),
        scope: Scope::All,
    };
    let one = open.share(&local, Some("s1"));
    let two = open.share(&local, Some("s2"));
    assert_eq!(one, Share::Session("s1".into()));
    let held: Vec<Slot> = (0..2).map(|_| open.take_slot(&one).unwrap()).collect();
    let refused = open.take_slot(&one).unwrap_err();
    assert!(
        refused.contains("this session already has 2 requests in flight")
            && refused.contains("--max-concurrent")
            && refused.contains("a place frees when one of them is answered"),
        "{refused}"
    );
    // Another local session is not held back by the first.
    let mut more: Vec<Slot> = (0..2).map(|_| open.take_slot(&two).unwrap()).collect();
    let outside = open.share(&local, None);
    more.push(open.take_slot(&outside).unwrap());
    let full = open.take_slot(&open.share(&local, Some("s3"))).unwrap_err();
    assert!(
        full.contains("the server has 5 requests in flight") && full.contains("--max-in-flight"),
        "{full}"
    );
    // Past the caps, a message that only answers the server still has a place or two.
    let answers: Vec<Slot> = (0..ANSWERS_BEYOND)
        .map(|_| open.take_slot_within(&one, ANSWERS_BEYOND).unwrap())
        .collect();
    assert!(open.take_slot_within(&one, ANSWERS_BEYOND).is_err());
    drop(answers);
    assert!(asks(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#));
    assert!(asks(b"[]") && asks(b"not json"));
    assert!(!asks(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
    assert!(!asks(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#
    ));
    // A response that ends gives its place back.
    drop(held);
    open.take_slot(&one).expect("room again");
    drop(more);
    assert!(open.in_flight.lock().unwrap().by_share.len() <= 1);

    // With tokens a token's sessions share its slots.
    let mut tokens = Tokens::default();
    tokens.add("a", "0123456789abcdef", Scope::All).unwrap();
    let secured = Guard::new(tokens, vec![], vec![], 1.0, 1.0, 1, 1024);
    let a = Caller {
        id: "a".into(),
        scope: Scope::All,
    };
    let _first = secured.take_slot(&secured.share(&a, Some("s1"))).unwrap();
    let refused = secured
        .take_slot(&secured.share(&a, Some("s2")))
        .unwrap_err();
    assert!(
        refused.contains("`a` already has 1 requests in flight, the most one caller may have"),
        "{refused}"
    );
}
