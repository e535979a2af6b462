from __future__ import annotations

from typing import Any, ClassVar

from oauth2_provider.oauth2_validators import OAuth2Validator


class GroupsClaimValidator(OAuth2Validator):
    """Adds the claims a company IdP sends: username, e-mail, and groups (with the `groups` scope)."""

    oidc_claim_scope: ClassVar[dict[str, str]] = {**OAuth2Validator.oidc_claim_scope, "groups": "groups"}

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "given_name": user.first_name,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }
