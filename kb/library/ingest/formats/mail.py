"""E-mail messages (.eml) through the standard library's parser.

The headers that identify a message (from, to, date, subject) open the text as
metadata lines; the body is the plain-text part where there is one, else the HTML
part; attachments are listed by name, type and size, never opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from kb.library.ingest.canonical import (
    EML,
    HTML,
    Block,
    Extracted,
    ExtractionError,
    ReadOptions,
    from_blocks,
    heading_block,
    read_as,
    reads,
)

if TYPE_CHECKING:
    from email.message import EmailMessage, MIMEPart

_HEADERS = ("From", "To", "Cc", "Date", "Subject")


@reads(EML)
def extract(data: bytes, name: str, options: ReadOptions) -> Extracted:
    import email
    import email.policy
    from email.message import EmailMessage

    message = email.message_from_bytes(data, _class=EmailMessage, policy=email.policy.default)
    if not any(message.get(h) for h in ("From", "To", "Subject", "Date", "Message-ID")):
        raise ExtractionError(f"{name}: cannot read e-mail: it has no From, To, Subject or Date header")
    subject = _header(message, "Subject")
    warnings: list[str] = []
    blocks = [heading_block(1, subject)] if subject else []
    meta = [f"{h}: {v}" for h in _HEADERS if h != "Subject" and (v := _header(message, h))]
    if meta:
        blocks.append(Block(text="\n".join(meta)))
    bodies = [message.get_body(preferencelist=(kind,)) for kind in ("plain", "html")]
    for body in bodies:  # the plain part, unless it is empty (some senders put all text in the HTML)
        if body is None:
            continue
        text = _content(body, warnings)
        if body.get_content_subtype() == "html":
            text = read_as(HTML, text.encode("utf-8"), name).text
        text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
        if text:
            blocks.append(Block(text=text))
            break
    attachments = [_attachment(part) for part in _parts(message) if part not in bodies and _is_attachment(part)]
    if attachments:
        blocks.append(Block(text="Attachments (not indexed):\n" + "\n".join(f"- {a}" for a in attachments)))
    return from_blocks(blocks, title=subject or None, warnings=warnings)


def _header(message: EmailMessage, name: str) -> str:
    try:
        return " ".join(str(message.get(name, "")).split())
    except (ValueError, LookupError):  # a malformed encoded word: keep the raw header
        return " ".join(str(message.get_all(name, [""])[0]).split())


def _content(part: MIMEPart, warnings: list[str]) -> str:
    try:
        return str(part.get_content())
    except (LookupError, UnicodeError):  # an unknown or wrong charset: keep every byte readable
        payload = part.get_payload(decode=True)
        warnings.append(f"the message body's charset ({part.get_content_charset()}) is unknown; read as Latin-1")
        return payload.decode("latin-1") if isinstance(payload, bytes) else str(payload)


def _parts(message: EmailMessage) -> Iterator[EmailMessage]:
    """The leaf parts and attached messages, without descending into an attached message."""
    for part in message.iter_parts():
        if part.get_content_maintype() == "multipart":
            yield from _parts(part)  # type: ignore[arg-type]
        else:
            yield part  # type: ignore[misc]


def _is_attachment(part: EmailMessage) -> bool:
    return bool(part.get_filename()) or part.get_content_disposition() == "attachment" or (
        part.get_content_maintype() not in ("text", "multipart")
    )


def _attachment(part: EmailMessage) -> str:
    payload = part.get_payload(decode=True)
    size = f", {_size(len(payload))}" if isinstance(payload, bytes) else ""
    return f"{part.get_filename() or '(unnamed)'} ({part.get_content_type()}{size})"


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.0f} KB" if n < 1024 * 1024 else f"{n / 1048576:.1f} MB"
