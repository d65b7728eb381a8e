//! Which store reads a URL: S3's client when this build has it (the `s3` feature), else a
//! refusal that says which build reads it.

/// The store for a URL's bucket: S3's, built once per bucket (the `s3` feature).
#[cfg(feature = "s3")]
pub(super) use super::s3::store_for;

/// This build reads no object storage: said with what works.
#[cfg(not(feature = "s3"))]
pub(super) fn store_for(
    url: &tally_semantic::definition::ObjectUrl,
) -> Result<std::sync::Arc<dyn object_store::ObjectStore>, super::error::ObjectError> {
    Err(not_in_this_build(url))
}

/// What a build without the S3 client says of a dataset in object storage. (Compiled in every
/// build, so that its test runs in the one CI tests.)
#[cfg_attr(feature = "s3", allow(dead_code))]
fn not_in_this_build(url: &tally_semantic::definition::ObjectUrl) -> super::error::ObjectError {
    super::error::ObjectError::NotInThisBuild(format!(
        "this tally was built without object storage, so `{}://{}/` cannot be read",
        url.scheme, url.bucket
    ))
}

#[cfg(test)]
mod tests {
    use tally_semantic::definition::ObjectUrl;

    #[test]
    fn a_build_without_object_storage_says_which_build_reads_it() {
        let url = ObjectUrl::parse("s3://survey/2024/").expect("an object URL");
        let e = super::not_in_this_build(&url);
        assert_eq!(
            e.to_string(),
            "this tally was built without object storage, so `s3://survey/` cannot be read"
        );
        assert!(e.fix().contains("--features s3"), "{}", e.fix());
        assert!(e.fix().contains("release archive"), "{}", e.fix());
        assert!(!e.is_transient(), "a build does not change by trying again");
    }
}
