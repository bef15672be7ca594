"""The documents people read: every relative link resolves, every `make` target named exists, and the citation is
well-formed."""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {github_anchor(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


def test_github_anchor_matches_githubs_rule():
    assert github_anchor(" Scale: GPUs, several processes, vLLM") == "scale-gpus-several-processes-vllm"
    assert github_anchor("Results (cpu profile)") == "results-cpu-profile"


def test_every_relative_link_resolves():
    broken = []
    for document in DOCUMENTS:
        for target in LINK.findall(document.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (document.parent / path).resolve() if path else document
            if not resolved.exists():
                broken.append(f"{document.name}: {target} (no {path})")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{document.name}: {target} (no heading #{anchor})")
    assert not broken, "\n".join(broken)


def test_every_make_target_the_readme_names_exists():
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        if match := re.match(r"^([\w-]+(?: [\w-]+)*):(?!=)", line):
            targets.update(match.group(1).split())
    named = set(re.findall(r"`make ([\w-]+)", (REPO / "README.md").read_text()))
    named |= set(re.findall(r"^make ([\w-]+)", (REPO / "README.md").read_text(), re.MULTILINE))
    assert named and named <= targets, sorted(named - targets)


def test_the_readme_fits_the_front_pages_budget():
    """The README is the front page: at most 250 lines (CONTRIBUTING.md); reference material goes in docs/."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md: {len(lines)} lines"


def test_make_help_lists_every_target_and_every_tool_in_scripts():
    """`make help`: one line per target (the `##` text on its line) and per tool in scripts/, the benchmarks apart in
    scripts/bench/."""
    import subprocess

    done = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = {target for group in re.findall(r"^  make (\S+(?: \S+)*?) {2,}\S", done.stdout, re.MULTILINE)
              for target in group.split()}
    targets = {target for line in (REPO / "Makefile").read_text().splitlines()
               if (match := re.match(r"^([\w-]+(?: [\w-]+)*):(?!=)", line)) for target in match.group(1).split()}
    assert targets and targets == listed, sorted(targets ^ listed)
    named = set(re.findall(r"[\w.]+\.(?:py|sh)|bench/", done.stdout))
    tools = {path.name for path in (REPO / "scripts").iterdir() if path.is_file()}
    assert tools | {"bench/"} <= named, sorted(tools - named)


def test_every_script_path_named_anywhere_exists():
    """A path into scripts/ named in a document, the Makefile, a config or the code (`scripts/bench/bench_cpu.py`) is
    a file there: a script moved or renamed leaves no stale name behind. Placeholders (NAME) are not paths."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split()
    named = {}
    for name in listed:
        if name.endswith((".md", ".py", ".yaml", ".sh", ".toml")) or name == "Makefile":
            path = REPO / name
            for script in re.findall(r"(?<![\w/.])scripts/[\w/.-]*\.(?:py|sh)", path.read_text(errors="replace")):
                named.setdefault(script, name)
    missing = sorted(f"{script} (in {where})" for script, where in named.items()
                     if "NAME" not in script and not (REPO / script).is_file())
    assert len(named) > 20 and not missing, missing


def test_the_citation_names_the_paper_and_its_authors():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    paper = citation["preferred-citation"]
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "Apache-2.0"
    assert paper["title"] == "Latent On-Policy Self-Distillation" and len(paper["authors"]) == 7
    assert (REPO / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_committed_outputs_name_no_machines_absolute_path():
    """Tables, metrics, plots, results and perf reports print paths relative to the repository (or data.shared_dir):
    a checkout's absolute path in one of them names the machine that recorded it."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "reports", "results", "metrics", "plots"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    # a path into one of those folders; a bare "/tmp/" is an argument a model wrote in an episode, not a checkout
    absolute = re.compile(r"(?<![\w.~])/(?:home|root|work|tmp|Users|mnt|opt)/[\w.-]")
    named = [f for f in listed if f.endswith((".md", ".json", ".jsonl", ".csv", ".txt"))
             and absolute.search((REPO / f).read_text(errors="replace"))]
    assert len(listed) > 100 and not named, named


def test_every_source_file_the_documents_name_exists():
    """A source file named in the README or docs/ (`lopd/latent/composer.py`, `conf/profile/cpu.yaml`; `{a,b}` lists
    expanded) exists. Outputs and the placeholders of how-tos (`baselines/mymethod.py`) are not source files."""
    source = ("lopd/", "baselines/", "evaluation/", "pipelines/", "scripts/", "tests/", "conf/")
    named = set()
    for document in DOCUMENTS:
        for path in re.findall(r"`([\w./{},-]+\.(?:py|yaml|json|jsonl|sh))`", document.read_text()):
            if not path.startswith(source) or "mymethod" in path or "NAME" in path:
                continue
            if match := re.match(r"(.*)\{([^}]*)\}(.*)", path):
                named.update(match.group(1) + part + match.group(3) for part in match.group(2).split(","))
            else:
                named.add(path)
    missing = sorted(path for path in named if not (REPO / path).exists())
    assert len(named) > 40 and not missing, missing


def test_the_profile_table_lists_every_profile():
    """docs/configuration.md's profile table has one row per `conf/profile/*.yaml`, in the profiles' own names."""
    text = (REPO / "docs" / "configuration.md").read_text()
    table = text[text.index("| profile | model |"):].split("\n\n")[0]
    rows = re.findall(r"^\| `(\w+)`", table, re.MULTILINE)
    assert sorted(rows) == sorted(path.stem for path in (REPO / "conf" / "profile").glob("*.yaml"))

