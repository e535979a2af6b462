"""The extractive answer leads with the sentence that answers, keeps what it depends on, and gives steps.

Real scoring: the embedding model and the (test) database's corpus statistics."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.backends.extractive import HOW_TO, ExtractiveBackend, sentences, units
from chat.prompts import Source, build_prompt
from kb.text import embedding
from kb.text.classify import CONCEPT, SCREEN
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db


def source(number: int, text: str) -> Source:
    return Source(number=number, chunk_id=number, document_id=1, document_title="Doc", label="Doc > Section",
                  text=text, start=0, end=len(text), page=None, distance=0.3)


def answer(question: str, *texts: str, intent: str = CONCEPT) -> str:
    prompt = build_prompt(question=question, intent=intent, sources=[source(i, t) for i, t in enumerate(texts, 1)])
    return "".join(ExtractiveBackend().generate(prompt))


def test_units_undo_bullets_and_pipes_skip_headings_and_keep_code_whole() -> None:
    assert sentences("## Head\n\n- one item.\n- Two items. Three.\n| a | b |\n|---|---|") == [
        "one item.", "Two items. Three.", "a — b"]
    kinds = [u.kind for u in units(1, "Run this:\n\n```\nctl go --now\n```\n\n1. First.\n2. Second.")]
    assert kinds == ["prose", "code", "step", "step"]
    assert sentences('See <span class="x">Clipboard</span> ![pic](/a.png) here.') == ["See Clipboard here."]
    # Bold and wiki emphasis read as their words; a code span keeps its characters.
    assert sentences("Hit **Submit** to send it. Trac lists ''custom queries'' under '''View Tickets'''. "
                     "Use `a**2 + b**2` or `x = ''` here.") == [
        "Hit Submit to send it.", "Trac lists custom queries under View Tickets.", "Use `a**2 + b**2` or `x = ''` here."]
    assert sentences("Consider a [separate etcd cluster just for events][etcd-events] or [this][]. "
                     "Read rows[0][1] and `m[a][b]` as they are.") == [
        "Consider a separate etcd cluster just for events or this.", "Read rows[0][1] and `m[a][b]` as they are."]


def test_a_markdown_link_is_quoted_as_its_text() -> None:
    text = answer(
        "How far ahead can I request advanced sick leave?",
        'You can request [advanced sick leave]({% page "/leave/advanced-sick-leave/" %}) up to 30 days ahead '
        "through [HR Links](https://hrlinks.example.gov/(portal)/start).",
    )
    assert text.startswith("You can request advanced sick leave up to 30 days ahead through HR Links [1]."), text
    assert "{%" not in text and "](" not in text


def test_the_sentences_quoted_from_one_passage_stay_together() -> None:
    """Runners-up are picked by score, here from passage 1, then 2, then 1 again; they are shown passage by
    passage, so the reader does not jump between them."""
    text = answer(
        "What happens to my leave balance and my unused leave when I move to part-time hours?",
        "Your leave balance is recalculated when your hours change. Saved views keep their filters. Part-time "
        "staff accrue leave in proportion to their hours. Payslips are issued monthly. Unused leave carries over "
        "for one year.",
        "Moving to part-time hours needs your manager's approval in the People Hub.",
    )
    cited = [int(n) for n in re.findall(r"\[(\d)\]", text)]
    assert cited == [1, 1, 1, 2], text  # every sentence of [1], then the one of [2]
    assert "Unused leave carries over for one year [1]." in text


def test_a_sentence_another_page_repeats_is_quoted_once() -> None:
    text = answer(
        "Do part-time staff work the standard schedule of 8 hours a day?",
        "On the standard schedule you work 8 hours a day, 5 days a week.",
        "On the standard schedule you work 8 hours a day, five days a week.",
        "Part-time staff agree their hours per day with their supervisor when they join.",
    )
    assert text.count("8 hours a day") == 1, text
    assert "Part-time staff agree their hours per day" in text, text


def test_a_hard_wrapped_sentence_is_one_sentence_and_a_pdfs_short_lines_stay_apart() -> None:
    wrapped = ("The weekly time reporting period lasts one week, beginning on Sunday and ending\n"
               "on Saturday. Submit it by Friday; late entries are flagged in the report that\n"
               "Timecards get every Monday.\n\n"
               "- Extended Out of Office: for absences of 3 weeks or longer, such as Paid\n"
               "  Parental Leave taken part-time.\n")
    assert sentences(wrapped) == [
        "The weekly time reporting period lasts one week, beginning on Sunday and ending on Saturday.",
        "Submit it by Friday; late entries are flagged in the report that Timecards get every Monday.",
        "Extended Out of Office: for absences of 3 weeks or longer, such as Paid Parental Leave taken part-time.",
    ]
    cheat_sheet = ("$ git log --follow [file]\nLists version history for a file, including renames\n$ git log\n"
                   "Lists version history for the current branch\nCAUTION! Changing history can have nasty side effects. If you\n"
                   "need to change commits, proceed with caution.")
    assert sentences(cheat_sheet) == [
        "$ git log --follow [file]", "Lists version history for a file, including renames", "$ git log",
        "Lists version history for the current branch", "CAUTION!", "Changing history can have nasty side effects.",
        "If you need to change commits, proceed with caution."]
    left_open = ("In the ledger, income accounts tend to have a negative\nbalance (see\n"
                 "[Types of Accounts](https://example.org/accounts#types)).\n\nThis option flips their sign.")
    assert sentences(left_open) == [
        "In the ledger, income accounts tend to have a negative balance (see Types of Accounts).",
        "This option flips their sign."]


def test_how_does_asks_how_something_behaves_not_for_steps() -> None:
    assert HOW_TO.search("How do I fail over the planning database?")
    assert HOW_TO.search("what do i do when the export stalls")
    assert not HOW_TO.search("How does a text filter behave differently from a facet?")
    assert not HOW_TO.search("What does the dock manager do?")


def test_a_command_line_brings_the_description_after_it() -> None:
    cheat_sheet = ("$ git diff [first-branch]...[second-branch]\nShows content differences between two branches\n"
                   "$ git log --follow [file]\nLists version history for a file, including renames\n"
                   "$ git reset --hard [commit]\nDiscards all history and changes back to the specified commit")
    text = answer("What does git log --follow [file] show?", cheat_sheet)
    assert text.startswith("$ git log --follow [file] [1] Lists version history for a file, including renames [1]"), text


def test_the_answer_leads_with_the_sentence_that_answers_not_the_one_sharing_most_words() -> None:
    ask = (
        "Which formats does the Export dialog offer?",
        "The Export dialog is where exports start, and the Export dialog remembers the last export. "
        "The Export button opens the Export dialog, which has two tabs, CSV and PDF. "
        "Large exports are emailed.",
        "The filter bar has a Status dropdown. Nothing about exports here.",
    )
    text = answer(*ask, intent=SCREEN)
    assert text.startswith("The Export button opens the Export dialog, which has two tabs, CSV and PDF [1]."), text
    assert text == answer(*ask, intent=SCREEN)  # deterministic


@pytest.mark.parametrize(("question", "passage", "first", "second"), [
    pytest.param(  # the question asks for the second sentence, which leans on the one before it
        "Where do I click to copy a facet's choices and counts?",
        "Each text facet shows up to 2,000 choices. The choices and counts in each facet can be copied as "
        "tab-separated values. To do so, click on the choices link near the top left corner of the facet.",
        "The choices and counts in each facet can be copied as tab-separated values [1].",
        "To do so, click on the choices link near the top left corner of the facet [1].",
        id="the one it leans on"),
    pytest.param(  # the question asks for the first sentence, which the next one carries out
        "Can the shipments list be exported as a PDF report?",
        "Exports keep the current filters. The shipments list can be exported as a PDF report. To do so, open "
        "the Export dialog and choose the second tab. Large exports arrive by email.",
        "The shipments list can be exported as a PDF report [1].",
        "To do so, open the Export dialog and choose the second tab [1].",
        id="the one that carries it out"),
    pytest.param(  # the question asks for the last sentence, which leans on one that leans on the one before
        "What is the quickest way to tidy a shared list of saved views?",
        "Saved views keep the filters you chose. You can then rename a saved view from its menu. This changes "
        "its name for everyone on the team. This is the quickest way to tidy a shared list.",
        "You can then rename a saved view from its menu [1]. This changes its name for everyone on the team [1].",
        "This is the quickest way to tidy a shared list [1].",
        id="a chain of two it leans on"),
])
def test_a_sentence_comes_with_the_one_it_leans_on_and_the_one_that_carries_it_out(
    question: str, passage: str, first: str, second: str
) -> None:
    text = answer(question, passage)
    assert first in text and second in text and text.index(first) < text.index(second), text


def test_a_procedure_question_gets_ordered_steps() -> None:
    steps = (
        "## Rotating the key\n\n1. Open the Vault screen and choose Rotate.\n2. Confirm the rotation in the dialog."
        "\n3. Copy the new key into the incident record.\n\nKeys older than ninety days are rejected."
    )
    text = answer("How do I rotate the vault key?", steps, "The vault holds the keys of every depot.")
    numbered = re.findall(r"^(\d)\. ", text, re.M)
    assert numbered[:3] == ["1", "2", "3"], text
    assert text.index("Open the Vault screen") < text.index("Confirm the rotation") < text.index("Copy the new key")


def test_a_how_to_question_prefers_steps_only_from_a_section_on_its_topic() -> None:
    sources = [
        Source(number=1, chunk_id=1, document_id=1, document_title="Handbook", label="Handbook > Pay > Direct deposit",
               text="Use this form to have your pay sent to your bank by direct deposit. "
                    "The form asks for the routing number of your financial institution.",
               start=0, end=130, page=None, distance=0.3),
        Source(number=2, chunk_id=2, document_id=2, document_title="Purchasing",
               label="Purchasing > Business cards",
               text="1. Choose a card design in the print shop.\n2. Enter the bank account that pays for the "
                    "cards.\n3. Enter the address the cards are mailed to.",
               start=0, end=120, page=None, distance=0.35),
    ]
    prompt = build_prompt(question="How do I get my salary paid into my bank account instead of a mailed check?",
                          intent=CONCEPT, sources=sources)
    text = "".join(ExtractiveBackend().generate(prompt))
    assert text.startswith("Use this form to have your pay sent to your bank by direct deposit [1]."), text
    assert "print shop" not in text


def test_instructions_written_as_prose_and_commands_become_steps() -> None:
    runbook = (
        "Manual failover is used for planned maintenance. Always start with a dry run, which prints what would "
        "happen:\n\n```\nctl db failover main --target db-2 --dry-run\n```\n\nThe dry run must report the target "
        "as in sync. If it does, run the same command without the dry-run flag."
    )
    text = answer("How do I fail over the main database?", runbook, "Maintenance windows are on Sundays.")
    assert text.startswith("1. "), text
    assert "`ctl db failover main --target db-2 --dry-run` [1]" in text
    assert re.search(r"^\d\. If it does, run the same command without the dry-run flag \[1\]\.", text, re.M) or \
        "If it does, run the same command" in text


def test_a_sentence_ending_in_a_colon_brings_its_whole_list_numbered_as_the_source_numbers_it() -> None:
    # The list starts at 3: the source continues a numbering, and the answer must not renumber it.
    passage = ("Escalating a delayed shipment to the carrier has three steps:\n\n3. Open the shipment in the "
               "tracking screen.\n4. Choose Escalate and pick the carrier's contact.\n5. Write the delay reason and "
               "send.\n\nCarriers answer within one working day.")
    text = answer("How many steps does escalating a delayed shipment to the carrier have?", passage)
    assert text.startswith("Escalating a delayed shipment to the carrier has three steps [1]:\n3. Open the shipment"), text
    assert re.findall(r"^(\d)\. ", text, re.M) == ["3", "4", "5"], text
    # ...and a bulleted list keeps its bullets, each item on its own line.
    bulleted = answer("Which documents does the carrier onboarding need?",
                      "The carrier onboarding needs these documents:\n\n- the insurance certificate\n"
                      "- the hazmat licence\n- the signed framework contract")
    assert bulleted.count("\n• ") == 3 and bulleted.rstrip().endswith("the signed framework contract [1]"), bulleted


def test_the_last_step_never_ends_on_a_colon_without_the_command_it_introduces() -> None:
    sentences_ = " ".join(f"Check item {i} of the list." for i in range(1, 7))  # the colon's sentence is the 8th
    runbook = (f"To fail over the queue, follow the checklist. {sentences_} Finally promote the replica:\n\n"
               "```\nctl queue promote --replica q-2\n```\n\nThe queue is back within a minute.")
    text = answer("How do I fail over the queue?", runbook)
    assert text.startswith("1. "), text
    assert "Finally promote the replica [1]:\n`ctl queue promote --replica q-2` [1]" in text, text


@pytest.mark.slow
def test_the_demo_failover_question_is_answered_from_manual_failover_in_steps(people: dict[str, Any]) -> None:
    from chat.answering import answer_stream
    from tests.factories import ingested_folder

    # The engineering runbooks, not the failover runbook alone: over one document every word of the question is
    # common, and the corpus statistics (refreshed after indexing, as a worker does) would weigh none of them.
    ingested_folder(ROOT / "demo" / "corpus" / "engineering")
    events = list(answer_stream(user=people["alice"], question="How do I fail over the planning database?"))
    done = next(e for e in events if e["type"] == "done")
    citations = next(e for e in events if e["type"] == "citations")["citations"]
    assert done["text"].startswith("1. "), done["text"]
    # Numbered 1..n without a gap: a command is part of the step that introduces it, not a step of its own.
    numbers = [int(n) for n in re.findall(r"^(\d)\. ", done["text"], re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 3, done["text"]
    assert not done["text"].rstrip().endswith(":") and " [3] :" not in done["text"], done["text"]
    assert "Always start with a dry run" in done["text"] and "--dry-run` [" in done["text"]
    lead = int(re.search(r"\[(\d+)\]", done["text"]).group(1))
    assert "Manual failover" in next(c["label"] for c in citations if c["number"] == lead)
    assert "Maintenance windows" not in done["text"]



def test_a_runner_up_must_hold_one_of_the_questions_words_not_just_sound_like_the_manual() -> None:
    text = answer(
        "How do I export the Shipments list, and which formats does the Export dialog offer?",
        "The CSV tab exports the rows that match the current filters. Saved filters appear in the Views menu on the "
        "left of the filter bar. The filter bar above the table has a Status dropdown, a Carrier field and a Date "
        "range picker.",
    )
    assert text.startswith("The CSV tab exports the rows that match the current filters [1]."), text
    assert "Views menu" not in text and "Status dropdown" not in text, text


GUIDE = """# Export guide

## Exporting

The Export button opens the Export dialog, which has two tabs, CSV and PDF. Large exports are emailed
to the person who started them. Each export keeps its filters, so a saved view exports the same rows.
Choose <span class="menuItems">File</span> → <span class="menuItems">Export</span> to start one.

| Format | Limit |
|---|---|
| CSV | 1,000,000 rows |
"""


def ingested_source(text: str, name: str) -> tuple[Any, Source]:
    """A one-chunk document ingested for real (stored piece vectors and ids), with its chunk as source [1]."""
    from kb.library.models import Chunk
    from tests.factories import ingested_document

    document = ingested_document(text, name=name)
    [chunk] = Chunk.objects.filter(document=document)
    return chunk, Source(number=1, chunk_id=chunk.pk, document_id=document.pk, document_title=document.title,
                         label=chunk.breadcrumb, text=chunk.content, start=chunk.start, end=chunk.end, page=None,
                         distance=0.2)


def encodings(monkeypatch: Any) -> list[str]:
    """Every text the embedding model is asked to encode into word-piece vectors from now on."""
    from kb.text import embedding

    encoded: list[str] = []
    for name in ("token_vectors", "passage_token_vectors"):
        real = getattr(embedding, name)

        def spy(texts: list[str], real: Any = real) -> Any:
            encoded.extend(texts)
            return real(texts)

        monkeypatch.setattr(embedding, name, spy)
    return encoded


def test_sentences_are_cut_from_their_chunks_pieces_encoded_once(monkeypatch: Any) -> None:
    """An answer encodes its passages' chunks once (search.late.exact_pieces, which retrieval's exact pass has
    usually filled already) and cuts each sentence's word pieces from them, read in the passage's context. A table
    row rejoined with dashes, or a sentence whose markup was cleaned out, is found piece by piece in order; a
    sentence in no chunk is encoded on its own."""
    from chat import sentence_scorer
    from search import late

    chunk, src = ingested_source(GUIDE, "export-guide.md")
    parts = units(1, src.text)
    stranger = "Nothing in this guide mentions quarterly payroll reconciliation."
    texts = [u.text for u in parts] + [stranger]
    exact, = late.exact_pieces([(chunk.pk, chunk.text)])  # as the late stage's exact pass encodes it
    located = sentence_scorer.passage_pieces(sentence_scorer.source_chunks([src]), [src], texts, [1] * len(texts),
                                             coarse=False)
    found = [None if at is None else at[0] for at in located]
    stored, ids = exact.vectors, exact.ids
    assert found[-1] is None  # in no chunk: encoded
    cleaned = 0
    for unit, vectors in zip(parts, found, strict=False):
        assert vectors is not None, unit.text
        [wanted] = embedding.piece_ids([unit.text])
        runs = [i for i in range(len(ids)) if ids[i : i + len(wanted)] == wanted]
        if runs:
            assert (vectors == stored[runs[0] : runs[0] + len(wanted)]).all()
            continue
        cleaned += 1
        # Cut from the chunk's own vectors, in order: the pieces the chunk has (the cells, the words
        # around a dropped tag), without the " — " the row was rejoined with.
        rows = [next(i for i in range(len(stored)) if (stored[i] == v).all()) for v in vectors]
        assert rows == sorted(rows) and [ids[i] for i in rows] == [t for t in wanted if t in ids[rows[0]:rows[-1] + 1]]
    assert cleaned == 3, "the two table rows and the sentence with <span> tags are not runs of the chunk"

    encoded = encodings(monkeypatch)
    prompt = build_prompt(question="Which formats does the Export dialog offer?", intent=SCREEN, sources=[src])
    text = "".join(ExtractiveBackend().generate(prompt))
    assert text.startswith("The Export button opens the Export dialog, which has two tabs, CSV and PDF [1]."), text
    assert encoded == []  # every sentence, row and cleaned one included, came from the chunk encoded before


def test_a_code_block_longer_than_a_chunk_is_cut_from_every_chunk_it_spans(monkeypatch: Any) -> None:
    """A long code block is cut over several chunks, so it is a run of no single chunk; it used to be
    encoded on its own (~60 ms a block here). Its vectors are the chunks' runs, chunk after chunk."""
    from chat import sentence_scorer
    from kb.library.models import Chunk
    from search import late
    from tests.factories import ingested_document

    lines = [f"<string>-Drefine.o{n}=x{n * 7}</string>" for n in range(40)]  # ~0.5 word pieces a character
    text = "# Running\n\n## Options\n\nSet these in refine.ini:\n\n```\n" + "\n".join(lines) + "\n```\n"
    document = ingested_document(text, name="running.md")
    chunks = list(Chunk.objects.filter(document=document).order_by("ordinal"))
    src = Source(number=1, chunk_id=chunks[0].pk, document_id=document.pk, document_title=document.title,
                 label="Running > Options", text=text, start=min(c.start for c in chunks),
                 end=max(c.end for c in chunks), page=None, distance=0.2)
    [code] = [u for u in units(1, src.text) if u.kind == "code"]
    [wanted] = embedding.piece_ids([code.text.removesuffix(" …")])
    pieces = late.exact_pieces([(c.pk, c.text) for c in chunks])
    holding = [p for p in pieces if set(wanted[:20]) <= set(p.ids)]
    assert len(chunks) >= 2 and not any(sentence_scorer._as_text(wanted) in sentence_scorer._as_text(p.ids) for p in pieces), (
        "the block must be longer than a chunk for this test")
    assert holding

    [located] = sentence_scorer.passage_pieces(sentence_scorer.source_chunks([src]), [src], [code.text], [1],
                                               coarse=False)
    assert located is not None
    vectors = located[0]
    assert len(vectors) == len(wanted)
    stored = {tuple(v) for p in pieces for v in p.vectors}
    assert all(tuple(v) in stored for v in vectors)  # cut from the chunks' own vectors, none encoded on its own

    encoded = encodings(monkeypatch)
    "".join(ExtractiveBackend().generate(build_prompt(question="Which string sets refine.o12?",
                                                      intent=CONCEPT, sources=[src])))
    assert encoded == []


TOPICS = ("loading dock", "cold store", "forklift fleet", "parcel scanner", "returns desk", "night shift",
          "yard gate", "pallet racking", "fire doors", "staff canteen", "label printer", "weighbridge")


def test_a_long_source_is_read_on_coarse_codes_first_and_its_best_chunks_exactly(monkeypatch: Any) -> None:
    """A source spanning a dozen chunks is not encoded whole while the asker waits: its sentences are scored on
    the chunks' stored coarse codes, then the chunks holding the best few are encoded and scored again
    (at most EXACT_EXTRA of them). The sentence that answers wins, with the score the exact pieces give it."""
    from chat import sentence_scorer
    from kb.library.models import Chunk
    from search import late
    from tests.factories import ingested_document

    paragraphs = [" ".join(f"The {topic} {line}." for line in (
        "is inspected by the site manager at the start of each month",
        "has its own logbook, kept in the office next to the main entrance",
        "must be kept clear of boxes, cables and cleaning trolleys at all times",
        "is covered by the warehouse insurance policy for accidental damage",
        "was last refurbished when the building changed owners",
        "closes for maintenance on the first Sunday of every quarter")) for topic in TOPICS]
    paragraphs[7] += " The night guard checks the quartz seal on the east gate every hour."
    document = ingested_document("# Depot handbook\n\n## Facilities\n\n" + "\n\n".join(paragraphs) + "\n",
                                 name="depot-handbook.md")
    chunks = list(Chunk.objects.filter(document=document).order_by("ordinal"))
    assert len(chunks) >= 6, "the source must span many chunks"
    text = document.canonical_text
    src = Source(number=1, chunk_id=chunks[0].pk, document_id=document.pk, document_title=document.title,
                 label="Depot handbook > Facilities", text=text[chunks[0].start:chunks[-1].end],
                 start=chunks[0].start, end=chunks[-1].end, page=None, distance=0.2)
    texts = [u.text for u in units(1, src.text)]
    question = "How often does the night guard check the quartz seal on the east gate?"
    late._exact.clear()
    encoded = encodings(monkeypatch)
    scores = sentence_scorer.sources_scores(question, [src], texts, [1] * len(texts), [""] * len(texts))
    best = max(range(len(texts)), key=scores.total.__getitem__)
    assert texts[best] == "The night guard checks the quartz seal on the east gate every hour."
    assert 1 <= len(encoded) <= sentence_scorer.EXACT_EXTRA < len(chunks)
    assert any("quartz seal" in t for t in encoded)

    late.exact_pieces([(c.pk, c.text) for c in chunks])  # every chunk held: the scores of encoding them all
    located = sentence_scorer.passage_pieces(sentence_scorer.source_chunks([src]), [src], texts, [1] * len(texts),
                                             coarse=False)
    exact = sentence_scorer.score(question, texts, [1] * len(texts), [""] * len(texts),
                                  [None if at is None else at[0] for at in located])
    assert scores.total[best] == pytest.approx(exact.total[best], abs=1e-6)
    assert max(exact.total) == pytest.approx(scores.total[best], abs=1e-6)


@settings(max_examples=300, deadline=None)
@given(chunk_ids=st.lists(st.lists(st.integers(1, 6), max_size=40), min_size=1, max_size=3),
       ids=st.lists(st.integers(1, 7), min_size=1, max_size=25))
def test_aligning_a_sentence_finds_the_same_pieces_as_trying_every_walk(chunk_ids: list[list[int]],
                                                                       ids: list[int]) -> None:
    """`_aligned` stops walks that can no longer beat the best one (a table of Trac markup took 100+ ms);
    it must pick exactly the pieces the exhaustive search picks."""
    import numpy as np

    from chat import sentence_scorer

    chunks = [sentence_scorer._Pieces(c, sentence_scorer._as_text(c), np.arange(len(c), dtype=np.float32).reshape(-1, 1) + 100 * k)
              for k, c in enumerate(chunk_ids)]

    def exhaustive() -> Any:
        best: list[int] = []
        best_vectors = None
        for chunk in chunks:
            for first in range(min(3, len(ids))):
                for at in [i for i, t in enumerate(chunk.ids) if t == ids[first]]:
                    taken, nxt = [at], at + 1
                    for token in ids[first + 1:]:
                        window = chunk.ids[nxt : nxt + sentence_scorer.ALIGN_GAP]
                        if token in window:
                            nxt += window.index(token)
                            taken.append(nxt)
                            nxt += 1
                    if len(taken) > len(best):
                        best, best_vectors = taken, chunk.vectors
        if best_vectors is None or len(best) < max(2, sentence_scorer.ALIGN_SHARE * len(ids)):
            return None
        return best_vectors[best]

    located, expected = sentence_scorer._aligned(ids, chunks), exhaustive()
    assert (located is None and expected is None) or (located is not None and expected is not None
                                                      and located[0].tolist() == expected.tolist()
                                                      and {int(v) // 100 for v in located[0].ravel()} == {located[1]})


LAPTOPS = """# Equipment

## Laptops

Laptops are ordered by your team lead from the approved list of models.
Every laptop ordered this way is set up with disk encryption before it is handed over.
New starters receive their machine at the front desk on the morning they begin.
A broken laptop is swapped at the front desk the same day.
"""


def test_the_sentence_that_answers_in_other_words_leads(monkeypatch: Any) -> None:
    """Sentence scoring adds the cosine of the question's embedding with the mean of the sentence's
    stored piece vectors: "just joined … a computer" finds "new starters receive their machine", which
    shares no word with it, where piece matching alone leads with the first sentence on laptops."""
    from chat import sentence_scorer

    _, src = ingested_source(LAPTOPS, "equipment.md")
    prompt = build_prompt(question="just joined, when do I get a computer?", intent=CONCEPT, sources=[src])
    text = "".join(ExtractiveBackend().generate(prompt))
    assert text.startswith("New starters receive their machine at the front desk on the morning they begin [1]."), text
    monkeypatch.setattr(sentence_scorer, "POOLED_WEIGHT", 0.0)
    assert "".join(ExtractiveBackend().generate(prompt)).startswith("Laptops are ordered")
