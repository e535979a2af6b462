"""No model: the answer is the sources' own sentences, led by the one that answers the question.

Deterministic (same question, sources and index, same answer, byte for byte) and fast, so
it is the default for `make run` and the tests. It cannot invent anything, and it cannot
rephrase either.

Choosing the sentence is where an extractive answer is won or lost: the passages that reach
it usually hold the answer, but the sentence sharing most words with the question is often
a neighbour of the one that answers. So every sentence of the sources is scored with
chat.sentence_scorer (late interaction at sentence level plus coverage of the question's rare
words), the best one leads, and it keeps the sentences it depends on: the one before a
sentence that opens with "This option…" or "To do so…", the list or code a sentence ending
in ":" introduces. A how-to question answered by a numbered list, or by a section of
instructions, gets ordered steps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from chat import sentence_scorer
from chat.claim_support import terms
from chat.prompts import Prompt, Source
from kb.text.sentences import BULLET, INTRODUCES
from kb.text.sentences import split as split_sentences

MAX_CHARS = 450  # runners-up join while the answer stays under this (mean answer on ../shared/eval: ~380 characters)
MAX_PICKS = 6  # the lead and the best-scored runners-up (each with the sentences it depends on)
CONSIDERED = 8  # runners-up come from the best-scored sentences only
RUNNER_UP_GAP = 0.45  # ...and only when they score within this of the lead: no padding with other topics
# ...and only when they (or their section heading) hold at least one of the question's rare words: a sentence
# that merely sounds like the domain ("Saved filters appear in the Views menu" for an export question) is not
# an answer, and late-interaction scores alone sit close together inside one manual.
NEAR_DUPLICATE = 0.8  # ...nor when they repeat a quoted sentence: this share of their content words in common
MAX_SENTENCE_CHARS = 500
WRAPPED = 60  # a line this long that ends mid-sentence was wrapped by its writer: the next one continues it
MAX_STEPS = 8
LEANS_BACK = 2  # sentences a dependent opener may bring before it, when the one it leans on is dependent too
PROCEDURE_BONUS = 0.3
# A sentence inside the range that answered a question like this one before (a judge's verdict, search.memory)
# leads: the judge read it, the scorer only guesses.
REMEMBERED_BONUS = 1.0

HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")
NUMBERED = re.compile(r"^\s*(\d{1,2})[.)]\s+")
LIST_LINE = re.compile(r"^(?:\d{1,2}\.|•) ")  # a quoted list item's line: it starts a line of the answer
IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
TAG = re.compile(r"</?[a-zA-Z][^<>\n]*>")
# A Markdown link reads as its text: its target (often a site generator's `{% page "…" %}`) means nothing
# in a quoted answer, whose [n] already links to the passage.
LINK = re.compile(r"\[([^\]\n]+)\]\((?:[^()\n]|\([^()\n]*\))*\)")
# ...and so does a reference-style one, "[separate etcd cluster][etcd-events]" (not an index: `rows[0][1]`).
REFERENCE_LINK = re.compile(r"(?<![\w\]])\[([^\]\n]*[A-Za-z][^\]\n]*)\]\[[^\]\n]*\]")
# Bold in Markdown, bold and italics in wiki markup ("hit **Submit**", "''custom ticket queries''") read as
# their words; a code span keeps what it quotes (`a**2`, `x = ''`).
EMPHASIS = re.compile(r"(\*\*|'''|'')(?=\S)(.+?)(?<=\S)\1")
CODE_SPAN = re.compile(r"(`[^`\n]*`)")
# A sentence that opens like this leans on the one before it.
DEPENDENT = re.compile(
    r"^(?:this|these|that|those|it|its|they|their|such|then|otherwise|however|also|if so|if it does|"
    r"to do (?:so|this)|in (?:that|this) case|for (?:that|this)|here|there)\b", re.IGNORECASE)
# ...and one that opens like this carries out the one before it ("… can be copied as tab-separated values." /
# "To do so, click …"): it comes along with it.
CARRIES_OUT = re.compile(r"^(?:to do (?:so|this|that)|then)\b", re.IGNORECASE)
COMMAND = "$ "  # a shell prompt: a cheat sheet's or man page's command line, described by the line after it
HOW_TO = re.compile(r"\b(?:how (?:do|can|should|to|would)\b|steps?\b|procedure|walk me through|what do i do\b)",
                    re.IGNORECASE)


@dataclass(frozen=True)
class Unit:
    """One sentence, list item, table row or code line of a source, with where it sits."""

    number: int  # the source
    position: int  # order within the source
    text: str
    block: int  # paragraph, list or code block it belongs to
    kind: str  # "prose", "item", "step" (numbered item), "row", "code"
    ordinal: int = 0  # a numbered item's own number in the source


def _clean(line: str) -> str:
    line = TAG.sub("", LINK.sub(r"\1", IMAGE.sub("", line)))
    line = "".join(part if part.startswith("`") else EMPHASIS.sub(r"\2", REFERENCE_LINK.sub(r"\1", part))
                   for part in CODE_SPAN.split(line))
    return " ".join(line.split())


def _continues(line: str, following: str) -> bool:
    """Whether `following` goes on from `line` (a hard-wrapped sentence) rather than starting a line of
    its own: it opens in lower case, `line` leaves a parenthesis open ("… balance (see" / "[Types of
    Accounts](…))."), or `line` is a long one stopped short of any punctuation. A PDF's command and
    description lines ("$ git log" / "Lists version history…") stay apart."""
    if following[0].islower() or line.count("(") > line.count(")"):
        return True
    return len(line) >= WRAPPED and line[-1] not in ".!?:;" and (following[0].isalnum() or following[0] in "[(`*_\"'")


def units(number: int, text: str) -> list[Unit]:
    """The source as units: headings and table rules skipped, bullets and table pipes undone, code kept whole.

    A wrapped paragraph or list item is read as one, so a sentence that runs over two lines is one
    sentence, not two fragments (see `_continues`).
    """
    out: list[Unit] = []
    block = 0
    fence: list[str] | None = None
    previous = "blank"
    pending: list[str] = []  # the lines of the paragraph or list item being read

    ordinal = 0

    def add(piece: str, kind: str) -> None:
        if len(piece) > MAX_SENTENCE_CHARS:
            piece = piece[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
        out.append(Unit(number, len(out), piece, block, kind, ordinal if kind == "step" else 0))

    def flush() -> None:
        if pending:
            cleaned = _clean(" ".join(pending))
            for piece in split_sentences(cleaned) if previous == "prose" else [cleaned]:
                if piece.strip():
                    add(piece.strip(), previous)
            pending.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            if fence is None:
                fence, block = [], block + 1
            else:
                code = " ".join(" ".join(fence).split())
                if code:
                    add(code, "code")
                fence = None
            previous = "blank"
            continue
        if fence is not None:
            fence.append(stripped)
            continue
        if not stripped or HEADING.match(line) or TABLE_RULE.match(stripped):
            flush()
            previous = "blank"
            continue
        own = 0
        if stripped.startswith("|"):
            kind = "row"
            stripped = sentence_scorer.ROW_JOINER.join(cell.strip() for cell in stripped.strip("|").split("|") if cell.strip())
        elif BULLET.match(stripped):
            numbered = NUMBERED.match(stripped)
            kind, own = ("step", int(numbered.group(1))) if numbered else ("item", 0)
            stripped = BULLET.sub("", stripped)
        elif previous in ("prose", "item", "step") and _continues(pending[-1], stripped):
            pending.append(stripped)  # the paragraph or item goes on
            continue
        else:
            kind = "prose"
        flush()
        ordinal = own
        # A list or table stays one block across its items; prose starts a block after a blank line.
        if previous == "blank" or (kind != previous and not {kind, previous} <= {"item", "step"}):
            block += 1
        previous = kind
        pending.append(stripped)
    flush()
    return out


def sentences(text: str) -> list[str]:
    """The readable pieces of a source text, in order (what `units` yields, without the structure)."""
    return [u.text for u in units(1, text)]


def _cite(sentence: str, number: int) -> str:
    """The marker goes before the sentence's closing punctuation: "… CSV and PDF [1]."."""
    match = re.search(r"[.!?…:]+[\"')\]]*$", sentence)
    if match and not sentence.endswith(" …"):
        return f"{sentence[: match.start()]} [{number}]{sentence[match.start():]}"
    return f"{sentence} [{number}]"


def _line(unit: Unit, marker: str | None = None) -> str:
    """A quoted unit as a line of the answer; a list item keeps its own number, or a bullet (`marker`
    overrides both)."""
    if unit.kind == "code":
        return f"`{unit.text}` [{unit.number}]"
    if marker is None:
        marker = f"{unit.ordinal}." if unit.ordinal else "•" if unit.kind in ("item", "step") else ""
    return f"{marker} {_cite(unit.text, unit.number)}" if marker else _cite(unit.text, unit.number)


def _with_context(best: Unit, all_units: Sequence[Unit]) -> list[Unit]:
    """`best` and what it depends on: the sentence before a dependent opener, what a colon introduces,
    the sentence after that carries it out, the description after a command."""
    same = [u for u in all_units if u.number == best.number]
    i = same.index(best)
    chosen = [best]
    # "This is a great way to fix typos" leans on "This will mass-edit every cell", which leans on the one before.
    at = i
    while at > 0 and at > i - LEANS_BACK and DEPENDENT.match(same[at].text) and same[at - 1].kind in ("prose", best.kind):
        at -= 1
        chosen.insert(0, same[at])
    if best.kind == "row" and i > 0 and same[0].kind == "row" and same[0] is not best:
        chosen.insert(0, same[0])  # a table row reads with its header
    if best.text.endswith(INTRODUCES) and i + 1 < len(same):
        follows = same[i + 1]
        # What a colon introduces comes whole: every item of the list, the code, the table.
        chosen.extend([u for u in same[i + 1:] if u.block == follows.block][:MAX_STEPS]
                      if follows.kind != "prose" else [follows])
    elif i + 1 < len(same) and (same[i + 1].kind, same[i + 1].block) == (best.kind, best.block) \
            and CARRIES_OUT.match(same[i + 1].text):
        chosen.append(same[i + 1])
    elif (best.kind == "code" or best.text.startswith(COMMAND)) and i + 1 < len(same) and same[i + 1].kind == "prose" \
            and not same[i + 1].text.startswith(COMMAND):
        chosen.append(same[i + 1])  # what the command does: "$ git log --follow [file]" / "Lists version history…"
    return chosen


def _steps(best: Unit, all_units: Sequence[Unit]) -> list[Unit] | None:
    """Ordered steps for a how-to question: the numbered list holding `best`, or the section of instructions
    (prose and commands, in order) holding it. None when there are none."""
    same = [u for u in all_units if u.number == best.number]
    if best.kind == "step":
        return _whole([u for u in same if u.block == best.block and u.kind == "step"][:MAX_STEPS], same)
    # A section of instructions reads from its start: later commands refer to earlier ones.
    run = _whole([u for u in same if u.kind in ("prose", "code", "step")][:MAX_STEPS], same)
    # Instructions mean at least one command or numbered step, or several sentences to follow.
    return run if len(run) >= 3 and any(u.kind in ("code", "step") for u in run) else None


def _whole(run: list[Unit], same: Sequence[Unit]) -> list[Unit]:
    """`run` cut at MAX_STEPS, but never after a colon: the last step keeps the command it introduces."""
    if not run or not run[-1].text.endswith(INTRODUCES):
        return run
    after = same.index(run[-1]) + 1
    if after < len(same) and same[after] not in run:
        run.extend([u for u in same[after:] if u.block == same[after].block][:MAX_STEPS])
    return run


def _repeats(unit: Unit, quoted: set[Unit]) -> bool:
    """A runner-up that says again what the answer already quotes (another page's copy of the same
    sentence) spends the budget on nothing."""
    mine = terms(unit.text)
    return bool(mine) and any(len(mine & (theirs := terms(u.text))) >= NEAR_DUPLICATE * len(mine | theirs)
                              for u in quoted)


def _remembered(sources: Sequence[Source], all_units: Sequence[Unit]) -> set[int]:
    """The units (by index) that lie in a source's remembered ranges (Source.remembered), read as the answer reads
    them (cleaned, whitespace folded): a unit is in when its text is in the range's, or the range's in it."""
    ranges: dict[int, list[str]] = {}
    for source in sources:
        for low, high in source.remembered:
            piece = _clean(source.text[max(0, low - source.start): max(0, high - source.start)])
            if piece:
                ranges.setdefault(source.number, []).append(piece)
    return {i for i, u in enumerate(all_units)
            if any(u.text.rstrip(" …") in piece or piece in u.text for piece in ranges.get(u.number, ()))}


def compose(prompt: Prompt) -> list[list[str]]:
    """The answer's paragraphs: the best sentence with its context first, then the runner-up passage."""
    all_units = [u for source in prompt.sources for u in units(source.number, source.text)]
    if not all_units:
        return []
    labels = {source.number: source.label.rsplit(">", 1)[-1] for source in prompt.sources}
    texts, numbers = [u.text for u in all_units], [u.number for u in all_units]
    scored = sentence_scorer.sources_scores(prompt.question, prompt.sources, texts, numbers,
                                            [labels[u.number] for u in all_units])
    how_to = bool(HOW_TO.search(prompt.question))
    # A how-to question is answered by instructions: sources holding commands or numbered steps come first,
    # when their section is on the question's topic (its headings below the document's title hold one of
    # the question's rare words): the steps for ordering business cards do not answer how to be paid by
    # direct deposit.
    steps_in = sorted({u.number for u in all_units if u.kind in ("code", "step")}) if how_to else []
    sections = {source.number: source.label.split(">", 1)[-1] for source in prompt.sources}
    topical = sentence_scorer.on_topic(prompt.question, [sections[n] for n in steps_in], scored.rare)
    procedural = {number for number, on_topic in zip(steps_in, topical, strict=True) if on_topic}
    remembered = _remembered(prompt.sources, all_units)
    total = [t + (PROCEDURE_BONUS if u.number in procedural else 0.0) + (REMEMBERED_BONUS if i in remembered else 0.0)
             for i, (t, u) in enumerate(zip(scored.total, all_units, strict=True))]
    order = sorted(range(len(all_units)), key=lambda i: (-total[i], all_units[i].number, i))
    best = all_units[order[0]]
    steps = _steps(best, all_units) if how_to else None
    if steps:
        # The source's own numbers where it numbers the steps, else ours.
        # Where the source numbers its steps, those numbers and nothing else (the sentence that introduces the
        # list is not a step); else ours. A command belongs to the step that introduces it, not a step of its own.
        own = any(u.ordinal for u in steps)
        lead, k = [], 0
        for u in steps:
            k += u.kind != "code"
            lead.append(_line(u) if u.kind == "code" or own else _line(u, f"{k}."))
        paragraphs = [["\n".join(lead)]]
        used = set(steps)
    else:
        grouped: dict[int, list[str]] = {}  # source number -> its quoted lines, sources in the order first picked
        used, size, picks = set(), 0, 0
        for i in order[:CONSIDERED]:
            unit = all_units[i]
            if unit in used or (grouped and (total[i] < total[order[0]] - RUNNER_UP_GAP
                                             or not scored.coverage[i] or _repeats(unit, used))):
                continue
            fresh = [u for u in _with_context(unit, all_units) if u not in used]
            grown = size + sum(len(u.text) for u in fresh)
            if grouped and grown > MAX_CHARS:
                continue
            grouped.setdefault(unit.number, []).extend(_line(u) for u in fresh)
            used.update(fresh)
            size, picks = grown, picks + 1
            if picks >= MAX_PICKS:
                break
        paragraphs = list(grouped.values())
    return paragraphs


class ExtractiveBackend:
    name = "extractive"
    model = "extractive (no language model)"
    notice = "Quoted from the sources without a language model."

    def generate(self, prompt: Prompt) -> Iterator[str]:
        # Sentence by sentence, as a model would stream it.
        for i, paragraph in enumerate(compose(prompt)):
            for j, sentence in enumerate(paragraph):
                listed = j and (LIST_LINE.match(sentence) or LIST_LINE.match(paragraph[j - 1]))
                yield ("\n\n" if i and not j else "\n" if listed else " " if j else "") + sentence

    def release(self) -> None:
        return None
