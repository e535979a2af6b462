"""HTTP (Django, with the app's own static files) and websockets (Channels) on one Daphne."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")

from django.core.asgi import get_asgi_application

django_asgi_app = get_asgi_application()  # before anything imports models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from chat.routing import websocket_urlpatterns as chat_websockets  # noqa: E402
from kb.edge import BoundedRequests  # noqa: E402
from kb.routing import websocket_urlpatterns as kb_websockets  # noqa: E402

websocket_urlpatterns = [*kb_websockets, *chat_websockets]

application = BoundedRequests(
    ProtocolTypeRouter(
        {
            "http": ASGIStaticFilesHandler(django_asgi_app),
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
