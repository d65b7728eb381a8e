//! Staging folders (`.tally-add-<id>-<pid>`): those of killed adds are removed as the next
//! add or fetch starts (whatever it goes on to do) and by `remove_stale_staging`, which
//! `tally serve` calls as it starts; that of an add still running never is.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tally_ingest::{Silent, add, remove_stale_staging};

use crate::common::options;

/// The process id of a process that has ended.
fn ended_pid() -> u32 {
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .arg("--list")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("a child process");
    let pid = child.id();
    child.wait().expect("it ends");
    pid
}

fn staging(datasets: &Path, name: &str) -> PathBuf {
    let dir = datasets.join(name);
    std::fs::create_dir(&dir).expect("staging folder");
    std::fs::write(dir.join("data.parquet"), b"half a file").expect("half a file");
    dir
}

#[test]
fn a_killed_adds_staging_folder_is_removed_when_the_next_add_starts_even_one_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let abandoned = staging(dir.path(), &format!(".tally-add-x-{}", ended_pid()));
    let fetched = staging(dir.path(), &format!(".tally-add-fetch-y-{}", ended_pid()));
    // Refused before it writes anything of its own: the leftovers go all the same.
    let bad = dir.path().join("ragged.csv");
    std::fs::write(&bad, b"a,b\n1\n").expect("input");
    add(&options(dir.path(), "z", &bad), &Silent).expect_err("ragged");
    assert!(!abandoned.exists(), "an add's leftovers are removed");
    assert!(!fetched.exists(), "a fetch's leftovers too");
}

#[test]
fn remove_stale_staging_keeps_the_folder_of_a_running_add_and_returns_what_it_removed() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A live process (a child that waits on its input) and an ended one.
    let mut running = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("a running process");
    let live = staging(dir.path(), &format!(".tally-add-live-{}", running.id()));
    let dead = staging(dir.path(), &format!(".tally-add-dead-{}", ended_pid()));
    // Not a staging folder, and a dataset: never touched.
    let other = staging(dir.path(), ".tally-other-1");
    let dataset = staging(dir.path(), "survey");
    // A folder held by its lock: kept whatever its name says, removed once the lock is gone.
    let locked = staging(dir.path(), &format!(".tally-add-locked-{}", ended_pid()));
    let lock = std::fs::File::create(locked.join(".lock")).expect("lock file");
    lock.lock().expect("locked");
    // A folder whose owner cannot be told (no process id in its name): kept for a day.
    let young = staging(dir.path(), ".tally-add-young");
    let old = staging(dir.path(), ".tally-add-old");
    let day_ago = SystemTime::now() - Duration::from_secs(25 * 60 * 60);
    std::fs::File::open(&old)
        .and_then(|f| f.set_modified(day_ago))
        .expect("an old folder");

    let mut removed = remove_stale_staging(dir.path());
    removed.sort();
    let mut expected = vec![dead.clone(), old.clone()];
    expected.sort();
    assert_eq!(removed, expected);
    for kept in [&live, &other, &dataset, &locked, &young] {
        assert!(kept.exists(), "{} is kept", kept.display());
    }

    drop(lock);
    assert_eq!(remove_stale_staging(dir.path()), vec![locked.clone()]);
    running.kill().expect("stopped");
    running.wait().expect("ended");
    assert_eq!(remove_stale_staging(dir.path()), vec![live.clone()]);
    assert!(remove_stale_staging(&dir.path().join("missing")).is_empty());
}

#[test]
fn an_add_running_beside_a_sweep_keeps_its_staging_folder() {
    // Each add holds the lock file of its staging folder while it writes: a sweep started by
    // another add (or by `tally serve`) must find it held.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rows = String::from("id,n\n");
    for i in 0..200_000 {
        rows.push_str(&format!("{i},{}\n", i % 7));
    }
    let f = dir.path().join("rows.csv");
    std::fs::write(&f, rows).expect("input");
    let datasets = dir.path().to_path_buf();
    let adding = std::thread::spawn({
        let f = f.clone();
        let datasets = datasets.clone();
        move || add(&options(&datasets, "big", &f), &Silent)
    });
    let mut seen = false;
    while !adding.is_finished() {
        let staged: Vec<PathBuf> = std::fs::read_dir(&datasets)
            .expect("datasets")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(".tally-add-big-"))
            })
            .collect();
        if !staged.is_empty() {
            seen = true;
            let removed = remove_stale_staging(&datasets);
            assert!(
                removed.is_empty(),
                "a running add's folder was removed: {removed:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let summary = adding.join().expect("the add").expect("converted");
    assert_eq!(summary.rows, 200_000);
    assert!(seen, "the add's staging folder was seen while it ran");
    assert!(
        !datasets.join("big/.lock").exists(),
        "the lock file does not end up in the dataset"
    );
}
