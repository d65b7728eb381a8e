//! Where the scheduler is, and how every connection to the cluster is made.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How long the scheduler has to accept a connection.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// What every gRPC connection a Tally process opens to the cluster sets: no Nagle delay.
///
/// Ballista's clients to executors (the answer's partitions, an executor's reports to the
/// scheduler, one executor reading another's shuffle) and its scheduler's listener leave
/// Nagle's algorithm on. A request or an answer written in two parts (its headers, then its
/// message) then waits for the peer's delayed acknowledgement of the first part: 40 ms on
/// Linux, at each of a call's exchanges (measured: a count of 7.5M records through two
/// executors took 120 ms, of which the job was 25 ms).
pub fn without_delay() -> ballista_core::extension::EndpointOverrideFn {
    Arc::new(|endpoint: tonic::transport::Endpoint| Ok(endpoint.tcp_nodelay(true)))
}

/// A scheduler's address: `df://host:port` (the form Ballista's clients take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub host: String,
    pub port: u16,
}

impl Address {
    /// Reads `df://host:port`, saying what would work when it is not that.
    pub fn parse(text: &str) -> Result<Address, String> {
        let example = "write it as df://HOST:PORT, for example df://127.0.0.1:50050";
        let rest = text
            .trim()
            .strip_prefix("df://")
            .ok_or_else(|| format!("`{text}` is not a cluster address: {example}"))?;
        let rest = rest.trim_end_matches('/');
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("`{text}` names no port: {example}"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("`{text}` has no port number after `:`: {example}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.contains(['/', '@', '?', '#']) {
            return Err(format!("`{text}` names no host: {example}"));
        }
        Ok(Address {
            host: host.to_string(),
            port,
        })
    }

    pub(crate) fn url(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}", self.host, self.port)
        } else {
            format!("http://{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "df://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "df://{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_and_bad_ones_refused_with_an_example() {
        assert_eq!(
            Address::parse("df://127.0.0.1:50050"),
            Ok(Address {
                host: "127.0.0.1".into(),
                port: 50050
            })
        );
        assert_eq!(
            Address::parse("df://[::1]:7/").map(|a| a.to_string()),
            Ok("df://[::1]:7".to_string())
        );
        for bad in [
            "127.0.0.1:50050",
            "df://host",
            "df://:50050",
            "df://h:port",
            "http://h:1",
        ] {
            let e = Address::parse(bad).expect_err(bad);
            assert!(e.contains("df://127.0.0.1:50050"), "{bad}: {e}");
        }
    }
}
