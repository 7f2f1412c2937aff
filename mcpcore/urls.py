from django.urls import path

from . import views

urlpatterns = [
    path("", views.servers, name="servers"),
    path("pending/", views.pending, name="pending"),
    path("history/", views.history, name="history"),
    path("tokens/", views.tokens, name="tokens"),
]
