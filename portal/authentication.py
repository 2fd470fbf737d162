"""DRF's authentication of personal API tokens (portal/tokens.py): ``Authorization: Token <token>``.
Kept apart from the API views: DRF imports this class while it builds ``APIView`` itself, so this
module may import nothing that imports the views."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from . import tokens

KEYWORD = "Token"


class ApiTokenAuthentication(BaseAuthentication):
    """``Authorization: Token <token>``: a personal token that is neither expired nor revoked,
    of an active user. Any other presented token is a 401 (never a fall-through to anonymous)."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        if len(parts) != 2:
            raise AuthenticationFailed(_("Invalid token header: give the token after the word Token."))
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed(_("Invalid token.")) from None
        found = tokens.token_user(raw)
        if found is None:
            raise AuthenticationFailed(_("Invalid, expired or revoked token."))
        return found

    def authenticate_header(self, request):
        return f'{KEYWORD} realm="api"'
