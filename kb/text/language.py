"""Which language a text is written in, and how full-text search reads text in each language.

Detection is py3langid's (langid.py's model: 97 languages, numpy only), whose probabilities stay
calibrated on short texts: a question of five words is detected as reliably as a page.

Full-text search reads each chunk with PostgreSQL's text search configuration for its language
(`english`, `german`, `french`, ...: stemming and stop words), and the question with the same one.
A language PostgreSQL has no configuration for (Polish, Czech, Ukrainian, ...) is read by `simple`
over a derived text (`analysed`): accents folded and the inflectional endings of each word cut off,
so that "hasła" finds "hasło". Chinese and Japanese, written without spaces, become overlapping
character bigrams ("配置文件" → "配置 置文 文件") in every language's derived text, so a word of any
length is a phrase of bigrams that full-text and trigram search both find.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Collection, Sequence

# ISO 639-1 code -> PostgreSQL's text search configuration (pg_ts_config) for it; a language PostgreSQL
# has no configuration for is read by SIMPLE over `analysed` text. Which of these a server has depends on
# its version (`available_configs`): one it lacks falls back to SIMPLE as well.
CONFIGS = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "da": "danish", "nl": "dutch",
    "en": "english", "et": "estonian", "fi": "finnish", "fr": "french", "de": "german", "el": "greek",
    "hi": "hindi", "hu": "hungarian", "id": "indonesian", "ga": "irish", "it": "italian", "lt": "lithuanian",
    "ne": "nepali", "no": "norwegian", "nb": "norwegian", "nn": "norwegian", "pt": "portuguese",
    "ro": "romanian", "ru": "russian", "sr": "serbian", "es": "spanish", "sv": "swedish", "ta": "tamil",
    "tr": "turkish", "yi": "yiddish",
}
SIMPLE = "simple"
DEFAULT = "en"  # a text too short or too mixed to tell (a table of numbers, a code listing)
# Labels py3langid gives dialects and scripts of one written language, read as that language.
# Dialects folded into their language; the detector's "no linguistic content" (a code listing, markup) read as
# DEFAULT: MiniLM's pieces and English full text serve identifiers, and no other language's budget or space applies.
ALIASES = {"yue": "zh", "wuu": "zh", "nan": "zh", "hak": "zh", "gan": "zh", "lzh": "zh", "srl": "sr", "zxx": DEFAULT}
# Letters written without spaces between words: Han (with its extensions), Hiragana, Katakana, Hangul.
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u31f0-\u31ff]+")
WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
# Letters that Unicode does not decompose into a base letter and an accent.
_FOLD = str.maketrans({"ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "đ": "d", "Đ": "D", "ß": "ss", "æ": "ae",
                       "Æ": "AE", "œ": "oe", "Œ": "OE", "ı": "i", "þ": "th", "ð": "d"})
# Vowels (Latin after folding, Cyrillic, Greek) stripped from the end of a word of a SIMPLE language:
# the inflectional endings of Slavic and Baltic languages are mostly vowels ("hasło"/"hasła"/"haśle").
_VOWELS = "aeiouy" + "аеёиоуыэюяєіїьй" + "αεηιουω"
_KEEP = 3  # letters a stem keeps at least
CONFIDENT = 0.5  # a detection this probable is the text's language; below it, several are tried
PLAUSIBLE = 0.1  # a present language at least this probable is tried beside the detected one
CHUNK_CONFIDENT = 0.95  # a chunk is in another language than its document only when this sure
CHUNK_LETTERS = 60  # ...and only when it has this many letters (a caption, a code line cannot tell)
SAMPLE_CHARS = 20_000  # of a document's text, read from evenly spaced places: enough, at any length


@functools.cache
def _identifier() -> object:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier  # type: ignore[import-untyped]

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def probabilities(text: str) -> dict[str, float]:
    """Each language's probability for `text` (ISO 639-1 codes where one exists; dialects folded in)."""
    out: dict[str, float] = {}
    for label, p in _identifier().rank(text):  # type: ignore[attr-defined]
        code = ALIASES.get(label, label)
        out[code] = out.get(code, 0.0) + float(p)
    return out


def detect(text: str) -> tuple[str, float]:
    """The language of `text` and its probability; DEFAULT at 0.0 when it has no letters."""
    if not WORD.search(text):
        return DEFAULT, 0.0
    ranked = probabilities(text)
    best = max(ranked, key=ranked.__getitem__)
    return best, ranked[best]


def document_language(text: str) -> str:
    """A document's language, from up to SAMPLE_CHARS of its text taken at evenly spaced places."""
    if len(text) > SAMPLE_CHARS:
        step = len(text) // 10
        text = "\n".join(text[i : i + SAMPLE_CHARS // 10] for i in range(0, len(text), step))
    return detect(text)[0]


def chunk_languages(texts: Sequence[str], document: str) -> list[str]:
    """Each chunk's language: its document's, unless the chunk is long enough and confidently in another
    (a German section of an English handbook). Mixed documents are read per chunk; the rest cost one
    detection per chunk (~0.1 ms)."""
    out = []
    for text in texts:
        language = document
        if sum(len(w) for w in WORD.findall(text)) >= CHUNK_LETTERS:
            found, p = detect(text)
            if found != document and p >= CHUNK_CONFIDENT:
                language = found
        out.append(language)
    return out


@functools.cache
def available_configs() -> frozenset[str]:
    """The text search configurations this PostgreSQL server has (read once per process)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT cfgname FROM pg_ts_config")
        return frozenset(name for (name,) in cursor.fetchall())


def config_for(language: str) -> str:
    """The text search configuration chunks in `language` are read with."""
    config = CONFIGS.get(language, SIMPLE)
    return config if config in available_configs() else SIMPLE


def fold(word: str) -> str:
    """`word` without accents, lower-cased: "Zażółć" → "zazolc"."""
    decomposed = unicodedata.normalize("NFKD", word.translate(_FOLD))
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def light_stem(word: str) -> str:
    """A folded word without its final vowels, keeping at least _KEEP letters: "hasla" → "hasl"."""
    stem = word.rstrip(_VOWELS)
    return stem if len(stem) >= _KEEP else word[: max(_KEEP, len(stem))]


def bigrams(run: str) -> str:
    """A run of CJK letters as its overlapping character bigrams (a single letter stays itself)."""
    if len(run) < 2:
        return run
    return " ".join(run[i : i + 2] for i in range(len(run) - 1))


def analysed(text: str, config: str) -> str:
    """`text` as full-text search reads it under `config`: CJK runs as bigrams; for SIMPLE, every other
    word folded and stemmed (`light_stem`). Other configurations stem the words themselves."""
    spaced = CJK.sub(lambda m: f" {bigrams(m.group())} ", text) if CJK.search(text) else text
    if config != SIMPLE:
        return spaced
    return WORD.sub(lambda m: m.group() if CJK.fullmatch(m.group()) else light_stem(fold(m.group())), spaced)


def search_text(text: str, config: str) -> str:
    """What a chunk stores for full-text search beside its text: '' where that is the text itself."""
    derived = analysed(text, config)
    return "" if derived == text else derived


def question_languages(question: str, present: Collection[str]) -> list[str]:
    """The languages among `present` (those of the chunks the asker may read) whose configurations the
    question is matched under, most probable first. A confidently detected question is matched in its
    own language (and any present one nearly as probable); an uncertain one (a few words, a name) in
    every present language. [] when the question is confidently in a language no readable chunk is in:
    a cross-language question is left to the dense space, and the lexical list says nothing rather than
    match the question's words in a language it was not asked in. With no chunk at all, the question's own."""
    if not WORD.search(question):
        return sorted(present) or [DEFAULT]
    ranked = probabilities(question)
    best = max(ranked, key=ranked.__getitem__)
    if not present:
        return [best]
    ordered = sorted(present, key=lambda lang: (-ranked.get(lang, 0.0), lang))
    if ranked[best] < CONFIDENT:
        return ordered
    return [lang for lang in ordered if lang == best or ranked.get(lang, 0.0) >= PLAUSIBLE]


def question_configs(question: str, present: Collection[str]) -> list[tuple[str, str]]:
    """(configuration, the question as it reads it) for each configuration of `question_languages`, once."""
    configs = dict.fromkeys(config_for(lang) for lang in question_languages(question, present))
    return [(config, analysed(question, config)) for config in configs]
