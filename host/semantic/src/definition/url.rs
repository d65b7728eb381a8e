//! `data_url`: an object-store URL, its parts, and what it must not carry (secrets).

/// Where in object storage a dataset's data lies: `s3://bucket/prefix`. A prefix that ends
/// in `/` (or is empty) names every Parquet object under it; any other names one object, or,
/// when no object has that exact key, the objects under `prefix/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectUrl {
    /// The scheme, lower case: `s3` (the only one served).
    pub scheme: String,
    pub bucket: String,
    /// The key or key prefix, without a leading `/`.
    pub prefix: String,
}

impl ObjectUrl {
    /// Reads `s3://bucket/prefix`, refusing anything that could carry a secret (user
    /// information, a query string) or that is not a bucket name.
    pub fn parse(text: &str) -> Result<ObjectUrl, String> {
        let text = text.trim();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err("it has no scheme (`s3://`)".into());
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "s3" {
            return Err(format!(
                "the scheme `{scheme}://` is not served (S3 and S3-compatible stores are, as `s3://`)"
            ));
        }
        // `key:secret@bucket`, where a secret may hold `/`: user information is whatever
        // comes before the last `@` when a `:` precedes it.
        if credentials_in(rest) {
            return Err(
                "it names credentials before the bucket; they never belong in dataset.yaml".into(),
            );
        }
        if rest.contains(['?', '#']) {
            return Err("it has a query or fragment; a signed URL carries credentials, which never belong in dataset.yaml".into());
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.contains(['@', ':']) {
            return Err(
                "its bucket part holds `@` or `:`; credentials never belong in dataset.yaml".into(),
            );
        }
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !valid_bucket {
            return Err(format!(
                "`{bucket}` is not a bucket name (3 to 63 lower-case letters, digits, `-` and `.`)"
            ));
        }
        if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains('\\') {
            return Err("its key has `.` or `..` parts".into());
        }
        Ok(ObjectUrl {
            scheme,
            bucket: bucket.to_string(),
            prefix: prefix.trim_start_matches('/').to_string(),
        })
    }

    /// Whether the URL names a folder (every object under it) rather than one object.
    pub fn is_folder(&self) -> bool {
        self.prefix.is_empty() || self.prefix.ends_with('/')
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}/{}", self.scheme, self.bucket, self.prefix)
    }
}

/// Whether the part of a URL after `scheme://` starts with user information: an `@` with a
/// `:` before it (a secret may hold `/`, so the authority cannot be cut at the first `/`), or
/// an `@` before the first `/`.
pub(super) fn credentials_in(rest: &str) -> bool {
    match rest.rfind('@') {
        Some(at) => rest[..at].contains(':') || !rest[..at].contains('/'),
        None => false,
    }
}

/// A URL as it may be shown back: what could be a secret (user information, a query such as
/// a signature) replaced by `…`.
pub(super) fn redacted(url: &str) -> String {
    let (head, query) = match url.split_once(['?', '#']) {
        Some((h, _)) => (h, "?…"),
        None => (url, ""),
    };
    let head = match head.split_once("://") {
        Some((scheme, rest)) if credentials_in(rest) => {
            format!(
                "{scheme}://…@{}",
                rest.rsplit('@').next().unwrap_or_default()
            )
        }
        Some(_) => head.to_string(),
        // Not a URL at all: it may be a secret pasted in whole.
        None => "…".to_string(),
    };
    head + query
}

#[cfg(test)]
mod object_url_tests {
    use super::ObjectUrl;

    #[test]
    fn object_urls_are_read_and_secrets_refused() {
        let u = ObjectUrl::parse("S3://tally-data/survey/year=2024/").unwrap();
        assert_eq!((u.scheme.as_str(), u.bucket.as_str()), ("s3", "tally-data"));
        assert_eq!(u.prefix, "survey/year=2024/");
        assert!(u.is_folder());
        assert_eq!(u.to_string(), "s3://tally-data/survey/year=2024/");
        let one = ObjectUrl::parse("s3://tally-data/a/b.parquet").unwrap();
        assert!(!one.is_folder());
        assert!(ObjectUrl::parse("s3://tally-data").unwrap().is_folder());
        for bad in [
            "tally-data/x",
            "https://tally-data/x",
            "s3://key:secret@tally-data/x",
            "s3://tally-data/x?X-Amz-Credential=a",
            "s3://Tally_Data/x",
            "s3://ab/x",
            "s3://tally-data/../x",
            "s3://AKIAX:ab/cd+ef@tally-data/x",
        ] {
            assert!(ObjectUrl::parse(bad).is_err(), "{bad}");
        }
        // A key may hold `@`; a secret with `/` is still cut from what is shown back.
        assert!(ObjectUrl::parse("s3://tally-data/people/a@b.parquet").is_ok());
        let shown = super::redacted("s3://AKIAX:ab/cd+ef@tally-data/x");
        assert!(
            !shown.contains("cd+ef") && !shown.contains("AKIAX"),
            "{shown}"
        );
        assert_eq!(
            super::redacted("s3://tally-data/x?X-Amz-Signature=s"),
            "s3://tally-data/x?…"
        );
    }
}
