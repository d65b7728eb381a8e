//! `tally serve`'s settings in one file (`--config FILE`, or `TALLY_CONFIG`), and every one
//! of its flags as an environment variable (`TALLY_<FLAG>`).
//!
//! The file is TOML. Its keys are the flags' long names (`max-body-bytes = 4096`; an
//! underscore reads as a dash), at the top level or in a table whose name is the first word
//! of the flag (`[oauth] issuer = …` is `--oauth-issuer`). A flag that takes no value is a
//! boolean (`no-cache = true`), a repeatable one a list (`allow-host = ["a", "b"]`). An
//! unknown key is refused with the nearest valid one.
//!
//! Precedence: the file < the environment < the command line. A flag given on the command
//! line is used as given; else its environment variable, `TALLY_` and its name in capitals
//! with underscores (`TALLY_MAX_BODY_BYTES`; a repeatable flag's values separated by commas);
//! else the file; else its default. The settings become flags placed before the command
//! line's, so every value goes through the flag's own checks and messages.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where a value came from, when not from the command line or a default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Env(String),
}

/// The command line with the settings added, and where each added flag came from.
#[derive(Debug, Default)]
pub struct Applied {
    pub args: Vec<OsString>,
    pub sources: BTreeMap<String, Source>,
}

/// The largest settings file read (a settings file is a few hundred bytes).
const MAX_SETTINGS_BYTES: usize = 1024 * 1024;

/// Flags that are about the settings themselves, not settings.
const NOT_SETTINGS: &[&str] = &["config", "print-settings", "help", "version"];

/// A flag of `tally serve`, as the settings see it.
struct Flag {
    long: String,
    /// Takes no value (a switch).
    switch: bool,
    repeatable: bool,
    /// The environment variable clap reads for it itself, if any.
    own_env: Option<String>,
}

fn flags(command: &clap::Command) -> Vec<Flag> {
    command
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?.to_string();
            if NOT_SETTINGS.contains(&long.as_str()) {
                return None;
            }
            let action = a.get_action();
            Some(Flag {
                long,
                switch: !action.takes_values(),
                repeatable: matches!(action, clap::ArgAction::Append),
                own_env: a.get_env().map(|e| e.to_string_lossy().into_owned()),
            })
        })
        .collect()
}

/// The environment variable of a flag: `TALLY_` and its name, dashes as underscores, in
/// capitals.
pub fn env_name(long: &str) -> String {
    format!("TALLY_{}", long.replace('-', "_").to_ascii_uppercase())
}

/// Whether the command line gives `--long` (as `--long`, `--long VALUE` or `--long=VALUE`).
fn given(args: &[OsString], long: &str) -> bool {
    let flag = format!("--{long}");
    let with_value = format!("--{long}=");
    args.iter().any(|a| {
        let a = a.to_string_lossy();
        a == flag || a.starts_with(&with_value)
    })
}

/// The settings file the command line names (`--config FILE` or `--config=FILE`), else
/// `TALLY_CONFIG`.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut words = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(word) = words.next() {
        if word == "--config" {
            return words.next().map(PathBuf::from);
        }
        if let Some(path) = word.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("TALLY_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Adds the settings of the environment and of the settings file to the command line of
/// `tally serve` (any other command is returned as it is).
pub fn apply(args: Vec<OsString>, command: &clap::Command) -> Result<Applied, String> {
    if args.get(1).map(|a| a.to_string_lossy()) != Some("serve".into()) {
        return Ok(Applied {
            args,
            ..Applied::default()
        });
    }
    let Some(serve) = command.find_subcommand("serve") else {
        return Ok(Applied {
            args,
            ..Applied::default()
        });
    };
    let flags = flags(serve);
    let mut added: Vec<OsString> = Vec::new();
    let mut sources = BTreeMap::new();
    // The environment, for the flags clap does not read an environment variable for itself.
    for flag in &flags {
        if flag.own_env.is_some() || given(&args, &flag.long) {
            continue;
        }
        let var = env_name(&flag.long);
        let Some(value) = std::env::var_os(&var) else {
            continue;
        };
        let value = value.to_string_lossy().into_owned();
        let before = added.len();
        push_env(&mut added, flag, &value).map_err(|e| format!("{var}: {e}"))?;
        if added.len() > before {
            sources.insert(flag.long.clone(), Source::Env(var));
        }
    }
    if let Some(path) = config_path(&args) {
        let settings = read(&path)?;
        for (key, value) in settings {
            let Some(flag) = flags.iter().find(|f| f.long == key) else {
                return Err(unknown(&path, &key, &flags));
            };
            let env_set = flag
                .own_env
                .as_ref()
                .is_some_and(|e| std::env::var_os(e).is_some());
            if given(&args, &key) || sources.contains_key(&key) || env_set {
                continue;
            }
            push_setting(&mut added, flag, &value)
                .map_err(|e| format!("{}: `{key}`: {e}", path.display()))?;
            sources.insert(key, Source::File(path.clone()));
        }
    }
    let mut out = vec![args[0].clone(), args[1].clone()];
    out.extend(added);
    out.extend_from_slice(&args[2..]);
    Ok(Applied { args: out, sources })
}

fn unknown(path: &Path, key: &str, flags: &[Flag]) -> String {
    let nearest = flags
        .iter()
        .map(|f| (strsim::levenshtein(key, &f.long), &f.long))
        .min();
    let hint = match nearest {
        Some((d, name)) if d <= 3 || name.contains(key) || key.contains(name.as_str()) => {
            format!("did you mean `{name}`?")
        }
        _ => "the keys are the long names of `tally serve`'s flags (tally serve --help), e.g. `http`, `datasets`, `max-body-bytes`".to_string(),
    };
    format!(
        "{}: `{key}` is not a setting of tally serve: {hint}",
        path.display()
    )
}

fn push_env(out: &mut Vec<OsString>, flag: &Flag, value: &str) -> Result<(), String> {
    if flag.switch {
        match value.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => out.push(format!("--{}", flag.long).into()),
            "" | "0" | "false" | "no" | "off" => {}
            other => {
                return Err(format!(
                    "`{other}` is not true or false (1, true, yes, on / 0, false, no, off)"
                ));
            }
        }
        return Ok(());
    }
    if flag.repeatable {
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            out.push(format!("--{}={part}", flag.long).into());
        }
    } else {
        out.push(format!("--{}={value}", flag.long).into());
    }
    Ok(())
}

fn scalar(value: &toml_edit::Value) -> Result<String, String> {
    match value {
        toml_edit::Value::String(s) => Ok(s.value().clone()),
        toml_edit::Value::Integer(i) => Ok(i.value().to_string()),
        toml_edit::Value::Float(f) => Ok(f.value().to_string()),
        toml_edit::Value::Boolean(b) => Ok(b.value().to_string()),
        other => Err(format!(
            "a {} where a string or a number goes",
            other.type_name()
        )),
    }
}

fn push_setting(
    out: &mut Vec<OsString>,
    flag: &Flag,
    value: &toml_edit::Value,
) -> Result<(), String> {
    if flag.switch {
        return match value.as_bool() {
            Some(true) => {
                out.push(format!("--{}", flag.long).into());
                Ok(())
            }
            Some(false) => Ok(()),
            None => Err("a switch: write `true` or `false`".to_string()),
        };
    }
    match value {
        toml_edit::Value::Array(list) if flag.repeatable => {
            for item in list.iter() {
                out.push(format!("--{}={}", flag.long, scalar(item)?).into());
            }
            Ok(())
        }
        toml_edit::Value::Array(_) => Err("takes one value, not a list".to_string()),
        other => {
            out.push(format!("--{}={}", flag.long, scalar(other)?).into());
            Ok(())
        }
    }
}

/// The file's settings by flag name: `key = value` at the top level, `[word] rest = value`
/// as `word-rest`.
fn read(path: &Path) -> Result<Vec<(String, toml_edit::Value)>, String> {
    let text = tally_semantic::files::read_small(path, MAX_SETTINGS_BYTES)
        .map_err(|e| format!("cannot read the settings file {}: {e}", path.display()))?;
    let document: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| format!("{}: not valid TOML: {e}", path.display()))?;
    let mut out = Vec::new();
    let name = |prefix: Option<&str>, key: &str| {
        let key = key.replace('_', "-");
        match prefix {
            Some(p) => format!("{}-{key}", p.replace('_', "-")),
            None => key,
        }
    };
    for (key, item) in document.iter() {
        match item {
            toml_edit::Item::Value(v) => out.push((name(None, key), v.clone())),
            toml_edit::Item::Table(table) => {
                for (inner, item) in table.iter() {
                    match item {
                        toml_edit::Item::Value(v) => out.push((name(Some(key), inner), v.clone())),
                        _ => {
                            return Err(format!(
                                "{}: `{key}.{inner}`: tables go one level deep (`[{key}]` then `{inner} = …`)",
                                path.display()
                            ));
                        }
                    }
                }
            }
            _ => {
                return Err(format!(
                    "{}: `{key}` is not a setting or a table of settings",
                    path.display()
                ));
            }
        }
    }
    Ok(out)
}

/// `tally serve --print-settings`: every setting as the server would run with it, as a
/// settings file (where each came from in a comment). The variables that hold secrets are
/// named, their values never shown.
pub fn print(
    matches: &clap::ArgMatches,
    command: &clap::Command,
    sources: &BTreeMap<String, Source>,
) {
    let Some(serve) = command.find_subcommand("serve") else {
        return;
    };
    let Some(("serve", m)) = matches.subcommand() else {
        return;
    };
    println!("# tally serve: the settings in effect (a settings file for --config)");
    for arg in serve.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if NOT_SETTINGS.contains(&long) {
            continue;
        }
        let id = arg.get_id().as_str();
        let values: Vec<String> = m
            .get_raw(id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let source = match (sources.get(long), m.value_source(id)) {
            (Some(Source::File(p)), _) => format!("from {}", p.display()),
            (Some(Source::Env(var)), _) => format!("from ${var}"),
            (None, Some(clap::parser::ValueSource::EnvVariable)) => format!(
                "from ${}",
                arg.get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            (None, Some(clap::parser::ValueSource::CommandLine)) => {
                "from the command line".to_string()
            }
            (None, Some(clap::parser::ValueSource::DefaultValue)) => "default".to_string(),
            _ => "not set".to_string(),
        };
        let switch = !arg.get_action().takes_values();
        let secret = long.ends_with("-env");
        let rendered = if switch {
            m.get_flag(id).to_string()
        } else if values.is_empty() {
            println!("# {long} = …  # not set");
            continue;
        } else if matches!(arg.get_action(), clap::ArgAction::Append) {
            format!(
                "[{}]",
                values
                    .iter()
                    .map(|v| toml_string(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            toml_value(&values[0])
        };
        let note = if secret {
            " (the variable is named; its value is never shown)"
        } else {
            ""
        };
        // A default is shown commented out: the printed file sets only what was set.
        let commented = if source == "default" { "# " } else { "" };
        println!("{commented}{long} = {rendered}  # {source}{note}");
    }
}

fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_value(s: &str) -> String {
    if s.parse::<i64>().is_ok() || s == "true" || s == "false" {
        s.to_string()
    } else {
        toml_string(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_name_flags_by_their_first_word() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tally.toml");
        std::fs::write(
            &path,
            "http = \"127.0.0.1:8765\"\nmax_body_bytes = 4096\nallow-host = [\"a\", \"b\"]\n[oauth]\nissuer = \"https://id.example\"\n",
        )
        .unwrap();
        let keys: Vec<String> = read(&path).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            ["http", "max-body-bytes", "allow-host", "oauth-issuer"]
        );
    }

    #[test]
    fn a_settings_file_past_its_bound_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tally.toml");
        std::fs::write(&path, "# ".repeat(MAX_SETTINGS_BYTES)).unwrap();
        let e = read(&path).unwrap_err();
        assert!(e.contains("cannot read the settings file"), "{e}");
    }

    #[test]
    fn every_flag_has_an_environment_variable() {
        assert_eq!(env_name("max-body-bytes"), "TALLY_MAX_BODY_BYTES");
        assert_eq!(env_name("oauth-issuer"), "TALLY_OAUTH_ISSUER");
    }
}
