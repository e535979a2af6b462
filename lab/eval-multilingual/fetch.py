#!/usr/bin/env python3
"""Download the multilingual set's documents into corpus/ (they are not kept in the repository).

    python lab/eval-multilingual/fetch.py

Each document is one file of a Debian 12 (bookworm) documentation package, taken unmodified
(only its name changes). The package versions and every file's SHA-256 are pinned below: a
file whose hash differs is refused, so the needles in questions.jsonl always point at the text
they were checked against. Needs `apt-get` and `dpkg-deb` (a Debian or Ubuntu machine whose APT
sources reach bookworm); it downloads the .deb files into a temporary folder and unpacks them
there with `dpkg-deb -x`, which installs nothing. Files already in place with the right hash
are left alone, so a second run downloads nothing.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"

PACKAGES = {  # Debian bookworm package -> pinned version
    "aptitude-doc-fr": "0.8.13-5",
    "aptitude-doc-es": "0.8.13-5",
    "aptitude-doc-ru": "0.8.13-5",
    "aptitude-doc-ja": "0.8.13-5",
    "debian-faq-fr": "11.1",
    "debian-faq-ru": "11.1",
    "debian-faq-ja": "11.1",
    "debian-reference-es": "2.100",
    "debian-reference-ja": "2.100",
    "maint-guide-es": "1.2.53",
    "maint-guide-ja": "1.2.53",
    "instead-doc-ru": "3.3.2-1.1",
}

DOCUMENTS = [  # (corpus path, package, path inside the package, SHA-256 of the file)
    ("everyone/aptitude-fr-commandes-menu.html", "aptitude-doc-fr",
     "usr/share/doc/aptitude/html/fr/ch02s01s02.html",
     "181ca6051dc7644ec092ed17316b64b8954b694dae6e38daa3badb524d16b56c"),
    ("everyone/aptitude-fr-couts-resolution.html", "aptitude-doc-fr",
     "usr/share/doc/aptitude/html/fr/ch02s03s04.html",
     "864ccfeadbdd444b920de51e8765858031612cb8ea64826e3e9716b460593601"),
    ("engineering/aptitude-fr-personnaliser-liste.html", "aptitude-doc-fr",
     "usr/share/doc/aptitude/html/fr/ch02s05s01.html",
     "9cc1a213f95d520ae0be88bb04754a50a6f605f785fa145cc9fc59ed829c4fae"),
    ("support/debian-faq-fr-outils-paquets.html", "debian-faq-fr",
     "usr/share/doc/debian/FAQ/fr/pkgtools.fr.html",
     "510b4736cea4cf8ec5c9eb8bffca3c819c8f33f37ff55097326ae9256a1febc6"),
    ("everyone/maint-guide-es-comprobar.html", "maint-guide-es",
     "usr/share/doc/maint-guide-es/html/checkit.es.html",
     "535ee98af5273a6c73672b00c2d62cea049e78f0b25c222f812cb28d229657f3"),
    ("engineering/maint-guide-es-modificar.html", "maint-guide-es",
     "usr/share/doc/maint-guide-es/html/modify.es.html",
     "f579e74e5e77bb0dbbb6861081dd6b8c891d702383ea7896137114326e97adac"),
    ("everyone/debian-reference-es-i18n.html", "debian-reference-es",
     "usr/share/debian-reference/ch08.es.html",
     "06ac43b9affbb9f84bc5dc49510e6541f03c5d610953f1ab2ed3fb8687a33746"),
    ("support/aptitude-es-gestionar-paquetes.html", "aptitude-doc-es",
     "usr/share/doc/aptitude/html/es/ch01s01s04.html",
     "55bc98524c9971d730d148d85cdaccf5169191357cc783c6ac6b9064f3c4e874"),
    ("everyone/debian-faq-ru-podderzhka.html", "debian-faq-ru",
     "usr/share/doc/debian/FAQ/ru/support.ru.html",
     "fc450f28db306c8563c94c3ce63f6c542c76acaad5a12818f770f407813e1e5b"),
    ("support/debian-faq-ru-obnovlenie.html", "debian-faq-ru",
     "usr/share/doc/debian/FAQ/ru/uptodate.ru.html",
     "f819d52cd07bca694e9d7c1be27416e874f33abddde5811613145a717c98a092"),
    ("engineering/instead-ru-moduli.pdf", "instead-doc-ru",
     "usr/share/doc/instead/manual/pdf/ru/modules3-ru.pdf",
     "ba5847cb6607082cd5f7d01628b21ed2e59316852a4e9b30197647fe05822bdf"),
    ("everyone/aptitude-ru-informatsiya.html", "aptitude-doc-ru",
     "usr/share/doc/aptitude/html/ru/ch02s02s02.html",
     "72d34a7f0bd4e48a82ef20a510f0d0cfc327dc8209e86f7b1d36d1351160b9cb"),
    ("everyone/maint-guide-ja-upload.html", "maint-guide-ja",
     "usr/share/doc/maint-guide-ja/html/upload.ja.html",
     "fb767dc10efb3c200050b2bd85f0301e990837b50715ad7691db3bb1dd355df9"),
    ("engineering/debian-reference-ja-init.html", "debian-reference-ja",
     "usr/share/debian-reference/ch03.ja.html",
     "4a6096cf181b02d33c3c6557d2d35b0aa03628c2b16370ee87f3ecb83c746109"),
    ("support/debian-faq-ja-customizing.html", "debian-faq-ja",
     "usr/share/doc/debian/FAQ/ja/customizing.ja.html",
     "1e8bd03ca44833660f5d3f64237dab10f33f32366f16df0c1202013f2ad37191"),
    ("everyone/aptitude-ja-trust.html", "aptitude-doc-ja",
     "usr/share/doc/aptitude/html/ja/ch02s02s05.html",
     "4de4035eabab9d6508a5376ca1b8d3d2fa5054e053a71f4dc05ba31ec4b33cf8"),
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def missing() -> list[tuple[str, str, str, str]]:
    """Documents not yet in corpus/ with their pinned hash."""
    return [d for d in DOCUMENTS if not (CORPUS / d[0]).is_file() or sha256(CORPUS / d[0]) != d[3]]


def fetch(todo: list[tuple[str, str, str, str]]) -> list[str]:
    """Download and unpack the packages `todo` needs, copy its files into corpus/; returns the problems."""
    problems = []
    packages = sorted({package for _, package, _, _ in todo})
    with tempfile.TemporaryDirectory(prefix="kb-eval-ml-") as tmp:
        work = Path(tmp)
        pinned = [f"{p}={PACKAGES[p]}" for p in packages]
        done = subprocess.run(["apt-get", "download", *pinned],  # noqa: S607  (apt-get from PATH)
                              cwd=work, capture_output=True, text=True)
        if done.returncode != 0:
            return [f"apt-get download {' '.join(pinned)} failed (a bookworm APT source is needed, and "
                    f"these exact versions; snapshot.debian.org keeps them): {done.stderr.strip()}"]
        for package in packages:
            debs = list(work.glob(f"{package}_*.deb"))
            if len(debs) != 1:
                problems.append(f"{package}: expected one .deb after apt-get download, found {len(debs)}")
                continue
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(work / package)], check=True)  # noqa: S607
        for rel, package, inner, digest in todo:
            source = work / package / inner
            if not source.is_file():
                problems.append(f"{rel}: {inner} is not in {package} {PACKAGES[package]}")
                continue
            if sha256(source) != digest:
                problems.append(f"{rel}: {package}'s {inner} has SHA-256 {sha256(source)}, pinned {digest}")
                continue
            target = CORPUS / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return problems


def main() -> int:
    todo = missing()
    problems = fetch(todo) if todo else []
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"corpus/: {len(DOCUMENTS)} documents in place ({len(todo)} fetched), hashes checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
