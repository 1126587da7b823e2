"""The documentation: `mkdocs build --strict` of docs/ passes (`make docs`), and every relative
link of README.md (outside MkDocs' docs_dir, so checked here) points to a file, and to a heading
of it where it names one.

A planted broken link fails both checks (so a passing build means something).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def mkdocs_build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=config_dir, capture_output=True, text=True, timeout=300)


def anchors(markdown: str) -> set[str]:
    """The ids MkDocs' toc extension gives the headings of a page (code fences skipped)."""
    text = FENCE.sub("", markdown)
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in HEADING.findall(text)}


def link_problems(readme: Path) -> list[str]:
    """Relative links of `readme` whose file, or heading anchor, does not exist."""
    problems = []
    text = FENCE.sub("", readme.read_text())
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):             # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (readme.parent / path) if path else readme
        if not file.exists():
            problems.append(f"{target}: no file {path}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {path or readme.name}")
    return problems


def test_mkdocs_strict_build(tmp_path: Path) -> None:
    out = mkdocs_build(ROOT, tmp_path / "site")
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "validation.html").exists()
    page = (tmp_path / "site" / "validation.html").read_text()
    assert "<!-- table:" not in page and "CoCoD-SGD" in page      # the CSV's table was rendered


def test_strict_build_fails_on_a_planted_broken_link(tmp_path: Path) -> None:
    for name in ("docs", "figures"):
        (shutil.copytree if name == "docs" else lambda a, b: b.symlink_to(a))(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md) and [here](algorithms.md#no-such-heading).\n")
    out = mkdocs_build(tmp_path, tmp_path / "site")
    assert out.returncode != 0
    assert "no-such-page.md" in out.stderr, out.stderr[-3000:]


README_MAX_LINES = 200          # a front page a newcomer reads in five minutes; the rest is in docs/


def test_readme_is_a_short_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to a docs/ page")


def test_readme_links_point_to_files_and_headings() -> None:
    problems = link_problems(ROOT / "README.md")
    assert not problems, "README.md:\n" + "\n".join(problems)


def test_readme_link_check_catches_a_planted_broken_link(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Add an algorithm\n")
    readme = tmp_path / "README.md"
    readme.write_text("[ok](docs/a.md#add-an-algorithm) [web](https://example.org/x)\n"
                      "```\n[in a fence](nothing.md)\n```\n"
                      "[gone](docs/b.md) [bad anchor](docs/a.md#no-such)\n")
    assert link_problems(readme) == ["docs/b.md: no file docs/b.md", "docs/a.md#no-such: no heading #no-such in docs/a.md"]


def test_the_wrap_example_is_the_same_in_readme_and_docs() -> None:
    """tests/test_wrap.py runs the README's copy; docs/own-training.md shows the same code."""
    def first_python(text: str) -> str:
        return re.search(r"```python\n(.*?)```", text, re.S).group(1)
    readme = (ROOT / "README.md").read_text().split("## Use it in your own training", 1)[1]
    assert first_python(readme) == first_python((ROOT / "docs" / "own-training.md").read_text())
