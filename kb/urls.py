from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.i18n import JavaScriptCatalog

from accounts.views import LoginView, LogoutView, language
from chat import views as chat_views
from kb import metrics, views
from kb.api import api
from kb.library import views as library_views

handler500 = "kb.errors.server_error"

urlpatterns = [
    path("", chat_views.ask, name="ask"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("accounts/language", language, name="language"),
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),  # the scripts' gettext()
    path("library/", library_views.library, name="library"),
    path("library/upload", library_views.library_upload, name="library-upload"),
    path("library/documents/<int:pk>/retry", library_views.library_retry, name="library-retry"),
    path("documents/<int:pk>/", library_views.document_view, name="document"),
    path("documents/<int:pk>/download", library_views.document_download, name="document-download"),
    path("review/", chat_views.review, name="review"),
    path("review/curated/", chat_views.curated, name="curated"),
    path("gaps/", chat_views.gaps, name="gaps"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
]

if settings.KB_OIDC_ENABLED:
    urlpatterns.append(path("oidc/", include("mozilla_django_oidc.urls")))
