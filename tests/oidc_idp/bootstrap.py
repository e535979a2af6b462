"""Set up the test identity provider: `python -m tests.oidc_idp.bootstrap IDP_DIR key|db|client|user ...`.

Run in its own process (its own settings), as an IT admin would use the provider's console.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def make_key(directory: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (directory / "signing-key.pem").write_bytes(pem)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="signing key and database")
    client = sub.add_parser("client", help="register the knowledge base as a confidential client")
    client.add_argument("--id", required=True)
    client.add_argument("--secret", required=True)
    client.add_argument("--redirect", required=True)
    client.add_argument("--post-logout", required=True)
    user = sub.add_parser("user", help="create or update a person and set their groups")
    user.add_argument("username")
    user.add_argument("--password", required=True)
    user.add_argument("--email", default="")
    user.add_argument("--groups", default="", help="comma-separated; exactly these")
    args = parser.parse_args(argv)

    args.directory.mkdir(parents=True, exist_ok=True)
    if args.command == "init":
        make_key(args.directory)
    os.environ["IDP_DIR"] = str(args.directory)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_idp.settings"
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    if args.command == "init":
        call_command("migrate", verbosity=0)
    elif args.command == "client":
        Application.objects.update_or_create(
            client_id=args.id,
            defaults={
                "name": "Knowledge base",
                "client_secret": args.secret,
                "client_type": Application.CLIENT_CONFIDENTIAL,
                "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
                "redirect_uris": args.redirect,
                "post_logout_redirect_uris": args.post_logout,
                "algorithm": Application.RS256_ALGORITHM,
                "skip_authorization": True,
            },
        )
    else:
        person, _ = User.objects.get_or_create(username=args.username, defaults={"email": args.email})
        person.set_password(args.password)
        person.save()
        names = [n.strip() for n in args.groups.split(",") if n.strip()]
        person.groups.set([Group.objects.get_or_create(name=n)[0] for n in names])


if __name__ == "__main__":
    main(sys.argv[1:])
