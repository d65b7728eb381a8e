"""`tally completions SHELL` as a shell user meets it: the script installed in bash, zsh and
fish completes the dataset ids of the datasets directory after a command that takes one
(`tally inspect <TAB>`), with the `--datasets DIR` typed on the line, and a dataset dropped into
the folder is offered at the next TAB (the ids are asked of `tally __datasets` each time).

bash and fish complete for real (`compgen` through the installed function; fish's own
`complete -C`); zsh's completion system needs a terminal, so its id function is run with
`compadd` printing what it would offer, beside a check that every `dataset_id` argument of the
script uses it.

A folder name is whatever a file name may be: folders named like shell code (`$(touch${IFS}PWNED)`,
backquotes, globs, a newline) are neither run nor offered, under bash's real TAB too (an
interactive bash on a terminal)."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import datasets_dir, tally_bin


def shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {name} is not installed (.ci/run installs it)")
        pytest.skip(f"{name} is not installed")
    return path


@pytest.fixture
def folder(tmp_path) -> Path:
    datasets = tmp_path / "mine"
    for name in ("budget", "births"):
        (datasets / name).mkdir(parents=True)
        (datasets / name / "dataset.yaml").write_text("title: t\n", encoding="utf-8")
    (datasets / "not-a-dataset").mkdir()
    return datasets


# Folder names a completion must neither run nor offer: each ran `touch` (the first two) or was
# expanded against the working directory (the globs) when the ids went through `compgen -W`.
HOSTILE_NAMES = [
    "$(touch${IFS}PWNED)",
    "`touch${IFS}PWNED`",
    "b*",
    "*",
    "with space",
    "new\nline",
    "$(touch PWNED)",
    "bu;touch PWNED",
]


@pytest.fixture
def hostile(folder) -> Path:
    """The folder of `folder` (births, budget) plus a dataset.yaml in folders named like shell
    code."""
    for name in HOSTILE_NAMES:
        (folder / name).mkdir()
        (folder / name / "dataset.yaml").write_text("title: t\n", encoding="utf-8")
    return folder


@pytest.fixture
def bin_dir(tmp_path) -> Path:
    """A folder on PATH where `tally` is the binary under test (completions are registered for
    the command name `tally`)."""
    d = tmp_path / "bin"
    d.mkdir()
    (d / "tally").symlink_to(Path(tally_bin()).resolve())
    return d


def run(argv: list[str], bin_dir: Path, cwd: Path) -> list[str]:
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(cwd)}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)
    assert p.returncode == 0, p.stderr
    return [line for line in p.stdout.splitlines() if line]


def bash_complete(bash: str, bin_dir: Path, cwd: Path, *words: str) -> list[str]:
    """What the installed completion function offers for the command line `words` (the last
    one being completed), as bash calls it at a TAB."""
    line = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    script = f"""
source <(tally completions bash)
COMP_WORDS=({line}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}
_tally_with_dataset_ids tally "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    return run([bash, "-c", script], bin_dir, cwd)


def test_bash_completes_dataset_ids(folder, bin_dir, tmp_path):
    bash = shell("bash")

    def complete(*words: str) -> list[str]:
        return bash_complete(bash, bin_dir, tmp_path, *words)

    # The served folder of the repository, as `--datasets` gives it.
    assert complete("tally", "--datasets", datasets_dir(), "inspect", "pro") == ["procedures"]
    assert complete("tally", f"--datasets={folder}", "summarize", "") == ["births", "budget"]
    assert complete("tally", "--datasets", str(folder), "query", "bu") == ["budget"]
    # A dataset dropped into the folder is offered at the next TAB.
    (folder / "bridges").mkdir()
    (folder / "bridges" / "dataset.yaml").write_text("title: t\n", encoding="utf-8")
    assert complete("tally", "--datasets", str(folder), "cite", "b") == ["births", "bridges", "budget"]
    # After flags, wherever they stand (the binary takes flags before the command as its
    # own): `tally query --datasets DIR su<TAB>` rang the bell.
    assert complete("tally", "query", "--datasets", str(folder), "bu") == ["budget"]
    assert complete("tally", "--log-format", "json", "--datasets", str(folder), "inspect", "b") == ["births", "bridges", "budget"]
    assert complete("tally", "summarize", "--compact", f"--datasets={folder}", "--call-timeout-ms", "900", "bi") == ["births"]
    # Bash itself splits `--datasets=DIR` at the `=` into three words.
    assert complete("tally", "query", "--datasets", "=", str(folder), "bu") == ["budget"]
    # A flag's value, or a command's second argument, is not an id.
    assert "budget" not in complete("tally", "inspect", "--datasets", "")
    assert "budget" not in complete("tally", "--datasets", str(folder), "inspect", "budget", "")
    # Where no id is taken, clap's own completion: subcommands, options.
    assert "summarize" in complete("tally", "su")
    assert "--group-by" in complete("tally", "summarize", "procedures", "--gr")
    # The default folder is `datasets` of the working directory.
    (tmp_path / "datasets" / "local").mkdir(parents=True)
    (tmp_path / "datasets" / "local" / "dataset.yaml").write_text("title: t\n", encoding="utf-8")
    assert complete("tally", "inspect", "") == ["local"]


def bash_tab(bash: str, bin_dir: Path, cwd: Path, line: str, shows: bytes) -> str:
    """Types `line` and a TAB into an interactive bash on a terminal with the completion script
    installed, and returns what the terminal showed (the candidates bash listed) once it shows
    `shows`."""
    setup = [
        # Every candidate listed at the first TAB, no bell, then the script installed.
        b"bind 'set show-all-if-ambiguous on'; bind 'set bell-style none'\n",
        b"source <(tally completions bash); echo READY-$((6*7))\n",
    ]
    return shell_tab([bash, "--norc", "--noprofile", "-i"], setup, bin_dir, cwd, line, shows)


def zsh_tab(zsh: str, bin_dir: Path, cwd: Path, line: str, shows: bytes) -> str:
    """`bash_tab` for zsh: its completion system (compinit) with the script sourced, a TAB typed
    after `line`, the candidates zsh lists."""
    setup = [
        # Candidates listed at the first TAB even when a common prefix is inserted with it.
        b"setopt no_list_ambiguous no_beep\n",
        f"autoload -U compinit && compinit -u -d {cwd}/.zcompdump\n".encode(),
        b"source <(tally completions zsh); echo READY-$((6*7))\n",
    ]
    return shell_tab([zsh, "-f", "-i"], setup, bin_dir, cwd, line, shows)


def shell_tab(argv: list[str], setup: list[bytes], bin_dir: Path, cwd: Path, line: str, shows: bytes) -> str:
    """Types `setup` (whose last line echoes READY-42), then `line` and a TAB, into an
    interactive shell on a terminal, and returns what the terminal showed once it shows
    `shows`. The rest of the session is typed only then: input already waiting when the TAB's
    completion ends can keep the line editor from listing the candidates (seen on a loaded
    machine)."""
    import pty
    import select

    master, slave = pty.openpty()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(cwd),
        "TERM": "dumb",
        "PS1": "$ ",
        "INPUTRC": "/dev/null",
    }
    proc = subprocess.Popen(
        argv,
        stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, start_new_session=True,
    )
    os.close(slave)
    seen = b""

    def read_until(marker: bytes, bound: float = 60.0):
        nonlocal seen
        started = time.monotonic()
        while marker not in seen:
            if time.monotonic() - started > bound:
                pytest.fail(f"{argv[0]} did not show {marker!r} within {bound} s: {seen.decode(errors='replace')}")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break

    try:
        for command in setup:
            os.write(master, command)
        read_until(b"READY-42")
        start = len(seen)
        os.write(master, line.encode() + b"\t")
        read_until(shows)
        # Ctrl-U clears the line; the echo marks the end of what the TAB showed.
        os.write(master, b"\x15echo DONE-$((6*7))\n")
        read_until(b"DONE-42")
        return seen[start:].decode(errors="replace")
    finally:
        try:
            os.write(master, b"exit\n")
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(master)


def test_a_folder_named_like_a_command_is_never_run_by_bash(hostile, bin_dir, tmp_path):
    """A dataset folder named `$(touch${IFS}PWNED)` ran `touch` at one TAB: the ids reached
    `compgen -W`, which expands its word list. Now the script reads each id as one line and
    offers only valid ids; neither the installed function nor bash's real TAB runs anything."""
    bash = shell("bash")
    pwned = tmp_path / "PWNED"
    assert bash_complete(bash, bin_dir, tmp_path, "tally", "--datasets", str(hostile), "inspect", "") == ["births", "budget"]
    assert bash_complete(bash, bin_dir, tmp_path, "tally", "--datasets", str(hostile), "query", "b") == ["births", "budget"]
    assert bash_complete(bash, bin_dir, tmp_path, "tally", "--datasets", str(hostile), "cite", "bu") == ["budget"]
    assert bash_complete(bash, bin_dir, tmp_path, "tally", "--datasets", str(hostile), "inspect", "$(") == []
    assert not pwned.exists(), "a folder name was run as a command"
    # The same through an interactive bash: the line typed, then TAB.
    shown = bash_tab(bash, bin_dir, tmp_path, f"tally --datasets {hostile} inspect ", b"budget")
    print(shown)
    assert "births" in shown and "budget" in shown, shown
    assert not pwned.exists(), f"a folder name was run as a command at a TAB: {shown}"
    for name in ("touch", "with space", "line", "b*"):
        assert name not in shown, shown


def test_bash_completes_ids_after_flags_at_a_real_tab(folder, bin_dir, tmp_path):
    """`tally query --datasets DIR <TAB>` and `tally --datasets DIR query <TAB>` at an
    interactive bash: the ids of DIR, not the bell."""
    bash = shell("bash")
    for line in (f"tally query --datasets {folder} ", f"tally --datasets {folder} query --compact "):
        shown = bash_tab(bash, bin_dir, tmp_path, line, b"budget")
        assert "births" in shown and "budget" in shown, (line, shown)


def test_fish_completes_dataset_ids(folder, bin_dir, tmp_path):
    fish = shell("fish")

    def complete(line: str) -> list[str]:
        script = f"tally completions fish | source; complete -C '{line}'"
        return [c.split("\t")[0] for c in run([fish, "--no-config", "-c", script], bin_dir, tmp_path)]

    assert complete(f"tally --datasets {folder} inspect ") == ["births", "budget"]
    assert complete(f"tally --datasets={folder} summarize ") == ["births", "budget"]
    assert complete(f"tally --datasets {datasets_dir()} query pro") == ["procedures"]
    assert "summarize" in complete("tally su")
    # After flags, wherever they stand.
    assert complete(f"tally query --datasets {folder} bu") == ["budget"]
    assert complete(f"tally --log-format json --datasets {folder} inspect ") == ["births", "budget"]
    assert complete(f"tally summarize --compact --call-timeout-ms 900 --datasets={folder} bi") == ["births"]
    # A flag's value, or a command's second argument, is not an id.
    assert "budget" not in complete(f"tally --datasets {folder} inspect budget ")
    # Folders named like shell code are neither run nor offered.
    for name in HOSTILE_NAMES:
        (folder / name).mkdir()
        (folder / name / "dataset.yaml").write_text("title: t\n", encoding="utf-8")
    assert complete(f"tally --datasets {folder} inspect ") == ["births", "budget"]
    assert complete(f"tally --datasets {folder} inspect b") == ["births", "budget"]
    assert not (tmp_path / "PWNED").exists()


def test_zsh_script_completes_dataset_ids(folder, bin_dir, tmp_path):
    zsh = shell("zsh")
    script = tmp_path / "_tally"
    script.write_text(subprocess.run([tally_bin(), "completions", "zsh"], capture_output=True, text=True, check=True).stdout, encoding="utf-8")
    text = script.read_text(encoding="utf-8")
    # Every command's dataset id argument is completed by the id function.
    assert text.count(":_tally_dataset_ids' \\") == 6, text
    assert "':dataset_id:_default'" not in text
    driver = f"""
autoload -U compinit && compinit -u -d {tmp_path}/.zcompdump
source {script}
compadd() {{ print -l -- ${{(P)2}} }}
words=(tally --datasets {folder} inspect '')
_tally_dataset_ids
words=(tally summarize --datasets={datasets_dir()} '')
_tally_dataset_ids
"""
    got = run([zsh, "-f", "-c", driver], bin_dir, tmp_path)
    assert got[:2] == ["births", "budget"], got
    assert "procedures" in got[2:], got
    # Folders named like shell code are neither run nor offered.
    for name in HOSTILE_NAMES:
        (folder / name).mkdir()
        (folder / name / "dataset.yaml").write_text("title: t\n", encoding="utf-8")
    got = run([zsh, "-f", "-c", driver], bin_dir, tmp_path)
    assert got[:2] == ["births", "budget"], got
    assert not any("touch" in g or " " in g or "*" in g for g in got), got
    assert not (tmp_path / "PWNED").exists()


def test_zsh_completes_ids_after_flags_at_a_real_tab(folder, bin_dir, tmp_path):
    """zsh's own completion system at a terminal (compinit, the script sourced, a TAB typed):
    the ids after the command, after flags behind it, and after flags before it (the binary
    takes those as the command's own)."""
    zsh = shell("zsh")
    for line in (
        f"tally inspect --datasets {folder} ",
        f"tally query --compact --datasets {folder} ",
        f"tally --datasets {folder} summarize ",
    ):
        shown = zsh_tab(zsh, bin_dir, tmp_path, line, b"budget")
        assert "births" in shown and "budget" in shown, (line, shown)
