"""The documentation matches the code: every Python snippet in the README and
docs/ runs as written (they once did not: `MyModel`, `train_step` were never
defined), docs/API.md is what the docstrings generate and every public name has
a docstring, docs/ARCHITECTURE.md's layout is the layering test's table, the
README stays a first page (at most 200 lines), and relative links point at
files that exist."""

import re
import sys
from pathlib import Path

import pytest

from child_process import REPO_ROOT, run_python

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import gen_api_reference  # noqa: E402
import gen_layout_md  # noqa: E402

# Hand-written pages; generated reports are checked by their own generators.
PAGES = ["README.md", "docs/ARCHITECTURE.md", "docs/REFERENCE.md", "docs/SUPPORT.md",
         "docs/TROUBLESHOOTING.md", "docs/HUGGINGFACE.md"]


def snippets():
    found = []
    for page in PAGES:
        text = (REPO_ROOT / page).read_text()
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            found.append(pytest.param(block, id=f"{page}#{i}"))
    return found


@pytest.mark.parametrize("code", snippets())
def test_every_python_snippet_runs_as_written(code):
    done = run_python(code, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_api_reference_is_generated_from_the_current_docstrings():
    assert gen_api_reference.undocumented() == []
    assert (REPO_ROOT / "docs" / "API.md").read_text() == gen_api_reference.render(), (
        "docs/API.md is stale: run python scripts/gen_api_reference.py")


def test_architecture_layout_is_generated_from_the_layering_table():
    assert gen_layout_md.other_row_problems() == []
    page = (REPO_ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert page.count(gen_layout_md.BEGIN) == 1 and page.count(gen_layout_md.END) == 1
    assert gen_layout_md.spliced(page) == page, (
        "docs/ARCHITECTURE.md's layout is stale: run python scripts/gen_layout_md.py")


def test_readme_is_a_first_page_of_at_most_200_lines():
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move reference material to docs/"
    text = "\n".join(lines)
    for needed in ("make run", "make test", "summary: "):  # the quickstart and the last full run's line
        assert needed in text


@pytest.mark.parametrize("page", PAGES + ["docs/API.md"])
def test_relative_links_point_at_files_that_exist(page):
    text = (REPO_ROOT / page).read_text()
    base = (REPO_ROOT / page).parent
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        assert (base / target).exists(), f"{page} links to {target}, which does not exist"
