"""The C++ sources follow .clang-format (`make format` applies it): the check
the tree passes, and the same check failing on a misformatted file."""

import shutil
import subprocess

from child_process import REPO_ROOT


def test_the_cpp_sources_follow_clang_format():
    done = subprocess.run(["bash", "scripts/format.sh", "--check"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"run `make format`:\n{done.stderr[-3000:]}"
    assert "files formatted as .clang-format says" in done.stdout


def test_the_check_fails_on_a_misformatted_file(tmp_path):
    shutil.copy(REPO_ROOT / ".clang-format", tmp_path / ".clang-format")
    bad = tmp_path / "bad.cc"
    bad.write_text("int  f( int x ){return x+1;}\n")
    done = subprocess.run(["clang-format", "--dry-run", "--Werror", str(bad)], capture_output=True, text=True)
    assert done.returncode != 0 and "bad.cc" in done.stderr
