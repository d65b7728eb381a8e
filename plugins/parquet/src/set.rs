//! Datasets of several Parquet files: a glob (`data/*.parquet`, `parts/**/*.parquet`) or a
//! folder read as a Hive-partitioned tree (`year=2024/ministry=総務省/part-0.parquet`).
//!
//! The files are found by walking the dataset folder (never outside it: `..` and absolute
//! patterns are refused by the definition reader, symbolic links to folders are not
//! followed), in a fixed order (by path), so the rows of a set always come in the same order.
//! Path segments `key=value` between the folder and a file are partition values; every file of
//! a set must have the same keys in the same order.

use std::path::Path;

/// Folders deeper than this below the dataset folder are not searched.
pub const MAX_DEPTH: usize = 8;
/// A set of more files than this is refused (each file is a footer to read and hash).
pub const MAX_FILES: usize = 10_000;
/// The value Hive writes for a null partition value.
pub const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// One file of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Relative to the dataset folder, with `/` between folders.
    pub relative: String,
    /// The file's partition values, in the order of [`FileSet::keys`] (`None`: null).
    pub values: Vec<Option<String>>,
}

/// The files a `data_file` pattern names, with their partition values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSet {
    /// The partition keys (Hive `key=value` folders), outermost first.
    pub keys: Vec<String>,
    /// Sorted by path.
    pub parts: Vec<Part>,
}

/// Why a pattern names no usable set of files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    #[error("no Parquet file matches `{0}`")]
    Empty(String),
    #[error("`{pattern}` matches more than {MAX_FILES} files")]
    TooMany { pattern: String },
    #[error(
        "the files of `{pattern}` are not partitioned alike: `{first}` has {} but `{other}` has {}",
        keys_text(first_keys),
        keys_text(other_keys)
    )]
    Partitions {
        pattern: String,
        first: String,
        first_keys: Vec<String>,
        other: String,
        other_keys: Vec<String>,
    },
}

fn keys_text(keys: &[String]) -> String {
    if keys.is_empty() {
        "no partition folders".to_string()
    } else {
        format!("partition keys ({})", keys.join(", "))
    }
}

/// Whether `data_file` names a set of files (a pattern) rather than one file: it holds `*` or
/// `?`, or ends with `/`. A plain name that is a folder is a set too ([`expand`] decides).
pub fn is_pattern(data_file: &str) -> bool {
    data_file.contains(['*', '?']) || data_file.ends_with('/')
}

/// The files of the dataset folder `folder` that `pattern` names. A folder (`data/` or `data`)
/// stands for every `.parquet` file below it. Hidden files and folders (`.x`, and `_x` as
/// Spark and Hive write `_SUCCESS` and `_temporary`) are skipped.
pub fn expand(folder: &Path, pattern: &str) -> Result<FileSet, SetError> {
    let trimmed = pattern.trim_end_matches('/');
    let glob = if !trimmed.contains(['*', '?']) && folder.join(trimmed).is_dir() {
        if trimmed.is_empty() {
            "**/*.parquet".to_string()
        } else {
            format!("{trimmed}/**/*.parquet")
        }
    } else {
        trimmed.to_string()
    };
    let segments: Vec<&str> = glob.split('/').filter(|s| !s.is_empty()).collect();
    let mut found: Vec<String> = Vec::new();
    walk(folder, "", 0, &mut |relative| {
        if matches(&segments, &relative.split('/').collect::<Vec<_>>()) {
            found.push(relative.to_string());
        }
        found.len() <= MAX_FILES
    });
    if found.len() > MAX_FILES {
        return Err(SetError::TooMany {
            pattern: pattern.to_string(),
        });
    }
    from_paths(pattern, found)
}

/// The set of the files at `found` (relative, `/`-separated; any order), named `pattern` in
/// messages: their partition values from their folders, every file partitioned alike. What an
/// object store lists under a prefix is read the same way as a folder walked.
pub fn from_paths(pattern: &str, mut found: Vec<String>) -> Result<FileSet, SetError> {
    if found.len() > MAX_FILES {
        return Err(SetError::TooMany {
            pattern: pattern.to_string(),
        });
    }
    if found.is_empty() {
        return Err(SetError::Empty(pattern.to_string()));
    }
    found.sort();
    let mut keys: Option<(String, Vec<String>)> = None;
    let mut parts = Vec::with_capacity(found.len());
    for relative in found {
        let (these, values) = partitions(&relative);
        match &keys {
            None => keys = Some((relative.clone(), these)),
            Some((first, first_keys)) if *first_keys != these => {
                return Err(SetError::Partitions {
                    pattern: pattern.to_string(),
                    first: first.clone(),
                    first_keys: first_keys.clone(),
                    other: relative,
                    other_keys: these,
                });
            }
            Some(_) => {}
        }
        parts.push(Part { relative, values });
    }
    Ok(FileSet {
        keys: keys.map(|(_, k)| k).unwrap_or_default(),
        parts,
    })
}

/// Calls `each` with every regular file below `dir` (relative, `/`-separated) until it
/// returns false.
fn walk(dir: &Path, prefix: &str, depth: usize, each: &mut dyn FnMut(&str) -> bool) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return true;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let relative = format!("{prefix}{name}");
        if kind.is_dir() {
            if depth < MAX_DEPTH && !walk(&entry.path(), &format!("{relative}/"), depth + 1, each) {
                return false;
            }
        } else if (kind.is_file() || (kind.is_symlink() && entry.path().is_file()))
            && !each(&relative)
        {
            return false;
        }
    }
    true
}

/// Whether a path (split at `/`) matches a pattern (split at `/`): `**` matches any number of
/// folders, `*` any part of one name, `?` one character.
fn matches(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| matches(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((name, tail)) => {
                name_matches(
                    &first.chars().collect::<Vec<_>>(),
                    &name.chars().collect::<Vec<_>>(),
                ) && matches(rest, tail)
            }
            None => false,
        },
    }
}

fn name_matches(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| name_matches(rest, &name[skip..])),
        Some(('?', rest)) => !name.is_empty() && name_matches(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && name_matches(rest, &name[1..]),
    }
}

/// The partition keys and values of a file's path: its folders named `key=value`.
fn partitions(relative: &str) -> (Vec<String>, Vec<Option<String>>) {
    let mut keys = Vec::new();
    let mut values = Vec::new();
    let folders = relative.rsplit_once('/').map_or("", |(dirs, _)| dirs);
    for segment in folders.split('/') {
        if let Some((key, value)) = segment.split_once('=')
            && !key.is_empty()
        {
            keys.push(unescape(key));
            values.push((value != HIVE_NULL).then(|| unescape(value)));
        }
    }
    (keys, values)
}

/// Hive escapes `/`, `=`, `%` and other characters in partition folder names as `%XX`.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Whether every value of a partition key reads as an integer (written as integers are, no
/// leading zeros: `07` stays text), so the column is served as one.
pub fn integer_values<'a>(values: impl IntoIterator<Item = Option<&'a str>>) -> bool {
    let mut any = false;
    for v in values.into_iter().flatten() {
        let digits = v.strip_prefix('-').unwrap_or(v);
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'))
            && v != "-0";
        if !canonical || v.parse::<i64>().is_err() {
            return false;
        }
        any = true;
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, relative: &str) {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }

    fn folder() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tally-set-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn globs_match_names_and_folders() {
        assert!(matches(&["data", "*.parquet"], &["data", "a.parquet"]));
        assert!(!matches(
            &["data", "*.parquet"],
            &["data", "x", "a.parquet"]
        ));
        assert!(matches(&["**", "*.parquet"], &["a.parquet"]));
        assert!(matches(&["**", "*.parquet"], &["x", "y", "a.parquet"]));
        assert!(matches(&["part-?.parquet"], &["part-1.parquet"]));
        assert!(!matches(&["part-?.parquet"], &["part-10.parquet"]));
        assert!(!matches(&["*.parquet"], &["a.csv"]));
        assert!(is_pattern("data/*.parquet") && is_pattern("data/") && !is_pattern("a.parquet"));
    }

    #[test]
    fn a_folder_is_read_as_a_hive_tree_in_path_order() {
        let dir = folder();
        touch(&dir, "data/year=2024/ministry=A%2FB/part-0.parquet");
        touch(
            &dir,
            "data/year=2023/ministry=__HIVE_DEFAULT_PARTITION__/part-0.parquet",
        );
        touch(&dir, "data/year=2023/ministry=C/_SUCCESS");
        touch(&dir, "data/year=2023/.hidden/x.parquet");
        let set = expand(&dir, "data").unwrap();
        assert_eq!(set.keys, vec!["year", "ministry"]);
        assert_eq!(
            set.parts,
            vec![
                Part {
                    relative: "data/year=2023/ministry=__HIVE_DEFAULT_PARTITION__/part-0.parquet"
                        .into(),
                    values: vec![Some("2023".into()), None],
                },
                Part {
                    relative: "data/year=2024/ministry=A%2FB/part-0.parquet".into(),
                    values: vec![Some("2024".into()), Some("A/B".into())],
                },
            ]
        );
        assert_eq!(expand(&dir, "data/").unwrap(), set);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn sets_that_cannot_be_served_are_refused_with_their_reason() {
        let dir = folder();
        assert_eq!(
            expand(&dir, "data/*.parquet"),
            Err(SetError::Empty("data/*.parquet".into()))
        );
        touch(&dir, "data/a.parquet");
        touch(&dir, "data/year=2024/b.parquet");
        let err = expand(&dir, "data/**/*.parquet").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the files of `data/**/*.parquet` are not partitioned alike: `data/a.parquet` has no partition folders but `data/year=2024/b.parquet` has partition keys (year)"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn integer_partitions_are_written_as_integers() {
        assert!(integer_values([Some("2023"), None, Some("-4"), Some("0")]));
        assert!(!integer_values([Some("07")]));
        assert!(!integer_values([Some("2023"), Some("x")]));
        assert!(!integer_values([None]));
        assert!(!integer_values([Some("99999999999999999999")]));
    }
}
