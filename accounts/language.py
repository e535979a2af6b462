"""The reader's language: their own choice (stored on their profile, so it follows them to every browser),
else the language cookie, else the browser's Accept-Language, else English. Only the interface follows it:
answers quote the documents in the documents' own words.

Pages get it from LanguageMiddleware; websockets and the answer workers from `scope_language` and
`language_for`, since neither runs inside a request.
"""

from __future__ import annotations

from collections.abc import Mapping
from http.cookies import CookieError, SimpleCookie
from typing import Any, Literal, cast

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.middleware.locale import LocaleMiddleware
from django.utils import translation
from django.utils.translation.trans_real import parse_accept_lang_header

from accounts.models import Profile


class UnknownLanguage(ValueError):
    """A language the interface is not translated into; the message lists the ones it is."""


def supported(code: str | None) -> str | None:
    """`code` as one of settings.LANGUAGES (pl-PL -> pl, zh-Hans-CN -> zh-hans), or None."""
    if not code:
        return None
    try:
        return translation.get_supported_language_variant(code.strip().lower())
    except LookupError:
        return None


def user_language(user: Any) -> str | None:
    """The language `user` chose, or None (they follow their browser)."""
    if user is None or not user.is_authenticated:
        return None
    return supported(Profile.objects.filter(user=user).values_list("language", flat=True).first())


def user_language_set(*, user: Any, language: str) -> str:
    """Store `user`'s choice of language (any variant of one of settings.LANGUAGES); returns its code."""
    code = supported(language)
    if code is None:
        known = ", ".join(c for c, _ in settings.LANGUAGES)
        raise UnknownLanguage(f"unknown language {language!r}; one of {known}")
    Profile.objects.update_or_create(user=user, defaults={"language": code})
    return code


def browser_language(*, cookie: str | None, accept: str) -> str:
    """What the browser asks for: the language cookie, else the first supported Accept-Language entry."""
    code = supported(cookie)
    if code:
        return code
    for wanted, _ in parse_accept_lang_header(accept):
        code = supported(wanted) if wanted != "*" else None
        if code:
            return code
    return settings.LANGUAGE_CODE


def language_for(user: Any) -> str:
    """`user`'s language where no browser is at hand (an answer's worker): their choice, else the default."""
    return user_language(user) or settings.LANGUAGE_CODE


def scope_language(scope: Mapping[str, Any]) -> str:
    """The language of a websocket's reader: their choice, else what the browser sent at the handshake."""
    chosen = user_language(scope.get("user"))
    if chosen:
        return chosen
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(headers.get("cookie", ""))
    except CookieError:  # a malformed Cookie header: as if it named no language
        cookies = SimpleCookie()
    cookie = cookies.get(settings.LANGUAGE_COOKIE_NAME)
    return browser_language(cookie=cookie.value if cookie else None, accept=headers.get("accept-language", ""))


def language_cookie(response: HttpResponseBase, code: str) -> None:
    """Remember `code` in the browser, for the pages it is shown signed out (the sign-in page)."""
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME, code, max_age=settings.LANGUAGE_COOKIE_AGE, path=settings.LANGUAGE_COOKIE_PATH,
        domain=settings.LANGUAGE_COOKIE_DOMAIN, secure=settings.LANGUAGE_COOKIE_SECURE,
        httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
        samesite=cast(Literal["Lax", "Strict", "None", False] | None, settings.LANGUAGE_COOKIE_SAMESITE),
    )


class LanguageMiddleware(LocaleMiddleware):
    """Django's LocaleMiddleware (cookie, then Accept-Language), with a signed-in user's own choice first.

    Where the user chose, the language cookie is set to it too, so the sign-in page after a logout,
    on any browser they have signed in with, is in their language.
    """

    def process_request(self, request: HttpRequest) -> None:
        chosen = user_language(request.user)
        request.kb_language_chosen = chosen  # type: ignore[attr-defined]
        if chosen is None:
            super().process_request(request)
            return
        translation.activate(chosen)
        request.LANGUAGE_CODE = chosen

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        response = super().process_response(request, response)
        chosen = getattr(request, "kb_language_chosen", None)
        name = settings.LANGUAGE_COOKIE_NAME
        if chosen and request.COOKIES.get(name) != chosen and name not in response.cookies:  # a new choice wins
            language_cookie(response, chosen)
        return response
