from django.urls import path

from kb.library import consumers

websocket_urlpatterns = [
    path("ws/library/", consumers.DocumentStatusConsumer.as_asgi()),
]
