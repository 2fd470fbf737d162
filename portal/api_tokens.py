"""Personal API tokens over HTTP (portal/tokens.py, docs/identity.md "API tokens"): a user's own
tokens — list, make (the answer is the only place the token is ever shown), revoke. Another
user's token answers 404. Their authentication is ``portal.authentication``."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from . import tokens
from .api_base import DetailApi, ListCreateApi
from .models import ApiToken


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """The schema's word for ``portal.authentication.ApiTokenAuthentication`` (named as DRF's
    token authentication was, so clients generated from the schema keep their names)."""

    target_class = "portal.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": 'A personal API token with the prefix "Token": `Authorization: Token gpp_…`.'}


class ApiTokenOut(serializers.ModelSerializer):
    expired = serializers.SerializerMethodField(help_text="Past its expiry: it no longer works.")
    token = serializers.SerializerMethodField(
        help_text="The token itself, in the answer that made it and nowhere else (null in every "
        "other answer)."
    )

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "expired", "token"]

    def get_expired(self, obj) -> bool:
        return obj.expires_at <= self.context["now"]

    @extend_schema_field({"type": "string", "nullable": True})
    def get_token(self, obj):
        return getattr(obj, "secret", None)


class ApiTokenIn(serializers.Serializer):
    name = serializers.CharField(max_length=80, help_text="What will use it (a script, a notebook).")
    expires_in_days = serializers.IntegerField(
        required=False, default=tokens.DEFAULT_DAYS,
        help_text=f"Days it works, from 1 to GPUPOOL_API_TOKEN_MAX_DAYS (365 unless the centre says); "
        f"default {tokens.DEFAULT_DAYS}.",
    )


class _Now:
    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": timezone.now()}


class ApiTokenListApi(_Now, ListCreateApi):
    """My API tokens (not revoked; expired ones too). POST makes one: its ``token`` is shown in
    this answer only — store it now."""

    output, input = ApiTokenOut, ApiTokenIn

    def visible(self):
        return tokens.visible_api_tokens(self.request.user)

    def perform(self, data):
        issued = tokens.api_token_create(actor=self.request.user, **data)
        issued.token.secret = issued.secret
        return issued.token


class ApiTokenDetailApi(_Now, DetailApi):
    """One of my API tokens; DELETE revokes it (at once, for good)."""

    output, deletable = ApiTokenOut, True

    def visible(self):
        return tokens.visible_api_tokens(self.request.user)

    def delete_object(self, obj):
        tokens.api_token_revoke(actor=self.request.user, token=obj)
