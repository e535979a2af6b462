from django.urls import path

from kb import consumers

websocket_urlpatterns = [
    path("ws/library/", consumers.DocumentStatusConsumer.as_asgi()),
]
