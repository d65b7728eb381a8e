"""`tally completions SHELL` as a shell user meets it: the script installed in bash, zsh and
fish completes the dataset ids of the datasets directory after a command that takes one
(`tally inspect <TAB>`), with the `--datasets DIR` typed on the line, and a dataset dropped into
the folder is offered at the next TAB (the ids are asked of `tally __datasets` each time).

bash and fish complete for real (`compgen` through the installed function; fish's own
`complete -C`); zsh's completion system needs a terminal, so its id function is run with
`compadd` printing what it would offer, beside a check that every `dataset_id` argument of the
script uses it."""

import os
import shutil
import subprocess
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


def test_bash_completes_dataset_ids(folder, bin_dir, tmp_path):
    bash = shell("bash")

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        script = f"""
source <(tally completions bash)
COMP_WORDS=({line}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}
_tally_with_dataset_ids tally "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
        return run([bash, "-c", script], bin_dir, tmp_path)

    # The served folder of the repository, as `--datasets` gives it.
    assert complete("tally", "--datasets", datasets_dir(), "inspect", "pro") == ["procedures"]
    assert complete("tally", f"--datasets={folder}", "summarize", "") == ["births", "budget"]
    assert complete("tally", "--datasets", str(folder), "query", "bu") == ["budget"]
    # A dataset dropped into the folder is offered at the next TAB.
    (folder / "bridges").mkdir()
    (folder / "bridges" / "dataset.yaml").write_text("title: t\n", encoding="utf-8")
    assert complete("tally", "--datasets", str(folder), "cite", "b") == ["births", "bridges", "budget"]
    # Where no id is taken, clap's own completion: subcommands, options.
    assert "summarize" in complete("tally", "su")
    assert "--group-by" in complete("tally", "summarize", "procedures", "--gr")
    # The default folder is `datasets` of the working directory.
    (tmp_path / "datasets" / "local").mkdir(parents=True)
    (tmp_path / "datasets" / "local" / "dataset.yaml").write_text("title: t\n", encoding="utf-8")
    assert complete("tally", "inspect", "") == ["local"]


def test_fish_completes_dataset_ids(folder, bin_dir, tmp_path):
    fish = shell("fish")

    def complete(line: str) -> list[str]:
        script = f"tally completions fish | source; complete -C '{line}'"
        return [c.split("\t")[0] for c in run([fish, "--no-config", "-c", script], bin_dir, tmp_path)]

    assert complete(f"tally --datasets {folder} inspect ") == ["births", "budget"]
    assert complete(f"tally --datasets={folder} summarize ") == ["births", "budget"]
    assert complete(f"tally --datasets {datasets_dir()} query pro") == ["procedures"]
    assert "summarize" in complete("tally su")


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
