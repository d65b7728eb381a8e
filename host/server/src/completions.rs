//! `tally completions SHELL`: clap's completion script for the shell, and, for bash, zsh and
//! fish, the dataset ids of the datasets directory completed where a command takes one
//! (`tally inspect <TAB>`). The ids are asked of `tally __datasets` when the user presses TAB,
//! with the `--datasets DIR` the command line gives (default `datasets`), so a dataset
//! dropped into the folder is offered at once.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

/// The commands whose first argument is a dataset id.
const TAKE_AN_ID: &[&str] = &["inspect", "query", "summarize", "cite", "add", "fetch"];
/// The most ids offered (a folder of more is not completed further).
const MAX_IDS: usize = 10_000;

/// Writes the completion script for `shell` to `out`.
pub fn write(
    shell: clap_complete::Shell,
    command: &mut clap::Command,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(shell, command, "tally", &mut script);
    let script = String::from_utf8_lossy(&script);
    let script = match shell {
        clap_complete::Shell::Bash => format!("{script}\n{}", bash()),
        clap_complete::Shell::Zsh => zsh(&script),
        clap_complete::Shell::Fish => format!("{script}\n{}", fish()),
        // Elvish and PowerShell: clap's script as it is (options and commands, no ids).
        _ => script.into_owned(),
    };
    out.write_all(script.as_bytes())
}

/// The script for the `Cli` of this binary.
pub fn print<C: CommandFactory>(shell: clap_complete::Shell) -> std::io::Result<()> {
    write(shell, &mut C::command(), &mut std::io::stdout().lock())
}

fn commands(separator: &str) -> String {
    TAKE_AN_ID.join(separator)
}

fn bash() -> String {
    format!(
        r#"# Dataset ids of the datasets directory (`--datasets DIR`, default `datasets`), asked of
# `tally __datasets` at each TAB, after a command that takes one.
_tally_dataset_ids() {{
    local i datasets=datasets
    for ((i = 1; i < ${{#COMP_WORDS[@]}}; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --datasets) datasets="${{COMP_WORDS[i + 1]}}" ;;
            --datasets=*) datasets="${{COMP_WORDS[i]#--datasets=}}" ;;
        esac
    done
    "${{COMP_WORDS[0]}}" __datasets --datasets "$datasets" 2>/dev/null
}}

_tally_with_dataset_ids() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD - 1]}}"
    case "$prev" in
        {cases})
            if [[ "$cur" != -* ]]; then
                local IFS=$'\n'
                COMPREPLY=($(compgen -W "$(_tally_dataset_ids)" -- "$cur"))
                if [[ ${{#COMPREPLY[@]}} -gt 0 || "$prev" != add ]]; then
                    return 0
                fi
            fi
            ;;
    esac
    _tally "$@"
}}

complete -F _tally_with_dataset_ids -o bashdefault -o default tally
"#,
        cases = commands("|")
    )
}

fn zsh(script: &str) -> String {
    let ids = r#"
# Dataset ids of the datasets directory (`--datasets DIR`, default `datasets`), asked of
# `tally __datasets` at each TAB, where a command takes one.
_tally_dataset_ids() {
    local datasets=datasets i
    for ((i = 1; i <= $#words; i++)); do
        case $words[i] in
            --datasets) datasets=$words[i+1] ;;
            --datasets=*) datasets=${words[i]#--datasets=} ;;
        esac
    done
    local -a ids
    ids=(${(f)"$($words[1] __datasets --datasets "$datasets" 2>/dev/null)"})
    compadd -a ids
}
"#;
    let mut out = String::with_capacity(script.len() + ids.len());
    let mut inserted = false;
    for line in script.split_inclusive('\n') {
        // The positional `dataset_id` of each command: completed with the ids.
        if line.starts_with("':dataset_id") && line.trim_end().ends_with(":_default' \\") {
            out.push_str(&line.replacen(":_default' \\", ":_tally_dataset_ids' \\", 1));
        } else {
            out.push_str(line);
        }
        if !inserted && line.starts_with("autoload -U is-at-least") {
            out.push_str(ids);
            inserted = true;
        }
    }
    out
}

fn fish() -> String {
    format!(
        r#"# Dataset ids of the datasets directory (`--datasets DIR`, default `datasets`), asked of
# `tally __datasets` at each TAB, after a command that takes one.
function __fish_tally_dataset_ids
    set -l words (commandline -opc)
    set -l datasets datasets
    for i in (seq (count $words))
        switch $words[$i]
            case --datasets
                set -l next (math $i + 1)
                set datasets $words[$next]
            case '--datasets=*'
                set datasets (string replace -- --datasets= '' $words[$i])
        end
    end
    $words[1] __datasets --datasets $datasets 2>/dev/null
end

function __fish_tally_wants_dataset_id
    set -l words (commandline -opc)
    contains -- $words[-1] {commands}
end

complete -c tally -n __fish_tally_wants_dataset_id -f -a "(__fish_tally_dataset_ids)" -d dataset
"#,
        commands = commands(" ")
    )
}

/// `tally __datasets`: the ids of the dataset folders of `datasets` (folders holding a
/// `dataset.yaml`), one a line, sorted; nothing when the directory cannot be read (a
/// completion has no one to say it to).
pub fn list_ids(datasets: &Path, out: &mut dyn Write) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(datasets) else {
        return Ok(());
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| {
            !name.starts_with('.')
                && !name.chars().any(|c| c.is_whitespace() || c.is_control())
                && datasets
                    .join(name)
                    .join(tally_ingest::DEFINITION_FILE)
                    .is_file()
        })
        .take(MAX_IDS)
        .collect();
    ids.sort();
    for id in ids {
        writeln!(out, "{id}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(shell: clap_complete::Shell) -> String {
        let mut command = clap::Command::new("tally")
            .subcommand(
                clap::Command::new("inspect").arg(clap::Arg::new("dataset_id").required(true)),
            )
            .subcommand(clap::Command::new("list"));
        let mut out = Vec::new();
        write(shell, &mut command, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_shell_completes_ids_where_a_command_takes_one() {
        let bash = script(clap_complete::Shell::Bash);
        assert!(bash.contains("complete -F _tally_with_dataset_ids"));
        assert!(bash.contains("inspect|query|summarize|cite|add|fetch)"));
        let zsh = script(clap_complete::Shell::Zsh);
        assert!(zsh.contains("':dataset_id:_tally_dataset_ids' \\"), "{zsh}");
        assert!(!zsh.contains("':dataset_id:_default'"));
        assert!(
            zsh.find("_tally_dataset_ids() {").unwrap() < zsh.find("compdef _tally tally").unwrap()
        );
        let fish = script(clap_complete::Shell::Fish);
        assert!(fish.contains("contains -- $words[-1] inspect query summarize cite add fetch"));
    }

    #[test]
    fn at_most_max_ids_are_offered() {
        let dir = std::env::temp_dir().join(format!("tally-many-ids-{}", std::process::id()));
        for i in 0..=MAX_IDS {
            let d = dir.join(format!("d{i:05}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("dataset.yaml"), "").unwrap();
        }
        let mut out = Vec::new();
        list_ids(&dir, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), MAX_IDS);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ids_are_the_folders_with_a_definition() {
        let dir = std::env::temp_dir().join(format!("tally-ids-{}", std::process::id()));
        for (name, yaml) in [
            ("b", true),
            ("a", true),
            ("no-def", false),
            (".hidden", true),
        ] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            if yaml {
                std::fs::write(dir.join(name).join("dataset.yaml"), "title: t\n").unwrap();
            }
        }
        let mut out = Vec::new();
        list_ids(&dir, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a\nb\n");
        let mut out = Vec::new();
        list_ids(&dir.join("missing"), &mut out).unwrap();
        assert!(out.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
