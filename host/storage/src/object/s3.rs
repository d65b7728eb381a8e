//! The S3 store of a bucket, built once from the server's environment and the AWS tools'
//! profile files (never from `dataset.yaml`), with our timeouts and retries.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};
use tally_semantic::definition::ObjectUrl;

use super::error::ObjectError;
use super::io::{CONNECT_TIMEOUT, MAX_RETRIES, RETRY_TIMEOUT, TOTAL_TIMEOUT};

/// The store for a URL's bucket, built once per bucket from the environment.
pub(super) fn store_for(url: &ObjectUrl) -> Result<Arc<dyn ObjectStore>, ObjectError> {
    static STORES: OnceLock<Mutex<BTreeMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    let stores = STORES.get_or_init(Default::default);
    let key = format!("{}://{}", url.scheme, url.bucket);
    if let Some(store) = stores.lock().ok().and_then(|s| s.get(&key).cloned()) {
        return Ok(store);
    }
    let env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AWS_"))
        .collect();
    let store: Arc<dyn ObjectStore> = Arc::new(s3_store(&url.bucket, &env, &home_files(&env))?);
    if let Ok(mut s) = stores.lock() {
        s.insert(key, Arc::clone(&store));
    }
    Ok(store)
}

/// The shared credentials and config files of the AWS tools, as the environment names them.
#[derive(Debug, Default)]
struct ProfileFiles {
    credentials: Option<String>,
    config: Option<String>,
}

fn home_files(env: &BTreeMap<String, String>) -> ProfileFiles {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let path = |var: &str, default: &str| {
        env.get(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
    };
    let read = |p: Option<PathBuf>| p.and_then(|p| crate::problem::read_small(&p, 1 << 20).ok());
    ProfileFiles {
        credentials: read(path("AWS_SHARED_CREDENTIALS_FILE", "credentials")),
        config: read(path("AWS_CONFIG_FILE", "config")),
    }
}

/// The keys of one section of an INI file (`[name]`), lower-cased, values trimmed.
fn ini_section(text: &str, section: &str) -> Option<BTreeMap<String, String>> {
    let mut current: Option<String> = None;
    let mut found: Option<BTreeMap<String, String>> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(name.trim().to_string());
            if current.as_deref() == Some(section) {
                found.get_or_insert_with(BTreeMap::new);
            }
            continue;
        }
        if current.as_deref() == Some(section)
            && let Some((k, v)) = line.split_once('=')
            && let Some(map) = found.as_mut()
        {
            map.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    found
}

/// The settings of the profile `AWS_PROFILE` names (or `default`, when the files have one and
/// the environment holds no key): credentials from the credentials file, region and endpoint
/// from the config file. Environment variables win over the profile.
fn profile_settings(
    env: &BTreeMap<String, String>,
    files: &ProfileFiles,
) -> Result<BTreeMap<String, String>, ObjectError> {
    let named = env.get("AWS_PROFILE").cloned();
    let name = named.clone().unwrap_or_else(|| "default".to_string());
    let credentials = files
        .credentials
        .as_deref()
        .and_then(|t| ini_section(t, &name));
    let config = files.config.as_deref().and_then(|t| {
        ini_section(t, &format!("profile {name}")).or_else(|| {
            (name == "default")
                .then(|| ini_section(t, "default"))
                .flatten()
        })
    });
    if named.is_some() && credentials.is_none() && config.is_none() {
        return Err(ObjectError::NoCredentials(format!(
            "AWS_PROFILE names the profile `{name}`, which neither ~/.aws/credentials nor ~/.aws/config holds"
        )));
    }
    let mut out = BTreeMap::new();
    for section in [config, credentials].into_iter().flatten() {
        for (k, v) in section {
            let key = match k.as_str() {
                "aws_access_key_id" => "aws_access_key_id",
                "aws_secret_access_key" => "aws_secret_access_key",
                "aws_session_token" => "aws_session_token",
                "region" => "aws_region",
                "endpoint_url" => "aws_endpoint_url",
                _ => continue,
            };
            out.insert(key.to_string(), v);
        }
    }
    Ok(out)
}

/// An S3 store for `bucket`: the environment's settings, then the profile's where the
/// environment is silent, then our timeouts and retries where neither says.
fn s3_store(
    bucket: &str,
    env: &BTreeMap<String, String>,
    files: &ProfileFiles,
) -> Result<object_store::aws::AmazonS3, ObjectError> {
    let mut settings: BTreeMap<String, String> = profile_settings(env, files)?;
    for (k, v) in env {
        settings.insert(k.to_ascii_lowercase(), v.clone());
    }
    let has = |k: &str| settings.get(k).is_some_and(|v| !v.is_empty());
    let truthy = |k: &str| {
        settings
            .get(k)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
    };
    let metadata_allowed = settings
        .get("aws_ec2_metadata_disabled")
        .is_some_and(|v| v.eq_ignore_ascii_case("false"));
    // The pairs the S3 client needs for each source of credentials; with anything less it
    // falls through to the instance-metadata service.
    let signed_somehow = has("aws_access_key_id")
        || truthy("aws_skip_signature")
        || (has("aws_web_identity_token_file") && has("aws_role_arn"))
        || has("aws_container_credentials_relative_uri")
        || (has("aws_container_credentials_full_uri")
            && has("aws_container_authorization_token_file"))
        || metadata_allowed;
    if !signed_somehow {
        return Err(ObjectError::NoCredentials(format!(
            "no credentials for the bucket `{bucket}` in the server's environment"
        )));
    }
    if has("aws_access_key_id") && !has("aws_secret_access_key") {
        return Err(ObjectError::NoCredentials(format!(
            "AWS_ACCESS_KEY_ID is set for the bucket `{bucket}` but AWS_SECRET_ACCESS_KEY is not"
        )));
    }
    let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
    for (k, v) in &settings {
        // Keys object_store does not know (AWS_PROFILE, AWS_EC2_METADATA_DISABLED) are ours.
        if let Ok(key) = k.parse::<AmazonS3ConfigKey>() {
            if matches!(key, AmazonS3ConfigKey::Bucket) {
                continue;
            }
            builder = builder.with_config(key, v);
        }
    }
    if !metadata_allowed {
        // Never the link-local metadata service: a discard port on loopback, refused at once.
        builder = builder.with_config(AmazonS3ConfigKey::MetadataEndpoint, "http://127.0.0.1:9");
    }
    if !has("aws_region") && !has("aws_default_region") {
        builder = builder.with_config(AmazonS3ConfigKey::Region, "us-east-1");
    }
    if !has("aws_connect_timeout") && !has("connect_timeout") {
        builder = builder.with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            format!("{}s", CONNECT_TIMEOUT.as_secs()),
        );
    }
    if !has("aws_timeout") && !has("timeout") {
        builder = builder.with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            format!("{}s", TOTAL_TIMEOUT.as_secs()),
        );
    }
    let retry = RetryConfig {
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
        ..RetryConfig::default()
    };
    // The builder's error may quote a setting's value (an endpoint URL with user
    // information), so only the name of a setting it did not know is said.
    builder.with_retry(retry).build().map_err(|e| {
        let which = match &e {
            object_store::Error::UnknownConfigurationKey { key, .. } => {
                format!(": it does not know the setting `{key}`")
            }
            _ => String::new(),
        };
        ObjectError::Other(format!(
            "the S3 store for `{bucket}` cannot be made from the server's AWS_* settings and profile{which}; check AWS_ENDPOINT_URL, AWS_REGION and the other settings"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_credentials_is_refused_before_any_request() {
        let e = s3_store("tally-data", &env(&[]), &ProfileFiles::default()).unwrap_err();
        assert!(matches!(e, ObjectError::NoCredentials(_)), "{e:?}");
        assert!(e.fix().contains("AWS_PROFILE"));
        let half = s3_store(
            "tally-data",
            &env(&[("AWS_ACCESS_KEY_ID", "AKIA")]),
            &ProfileFiles::default(),
        )
        .unwrap_err();
        assert!(half.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{half}");
        // Half of a pair would fall through to the instance-metadata service: refused.
        for lone in [
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        ] {
            let e =
                s3_store("tally-data", &env(&[(lone, "x")]), &ProfileFiles::default()).unwrap_err();
            assert!(matches!(e, ObjectError::NoCredentials(_)), "{lone}: {e:?}");
        }
        assert!(
            s3_store(
                "tally-data",
                &env(&[
                    ("AWS_WEB_IDENTITY_TOKEN_FILE", "/run/token"),
                    ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r")
                ]),
                &ProfileFiles::default()
            )
            .is_ok()
        );
    }

    #[test]
    fn a_named_profile_gives_credentials_region_and_endpoint() {
        let files = ProfileFiles {
            credentials: Some(
                "[default]\naws_access_key_id = A\naws_secret_access_key = B\n[tally]\naws_access_key_id=C\naws_secret_access_key = D\n"
                    .into(),
            ),
            config: Some(
                "[default]\nregion = us-west-2\n[profile tally]\nregion = ap-northeast-1\nendpoint_url = http://127.0.0.1:9000\n"
                    .into(),
            ),
        };
        let s = profile_settings(&env(&[("AWS_PROFILE", "tally")]), &files).unwrap();
        assert_eq!(s["aws_access_key_id"], "C");
        assert_eq!(s["aws_secret_access_key"], "D");
        assert_eq!(s["aws_region"], "ap-northeast-1");
        assert_eq!(s["aws_endpoint_url"], "http://127.0.0.1:9000");
        let d = profile_settings(&env(&[]), &files).unwrap();
        assert_eq!(d["aws_access_key_id"], "A");
        assert_eq!(d["aws_region"], "us-west-2");
        let missing = profile_settings(&env(&[("AWS_PROFILE", "nope")]), &files).unwrap_err();
        assert!(missing.to_string().contains("`nope`"), "{missing}");
        // A profile makes a store; the environment wins over it.
        assert!(s3_store("tally-data", &env(&[("AWS_PROFILE", "tally")]), &files).is_ok());
    }
}
