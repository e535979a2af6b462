from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from kb import views
from kb.api import api

urlpatterns = [
    path("", views.ask, name="ask"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("library/", views.library, name="library"),
    path("library/upload", views.library_upload, name="library-upload"),
    path("library/documents/<int:pk>/retry", views.library_retry, name="library-retry"),
    path("documents/<int:pk>/", views.document_view, name="document"),
    path("documents/<int:pk>/download", views.document_download, name="document-download"),
    path("review/", views.review, name="review"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
]
