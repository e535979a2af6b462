"""One sentence splitter for every script (kb.text.sentences): CJK full stops without a space, German and
Polish abbreviations and ordinals, and the chunker cutting an over-long section at those sentence ends."""

from __future__ import annotations

import pytest

from kb.library.ingest import chunking
from kb.library.ingest.extract import Extracted
from kb.text.sentences import introduced, split


@pytest.mark.parametrize(("text", "sentences"), [
    ("忘记密码时，请打开门户。然后点击重置！新密码需要十二个字符？是的。",
     ["忘记密码时，请打开门户。", "然后点击重置！", "新密码需要十二个字符？", "是的。"]),
    ("パスワードを忘れた場合は、ポータルを開きます。次に「リセット」をクリックします。",
     ["パスワードを忘れた場合は、ポータルを開きます。", "次に「リセット」をクリックします。"]),
    ("Bitte z.B. den Antrag stellen. Danach bzw. vorher prüfen. Raum Nr. 5 ist frei.",
     ["Bitte z.B. den Antrag stellen.", "Danach bzw. vorher prüfen.", "Raum Nr. 5 ist frei."]),
    ("Die Frist endet am 1. Januar. Danach gilt die neue Regel.",
     ["Die Frist endet am 1. Januar.", "Danach gilt die neue Regel."]),
    ("Spotkanie odbędzie się 3. maja w biurze. Proszę np. przynieść laptop, tzn. służbowy. Adres: ul. Długa 5.",
     ["Spotkanie odbędzie się 3. maja w biurze.", "Proszę np. przynieść laptop, tzn. służbowy.", "Adres: ul. Długa 5."]),
    ("Use e.g. the CLI. Then run it. See Fig. 3 for details. The answer is 42. It is done.",
     ["Use e.g. the CLI.", "Then run it.", "See Fig. 3 for details.", "The answer is 42.", "It is done."]),
])
def test_sentences_end_where_the_script_ends_them(text: str, sentences: list[str]) -> None:
    assert split(text) == sentences


def test_the_chunker_cuts_a_long_chinese_section_at_its_full_stops() -> None:
    sentence = "新员工入职第一天需要在人事系统中填写个人信息并上传身份证件的扫描件以便完成登记手续。"
    text = "# 入职\n\n" + sentence * 40
    drafts = chunking.split(Extracted(text=text, headings=(), pages=(), warnings=(), title=None), title="入职", max_tokens=120)
    assert len(drafts) > 1
    for draft in drafts:
        assert draft.content.endswith("。"), draft.content[-20:]


@pytest.mark.parametrize(("after", "block"), [
    ("\n\n```\nctl promote --replica q-2\n```\n\nThe queue is back.", "\n\n```\nctl promote --replica q-2\n```\n"),
    ("\n1. Open the screen.\n2. Press Save.\n\n3. Confirm.\n\nDone.\n", "\n1. Open the screen.\n2. Press Save.\n\n3. Confirm.\n"),
    ("\n- one\n  wrapped\n- two\n## Next section\nText", "\n- one\n  wrapped\n- two\n"),
    ("\nThe next paragraph is the answer.\n\nAnother one.", "\nThe next paragraph is the answer.\n"),
    ("\n\n```\nctl promote --replica", ""),  # a fence the window cut: nothing half-quoted
    ("\n- one\n- tw", "\n- one\n"),  # the window cut the last item
    ("\n## Heading straight away\n", ""),
])
def test_what_a_colon_introduces_is_read_whole_from_the_text_after_it(after: str, block: str) -> None:
    assert introduced(after) == block
