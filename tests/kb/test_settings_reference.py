"""docs/SETTINGS.md is generated from the code (kb.runtime.settings_reference): it must be current, and
every environment variable the product reads must carry a comment that says what it does."""

from __future__ import annotations

from pathlib import Path

from kb.runtime.settings_reference import PAGE, collect, render, unexplained


def test_the_settings_page_is_generated_from_the_code_as_it_is() -> None:
    assert PAGE.read_text() == render(collect()), "run: python -m kb.runtime.settings_reference --write"


def test_every_setting_the_product_reads_is_explained() -> None:
    assert unexplained(collect()) == []


def test_a_new_setting_without_a_comment_is_caught_and_its_comments_make_its_meaning(tmp_path: Path) -> None:
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "settings.py").write_text(
        "# Knobs ----\n"
        "KB_BARE = env_int('KB_BARE', 3)\n"
        "# what the first says\n"
        "KB_TOLD = env_float('KB_TOLD', 0.5)  # and its end of line\n"
    )
    (tmp_path / "chat").mkdir()
    (tmp_path / "chat" / "job.py").write_text("import os\nLIMIT = os.environ.get('KB_JOB_LIMIT', '4')  # jobs at once\n")
    sections = collect(tmp_path)
    assert unexplained(sections) == ["KB_BARE"]
    told = sections["Knobs"]["KB_TOLD"]
    assert told.meaning == ["what the first says", "and its end of line"] and told.default == "0.5"
    assert sections["Read in chat/job.py"]["KB_JOB_LIMIT"].meaning == ["jobs at once"]
    assert "| `KB_TOLD` | `0.5` | what the first says and its end of line | `kb/settings.py` |" in render(sections)
