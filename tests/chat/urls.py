"""The project's URLs plus the chat router on a test API with the project's auth.

Used by the API tests through @pytest.mark.urls so they run whether or not kb/api.py
mounts the chat router yet (kb/api.py: `api.add_router("/", "chat.api.router")`).
"""

from django.urls import path
from ninja import NinjaAPI

from accounts.api import api_auth
from chat.api import router
from kb.urls import urlpatterns as project_urlpatterns

api = NinjaAPI(title="chat test API", auth=api_auth(), urls_namespace="chat-test-api")
api.add_router("/", router)

urlpatterns = [path("api/", api.urls), *project_urlpatterns]
