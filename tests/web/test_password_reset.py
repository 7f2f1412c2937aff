"""allauth's password reset (issue 41.17): not routed, and not offered, unless the console has a
mail server (AGENVOY_SMTP_URL); with one, a mail goes out and allauth's rate limit caps how
many one address or one mailbox gets."""

import importlib

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client, override_settings
from django.urls import clear_url_caches

pytestmark = pytest.mark.django_db

PASSWORD = "reset-pw-4117"


def _reload_urls() -> None:
    """The URLs as a process starting with the settings in force builds them."""
    import agenvoy_site.urls

    importlib.reload(agenvoy_site.urls)
    clear_url_caches()


@pytest.fixture
def mail_on():
    with override_settings(AGENVOY_MAIL=True):
        _reload_urls()
        yield
    _reload_urls()


@pytest.fixture
def person(db) -> User:
    return User.objects.create_user("rita", email="rita@example.com", password=PASSWORD)


def test_it_neither_routes_nor_offers_the_password_reset_without_mail(client, person):
    assert client.get("/accounts/password/reset/").status_code == 404
    assert client.post("/accounts/password/reset/", {"email": "rita@example.com"}).status_code == 404
    assert not mail.outbox
    assert "password/reset" not in client.get("/login/").content.decode()
    client.post("/login/", {"username": "rita", "password": PASSWORD})
    page = client.get("/accounts/reauthenticate/")
    assert page.status_code == 200 and "password/reset" not in page.content.decode()
    assert "Forgot" not in page.content.decode()


def test_it_offers_the_password_reset_with_mail_and_limits_it(mail_on, person):
    assert "/accounts/password/reset/" in Client().get("/login/").content.decode()
    answers = [
        Client().post("/accounts/password/reset/", {"email": "rita@example.com"}).status_code
        for _ in range(4)
    ]
    assert answers == [302, 302, 302, 429]
    assert len(mail.outbox) == 3 and mail.outbox[0].to == ["rita@example.com"]
