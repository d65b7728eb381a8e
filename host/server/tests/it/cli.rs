//! The command line: the same envelope as the tools, JSON errors on stderr, exit codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn datasets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets")
}

/// Runs a command on the default datasets. The cache is on by default; each command gets a
/// user cache directory of its own (never the user's real one), so no command maps what an
/// earlier one kept unless it names the same `--cache-dir`.
fn tally(args: &[&str]) -> Output {
    let home = tempfile::tempdir().expect("cache home");
    tally_with_cache_home(args, home.path())
}

fn tally_with_cache_home(args: &[&str], cache_home: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .arg("--datasets")
        .arg(datasets())
        .arg("--compact")
        .env("XDG_CACHE_HOME", cache_home)
        .env_remove("TALLY_CACHE_DIR")
        .env_remove("TALLY_NO_CACHE")
        .output()
        .expect("tally runs")
}

/// Whether an envelope's data was mapped from the cache (said in its extract step).
fn mapped(v: &Value) -> bool {
    v["provenance"]["transformations"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| {
            t["description"]
                .as_str()
                .is_some_and(|d| d.contains("mapped from the cache"))
        })
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

fn stderr_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stderr).unwrap_or_else(|e| {
        panic!(
            "stderr is not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn summarize_with_repeated_and_json_flags() {
    let o = tally(&[
        "summarize",
        "procedures",
        "--group-by",
        "[\"所管府省庁\"]",
        "--metrics",
        "count",
        "--metrics",
        "avg:オンライン率",
        "--limit",
        "2",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = stdout_json(&o);
    assert_eq!(
        v["data"]["columns"],
        serde_json::json!(["所管府省庁", "count", "avg:オンライン率"])
    );
    assert_eq!(v["data"]["rows"][0][1], 13645);
    assert!(
        v["provenance"]["sources"][0]["contentHash"]
            .as_str()
            .is_some_and(|h| h.starts_with("sha256:"))
    );
}

#[test]
fn query_with_where_order_and_paging() {
    // One user's cache across the two commands, as on any machine: cursors are signed with
    // the key kept in the cache of the datasets directory.
    let home = tempfile::tempdir().expect("cache home");
    let tally = |args: &[&str]| tally_with_cache_home(args, home.path());
    let o = tally(&[
        "query",
        "procedures",
        "--where",
        r#"{"手続類型": ["1 申請等"], "総手続件数": {"$gte": 1000}}"#,
        "--order-by",
        "-総手続件数",
        "--select",
        "手続ID",
        "--select",
        "総手続件数",
        "--limit",
        "3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = stdout_json(&o);
    let rows = v["data"]["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3);
    let counts: Vec<i64> = rows.iter().map(|r| r[1].as_i64().expect("count")).collect();
    assert!(
        counts.windows(2).all(|w| w[0] >= w[1]),
        "descending: {counts:?}"
    );
    let cursor = v["data"]["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_string();
    let next = tally(&[
        "query",
        "procedures",
        "--where",
        r#"{"手続類型": ["1 申請等"], "総手続件数": {"$gte": 1000}}"#,
        "--order-by",
        "-総手続件数",
        "--select",
        "手続ID",
        "--select",
        "総手続件数",
        "--limit",
        "3",
        "--cursor",
        &cursor,
    ]);
    let n = stdout_json(&next);
    assert_eq!(n["data"]["offset"], 3);
}

#[test]
fn bad_input_exits_1_and_unknown_dataset_exits_4() {
    let o = tally(&["summarize", "procedures", "--group-by", "総手続件数"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr_json(&o)["error"]["code"], "role_mismatch");

    let o = tally(&["query", "procedures", "--where", "{not json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr_json(&o)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not valid JSON"))
    );

    let o = tally(&["inspect", "budget2024"]);
    assert_eq!(o.status.code(), Some(4));
    let candidates = stderr_json(&o)["error"]["candidates"].clone();
    assert!(
        candidates
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["name"] == "procedures")),
        "{candidates}"
    );
    assert!(o.stdout.is_empty(), "nothing on stdout when refused");
}

#[test]
fn list_cites_every_dataset() {
    let o = tally(&["list"]);
    assert!(o.status.success());
    let v = stdout_json(&o);
    let refs: Vec<&str> = v["data"]["datasets"]
        .as_array()
        .expect("datasets")
        .iter()
        .filter_map(|d| d["sourceRef"].as_str())
        .collect();
    let ids: Vec<&str> = v["provenance"]["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(!refs.is_empty());
    assert!(refs.iter().all(|r| ids.contains(r)));
}

#[test]
fn check_validates_definitions_against_their_data() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = tmp.path().join("good");
    std::fs::create_dir_all(&good).expect("folder");
    std::fs::copy(
        datasets().join("procedures/dataset.yaml"),
        good.join("dataset.yaml"),
    )
    .expect("yaml");
    std::fs::copy(
        datasets().join("procedures/data.parquet"),
        good.join("data.parquet"),
    )
    .expect("data");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_tally"))
            .arg("check")
            .arg(tmp.path())
            .output()
            .expect("tally check runs")
    };
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));

    // A definition naming a column the data does not have: refused, with file, line and key.
    let bad = tmp.path().join("bad");
    std::fs::create_dir_all(&bad).expect("folder");
    std::fs::copy(
        datasets().join("procedures/data.parquet"),
        bad.join("data.parquet"),
    )
    .expect("data");
    std::fs::write(
        bad.join("dataset.yaml"),
        "title: t\nfields:\n- {name: 手続ID, role: id}\n- {name: 存在しない列, role: dim}\n",
    )
    .expect("yaml");
    // A truncated Parquet file: refused, naming the file (never a machine path).
    let cut = tmp.path().join("cut");
    std::fs::create_dir_all(&cut).expect("folder");
    std::fs::copy(
        datasets().join("procedures/dataset.yaml"),
        cut.join("dataset.yaml"),
    )
    .expect("yaml");
    let bytes = std::fs::read(datasets().join("procedures/data.parquet")).expect("data");
    std::fs::write(cut.join("data.parquet"), &bytes[..bytes.len() / 2]).expect("truncated");

    let o = run();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("bad/dataset.yaml:4:")
            && out.contains("fields[1].name")
            && out.contains("存在しない列"),
        "{out}"
    );
    assert!(
        out.contains("cut/dataset.yaml")
            && out.contains("`data.parquet` is not a readable Parquet file"),
        "{out}"
    );
    assert!(out.contains("1 dataset(s) valid, 2 invalid"), "{out}");
}

/// With `--cache-dir`, the first command prepares the data and keeps it; the next maps it
/// and answers the same.
#[test]
fn a_cache_dir_keeps_the_prepared_data_for_the_next_command() {
    let cache = tempfile::tempdir().expect("cache dir");
    let dir = cache.path().to_str().expect("utf-8 path");
    let args = [
        "summarize",
        "procedures",
        "--group-by",
        "所管府省庁",
        "--metrics",
        "count",
        "--cache-dir",
        dir,
    ];
    let first = tally(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first = stdout_json(&first);
    assert!(!mapped(&first));
    let entries = std::fs::read_dir(cache.path())
        .expect("the cache directory was made")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".arrow"))
        .count();
    assert_eq!(entries, 1, "the process wrote its entry before it ended");
    let second = tally(&args);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let second = stdout_json(&second);
    assert!(mapped(&second), "{second}");
    assert_eq!(first["data"], second["data"]);
}

/// Without `--cache-dir`, prepared data is kept in the user's cache directory, in a folder of
/// its own for each datasets directory; `--no-cache` keeps nothing.
#[test]
fn the_cache_is_on_by_default_in_the_users_cache_directory() {
    let home = tempfile::tempdir().expect("cache home");
    let args = ["query", "procedures", "--limit", "1"];
    let first = tally_with_cache_home(&args, home.path());
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(!mapped(&stdout_json(&first)));
    let folders: Vec<PathBuf> = std::fs::read_dir(home.path().join("tally"))
        .expect("the cache was made under $XDG_CACHE_HOME/tally")
        .flatten()
        .map(|e| e.path())
        .collect();
    let [folder] = &folders[..] else {
        panic!("one folder for the datasets directory: {folders:?}");
    };
    let name = folder.file_name().unwrap_or_default().to_string_lossy();
    assert!(name.starts_with("datasets-"), "{name}");
    let second = stdout_json(&tally_with_cache_home(&args, home.path()));
    assert!(mapped(&second), "{second}");

    let other = tempfile::tempdir().expect("cache home");
    let mut off = args.to_vec();
    off.push("--no-cache");
    let o = tally_with_cache_home(&off, other.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!mapped(&stdout_json(&o)));
    assert!(!other.path().join("tally").exists(), "--no-cache kept data");
}

/// With a cache, compiled wasm components are kept in its `code` folder: the next start
/// loads the compiled code instead of compiling the component again, and answers the same.
#[test]
fn compiled_plugins_are_kept_with_the_cache() {
    let cache = tempfile::tempdir().expect("cache dir");
    let dir = cache.path().to_str().expect("utf-8 path");
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args([
                "query",
                "guide",
                "--limit",
                "2",
                "--compact",
                "--cache-dir",
                dir,
            ])
            .arg("--datasets")
            .arg(datasets())
            .env("TALLY_LOG", "tally_plugin_host=debug")
            .env_remove("TALLY_NO_CACHE")
            .output()
            .expect("tally runs");
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{log}");
        (stdout_json(&out), log)
    };
    let (first, log) = run();
    assert!(log.contains("compiled built-in plugin"), "{log}");
    let code: Vec<PathBuf> = std::fs::read_dir(cache.path().join("code"))
        .expect("a code folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(code.len(), 1, "{code:?}");
    let (second, log) = run();
    assert!(
        log.contains("loaded the compiled code of built-in plugin"),
        "{log}"
    );
    assert!(!log.contains("compiled built-in plugin"), "{log}");
    assert_eq!(first["data"], second["data"]);

    // A damaged entry is not run: the component is compiled again and the entry replaced.
    let mut bytes = std::fs::read(&code[0]).expect("entry");
    let at = bytes.len() - 100;
    bytes[at] ^= 1;
    std::fs::write(&code[0], &bytes).expect("damaged");
    let (third, log) = run();
    assert!(log.contains("checksum does not match"), "{log}");
    assert!(log.contains("compiled built-in plugin"), "{log}");
    assert_eq!(first["data"], third["data"]);
    let (_, log) = run();
    assert!(log.contains("loaded the compiled code"), "{log}");
}

#[test]
fn completions_for_each_shell_and_a_clear_refusal_otherwise() {
    for (shell, marker) in [
        ("bash", "_tally()"),
        ("zsh", "#compdef tally"),
        ("fish", "complete -c tally"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(["completions", shell])
            .output()
            .expect("tally runs");
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script:.200}");
        for sub in ["summarize", "inspect", "serve", "add"] {
            assert!(script.contains(sub), "{shell} completes {sub}");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["completions", "nosh"])
        .output()
        .expect("tally runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bash, elvish, fish, powershell, zsh"));
}

#[test]
fn exit_codes_tell_usage_setup_and_input_apart() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(args)
            .env("TALLY_NO_CACHE", "1")
            .output()
            .expect("tally runs")
    };
    // 2: the command line itself.
    let o = run(&["summarize", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--no-such-flag"));
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    // 5: the setup (a datasets directory that is not there), for every command.
    let missing = "/nonexistent/tally-datasets";
    for args in [
        &["list", "--datasets", missing][..],
        &["serve", "--datasets", missing],
        &["check", missing],
    ] {
        let o = run(args);
        assert_eq!(
            o.status.code(),
            Some(5),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // 0 for help and version.
    assert_eq!(run(&["--version"]).status.code(), Some(0));
    assert_eq!(run(&["summarize", "--help"]).status.code(), Some(0));
}

#[test]
fn boolean_environment_variables_take_1_and_0() {
    for (var, value) in [
        ("TALLY_NO_CACHE", "1"),
        ("TALLY_ALLOW_NATIVE", "1"),
        ("TALLY_NO_CACHE", "0"),
        ("TALLY_ALLOW_NATIVE", "false"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(["list", "--compact", "--datasets"])
            .arg(datasets())
            .env(var, value)
            .output()
            .expect("tally runs");
        assert!(
            o.status.success(),
            "{var}={value}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // The effect: TALLY_NO_CACHE=1 keeps nothing in the cache directory, =0 keeps the
    // prepared data there (and is no conflict with a cache directory).
    for (value, kept) in [("1", false), ("0", true)] {
        let cache = tempfile::tempdir().expect("a temporary directory");
        let o = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args([
                "summarize",
                "procedures",
                "--metrics",
                "count",
                "--datasets",
            ])
            .arg(datasets())
            .env("TALLY_NO_CACHE", value)
            .env("TALLY_CACHE_DIR", cache.path())
            .output()
            .expect("tally runs");
        assert!(
            o.status.success(),
            "TALLY_NO_CACHE={value}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let entries = std::fs::read_dir(cache.path())
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(
            entries > 0,
            kept,
            "TALLY_NO_CACHE={value}: {entries} entries"
        );
    }
}

#[test]
fn global_flags_come_before_or_after_the_subcommand() {
    let before = Command::new(env!("CARGO_BIN_EXE_tally"))
        .arg("--compact")
        .arg("--datasets")
        .arg(datasets())
        .args(["summarize", "procedures", "--metrics", "count"])
        .env("TALLY_NO_CACHE", "1")
        .output()
        .expect("tally runs");
    assert!(
        before.status.success(),
        "{}",
        String::from_utf8_lossy(&before.stderr)
    );
    let after = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args([
            "summarize",
            "procedures",
            "--metrics",
            "count",
            "--compact",
            "--datasets",
        ])
        .arg(datasets())
        .env("TALLY_NO_CACHE", "1")
        .output()
        .expect("tally runs");
    assert!(after.status.success());
    let lines =
        |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).trim().lines().count();
    // --compact took effect both ways: one line.
    assert_eq!((lines(&before), lines(&after)), (1, 1));
    let value = |o: &std::process::Output| {
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("JSON")["data"]["rows"]
            .clone()
    };
    assert_eq!(value(&before), value(&after));
}

#[test]
fn http_listens_on_a_loopback_name() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args([
            "serve",
            "--http",
            "localhost:0",
            "--watch",
            "off",
            "--datasets",
        ])
        .arg(datasets())
        .env("TALLY_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("tally runs");
    let mut line = String::new();
    BufReader::new(child.stderr.take().expect("stderr"))
        .read_line(&mut line)
        .expect("a line");
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("serving MCP at http://127.0.0.1:"), "{line}");
    // Without a port it is refused with what would work.
    let out = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["serve", "--http", "localhost"])
        .output()
        .expect("tally runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("localhost:8765"));
}
