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
/// What a dataset id may be (`tally_semantic::definition::valid_id`: 1–64 ASCII letters,
/// digits, `-`, `_` and `.`, not starting with `.`) as an extended regular expression, for the
/// scripts to check each line they read: `tally __datasets` prints nothing else, and the
/// scripts insert nothing else into the command line.
const ID_PATTERN: &str = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$";

/// Writes the completion script for `shell` to `out`.
pub fn write(
    shell: clap_complete::Shell,
    command: &mut clap::Command,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let valued = valued_flags(command);
    let mut script = Vec::new();
    clap_complete::generate(shell, command, "tally", &mut script);
    let script = String::from_utf8_lossy(&script);
    let script = match shell {
        clap_complete::Shell::Bash => format!("{script}\n{}", bash(&valued)),
        clap_complete::Shell::Zsh => zsh(&script, &valued),
        clap_complete::Shell::Fish => format!("{script}\n{}", fish(&valued)),
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

/// Every long flag of the command line that takes a value (`--datasets`, `--where`, …), in
/// any command: the scripts skip a flag's value when they look for the command and its first
/// argument, wherever the flags stand (`tally query --datasets DIR su<TAB>`,
/// `tally --datasets DIR query su<TAB>`: the binary takes flags typed before the command as
/// its own).
fn valued_flags(command: &mut clap::Command) -> Vec<String> {
    fn walk(command: &clap::Command, out: &mut std::collections::BTreeSet<String>) {
        for arg in command.get_arguments() {
            if let Some(long) = arg.get_long()
                && arg.get_action().takes_values()
            {
                out.insert(format!("--{long}"));
            }
        }
        for sub in command.get_subcommands() {
            walk(sub, out);
        }
    }
    command.build();
    let mut out = std::collections::BTreeSet::new();
    walk(command, &mut out);
    out.into_iter().collect()
}

fn bash(valued: &[String]) -> String {
    format!(
        r#"# Dataset ids of the datasets directory (`--datasets DIR`, default `datasets`), asked of
# `tally __datasets` at each TAB, where a command takes one.
_tally_dataset_ids() {{
    local i datasets=datasets
    for ((i = 1; i < ${{#COMP_WORDS[@]}}; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --datasets)
                # Bash splits `--datasets=DIR` at the `=` into three words.
                if [[ "${{COMP_WORDS[i + 1]}}" == "=" ]]; then
                    datasets="${{COMP_WORDS[i + 2]}}"
                else
                    datasets="${{COMP_WORDS[i + 1]}}"
                fi
                ;;
            --datasets=*) datasets="${{COMP_WORDS[i]#--datasets=}}" ;;
        esac
    done
    "${{COMP_WORDS[0]}}" __datasets --datasets "$datasets" 2>/dev/null
}}

# Whether the word at the cursor is a dataset id: the first argument of a command that takes
# one, wherever flags and their values stand (before the command too: the binary takes them
# as the command's own).
_tally_wants_dataset_id() {{
    local i word command="" arguments=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case "$word" in
            --*=*) ;;
            {valued})
                if [[ "${{COMP_WORDS[i + 1]}}" == "=" ]]; then
                    ((i += 2))
                else
                    ((i++))
                fi
                ;;
            -*) ;;
            *)
                if [[ -z "$command" ]]; then
                    command="$word"
                else
                    ((arguments++))
                fi
                ;;
        esac
    done
    _tally_command="$command"
    # The word at the cursor is a flag's value, or not the command's first argument.
    ((i == COMP_CWORD && arguments == 0)) || return 1
    case "$command" in
        {cases}) return 0 ;;
    esac
    return 1
}}

_tally_with_dataset_ids() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" _tally_command=""
    if [[ "$cur" != -* ]] && _tally_wants_dataset_id; then
        # Each id read as one line and matched against the typed prefix here: never
        # through `compgen -W`, which expands what it is given (a folder named
        # `$(cmd)` would run cmd). Only what a dataset id may be is offered.
        local id pattern='{pattern}'
        COMPREPLY=()
        while IFS= read -r id; do
            if [[ "$id" =~ $pattern && "$id" == "$cur"* ]]; then
                COMPREPLY+=("$id")
            fi
        done < <(_tally_dataset_ids)
        # `add` takes a new id too: with none matching, the default completion.
        if [[ ${{#COMPREPLY[@]}} -gt 0 || "$_tally_command" != add ]]; then
            return 0
        fi
    fi
    _tally "$@"
}}

complete -F _tally_with_dataset_ids -o bashdefault -o default tally
"#,
        cases = commands("|"),
        valued = valued.join("|"),
        pattern = ID_PATTERN,
    )
}

fn zsh(script: &str, valued: &[String]) -> String {
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
    # One id a line, nothing expanded; only what a dataset id may be is offered, and compadd
    # quotes what it inserts.
    local -a ids
    local id
    # The command completed (`$service`; `$words` starts at the subcommand here).
    local command=${service:-tally}
    for id in ${(f)"$($command __datasets --datasets "$datasets" 2>/dev/null)"}; do
        [[ $id =~ '__PATTERN__' ]] && ids+=("$id")
    done
    compadd -a ids
}

# Flags typed before the command (`tally --datasets DIR query <TAB>`) are the command's own,
# as the binary takes them: moved after the command's name before the completion reads the
# line (the words before the cursor are only reordered, so CURRENT stays).
_tally_global_flags_first() {
    local i=2
    local -a before
    while (( i < CURRENT )); do
        case $words[i] in
            (--*=*) before+=("$words[i]"); (( i++ )) ;;
            (__VALUED__) before+=("$words[i]" "$words[i+1]"); (( i += 2 )) ;;
            (-*) before+=("$words[i]"); (( i++ )) ;;
            (*) break ;;
        esac
    done
    if (( i < CURRENT && $#before )); then
        words=("$words[1]" "$words[i]" "${before[@]}" "${(@)words[i+1,-1]}")
    fi
    _tally "$@"
}
"#
    .replace("__PATTERN__", ID_PATTERN)
    .replace("__VALUED__", &valued.join("|"));
    let mut out = String::with_capacity(script.len() + ids.len());
    let mut inserted = false;
    for line in script.split_inclusive('\n') {
        // The positional `dataset_id` of each command: completed with the ids.
        if line.starts_with("':dataset_id") && line.trim_end().ends_with(":_default' \\") {
            out.push_str(&line.replacen(":_default' \\", ":_tally_dataset_ids' \\", 1));
        } else if line.trim() == "_tally \"$@\"" || line.trim() == "compdef _tally tally" {
            // The dispatch at the end (autoloaded, or sourced): through the wrapper.
            out.push_str(&line.replacen("_tally", "_tally_global_flags_first", 1));
        } else {
            out.push_str(line);
        }
        if !inserted && line.starts_with("autoload -U is-at-least") {
            out.push_str(&ids);
            inserted = true;
        }
    }
    out
}

fn fish(valued: &[String]) -> String {
    format!(
        r#"# Dataset ids of the datasets directory (`--datasets DIR`, default `datasets`), asked of
# `tally __datasets` at each TAB, where a command takes one.
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
    # One id a line, read from the pipe (nothing of it expanded); only what a dataset id may
    # be.
    $words[1] __datasets --datasets $datasets 2>/dev/null | string match --regex -- '{pattern}'
end

# Whether the token at the cursor is a dataset id: the first argument of a command that takes
# one, wherever flags and their values stand (before the command too: the binary takes them
# as the command's own).
function __fish_tally_wants_dataset_id
    set -l words (commandline -opc)
    set -l command
    set -l arguments 0
    set -l value 0
    for word in $words[2..-1]
        if test $value -eq 1
            set value 0
            continue
        end
        switch $word
            case '--*=*'
            case {valued}
                set value 1
            case '-*'
            case '*'
                if test -z "$command"
                    set command $word
                else
                    set arguments (math $arguments + 1)
                end
        end
    end
    test $value -eq 0; and test $arguments -eq 0; and contains -- "$command" {commands}
end

complete -c tally -n __fish_tally_wants_dataset_id -f -a "(__fish_tally_dataset_ids)" -d dataset
"#,
        commands = commands(" "),
        valued = valued.join(" "),
        pattern = ID_PATTERN,
    )
}

/// `tally __datasets`: the ids of the dataset folders of `datasets` (folders holding a
/// `dataset.yaml` whose name is a valid dataset id), one a line, sorted; nothing when the
/// directory cannot be read (a completion has no one to say it to). A folder whose name is
/// not an id is never served, and its name may be anything a file name may be (`$(cmd)`, a
/// newline, a glob): it is never offered.
pub fn list_ids(datasets: &Path, out: &mut dyn Write) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(datasets) else {
        return Ok(());
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| {
            tally_semantic::definition::valid_id(name)
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
            zsh.find("_tally_dataset_ids() {").unwrap()
                < zsh.find("compdef _tally_global_flags_first tally").unwrap()
        );
        let fish = script(clap_complete::Shell::Fish);
        assert!(fish.contains("contains -- \"$command\" inspect query summarize cite add fetch"));
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

    /// A folder named `$(touch${IFS}PWNED)` ran `touch` at one TAB in bash: `tally __datasets`
    /// listed it and the script handed the list to `compgen -W`, which expands it.
    #[test]
    fn a_folder_named_like_a_command_is_not_offered() {
        let dir = std::env::temp_dir().join(format!("tally-hostile-ids-{}", std::process::id()));
        let long = "x".repeat(65);
        for name in [
            "$(touch${IFS}PWNED)",
            "`touch PWNED`",
            "a;b",
            "*",
            "a b",
            "a\nb",
            "tab\tbed",
            "esc\u{1b}[31m",
            "caf\u{e9}",
            "-rf",
            long.as_str(),
            "ok.1_-",
            "budget",
        ] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("dataset.yaml"), "title: t\n").unwrap();
        }
        let mut out = Vec::new();
        list_ids(&dir, &mut out).unwrap();
        // `-rf` is an id (a folder the catalog serves); the scripts pass it as one word.
        assert_eq!(String::from_utf8(out).unwrap(), "-rf\nbudget\nok.1_-\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every script checks each line it reads against the id rule and none hands what it
    /// read to `compgen -W` (the shells themselves are driven by
    /// `tests/e2e/test_shell_completions.py`).
    #[test]
    fn every_script_checks_ids_and_expands_none() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            assert!(script(shell).contains(ID_PATTERN), "{shell:?}");
        }
        // clap's own part completes its fixed options with `compgen -W`; the ids never go
        // through it.
        let code = bash(&["--datasets".to_string()]);
        let mut code = code.lines().filter(|l| !l.trim_start().starts_with('#'));
        assert!(!code.any(|l| l.contains("compgen")));
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
