"""REST API of webhooks (issue 24 item 7, docs/notifications.md): a user's own hooks and the
hooks of the projects they may edit; another's answer 404. The secret is write-only."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import Throttled
from rest_framework.response import Response
from rest_framework.views import APIView

from . import webhooks
from .api import VisibleRelatedField
from .api_base import DetailApi, ListCreateApi
from .models import NotificationTopic, Webhook, WebhookDelivery, WebhookKind
from .selectors import get_visible
from .webhook_delivery import TooManyTestSends, webhook_test_send
from .webhook_formats import masked_url


class WebhookOut(serializers.ModelSerializer):
    url = serializers.SerializerMethodField(help_text="Robot keys and tokens in the URL are cut short.")
    has_secret = serializers.SerializerMethodField(help_text="The secret itself is never shown back.")
    owner = serializers.SerializerMethodField(help_text='"user" (your own hook) or "project".')

    class Meta:
        model = Webhook
        fields = ["id", "name", "kind", "url", "has_secret", "topics", "language", "active", "owner",
                  "project", "created_at"]

    def get_url(self, obj) -> str:
        return masked_url(obj.url)

    def get_has_secret(self, obj) -> bool:
        return bool(obj.secret)

    def get_owner(self, obj) -> str:
        return "project" if obj.project_id else "user"


class WebhookUpdateIn(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    url = serializers.CharField(max_length=500, help_text="https; a host in GPUPOOL_WEBHOOK_ALLOW_HOSTS "
                                "may use http and a private address.")
    secret = serializers.CharField(
        max_length=200, required=False, allow_blank=True, write_only=True,
        help_text="DingTalk signing secret, Feishu signature secret, or the JSON HMAC key (required for "
        "json). Omitted or blank on update: the saved one stays.",
    )
    topics = serializers.ListField(
        child=serializers.ChoiceField(choices=NotificationTopic.choices), required=False,
        help_text="The topics wanted; empty: all.",
    )
    language = serializers.ChoiceField(choices=settings.LANGUAGES, required=False)
    active = serializers.BooleanField(required=False)


class WebhookIn(WebhookUpdateIn):
    kind = serializers.ChoiceField(choices=WebhookKind.choices)
    project = VisibleRelatedField(
        webhooks.managed_projects, allow_null=True, required=False,
        help_text="A project you may edit (its hook); null or omitted: your own hook.",
    )


class WebhookListApi(ListCreateApi):
    """My own webhooks and those of the projects I may edit."""

    output, input = WebhookOut, WebhookIn
    filterset_fields = ["project", "kind", "active"]

    def visible(self):
        return webhooks.visible_webhooks(self.request.user).order_by("id")

    def perform(self, data):
        return webhooks.webhook_create(actor=self.request.user, **data)


class WebhookDetailApi(DetailApi):
    output, input, deletable = WebhookOut, WebhookUpdateIn, True

    def visible(self):
        return webhooks.visible_webhooks(self.request.user)

    def update_object(self, obj, data):
        return webhooks.webhook_update(actor=self.request.user, webhook=obj, **data)

    def delete_object(self, obj):
        webhooks.webhook_delete(actor=self.request.user, webhook=obj)


class DeliveryOut(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = ["id", "notification", "attempt", "status", "http_status", "error", "created_at",
                  "next_attempt_at", "at"]


class WebhookTestApi(APIView):
    """Send a test message now (one attempt, no retries) and answer with its log row. At most 5
    test messages a minute per user, all hooks together: beyond, 429 with ``Retry-After``."""

    @extend_schema(request=None, responses={201: DeliveryOut})
    def post(self, request, pk):
        hook = get_visible(webhooks.visible_webhooks(request.user), pk=pk)
        try:
            row = webhook_test_send(actor=request.user, webhook=hook)
        except TooManyTestSends as exc:
            raise Throttled(wait=exc.wait) from None
        return Response(DeliveryOut(row).data, status=201)


class WebhookDeliveriesApi(APIView):
    """The hook's delivery log: its last 50 attempts, newest first."""

    @extend_schema(responses=DeliveryOut(many=True))
    def get(self, request, pk):
        hook = get_visible(webhooks.visible_webhooks(request.user), pk=pk)
        return Response(DeliveryOut(webhooks.webhook_log(hook), many=True).data)
