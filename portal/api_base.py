"""Shared API plumbing: error shape, pagination, and list/detail views that read through
the visibility selectors and write through services.

Errors are ``{"detail": …}`` or field errors with status 400 (DESIGN §9). Services raise
Django's ``ValidationError`` / ``PermissionDenied``; the handler maps them so no view has
to, and nothing a service refuses can surface as a 500.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import translation
from drf_spectacular.utils import extend_schema, extend_schema_view
from drf_spectacular.views import SpectacularAPIView
from rest_framework import generics, serializers, status
from rest_framework.exceptions import (
    AuthenticationFailed,
    NotAuthenticated,
    PermissionDenied,
    ValidationError,
)
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .selectors import scope_for


def _as_drf(exc):
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return ValidationError(
                {field: [str(m) for e in errs for m in e.messages] for field, errs in exc.error_dict.items()}
            )
        return ValidationError({"detail": " ".join(str(m) for m in exc.messages)})
    if isinstance(exc, DjangoPermissionDenied):
        return PermissionDenied(str(exc) or None)
    return exc


def exception_handler(exc, context):
    response = drf_exception_handler(_as_drf(exc), context)
    request = context.get("request")
    token = request is not None and request.META.get("HTTP_AUTHORIZATION", "").startswith("Token ")
    if response is not None and token and isinstance(exc, (AuthenticationFailed, NotAuthenticated)):
        # DRF answers 403 when the first authenticator (the session) has no challenge; a token
        # that was presented and refused (deleted, its user deactivated) is a 401 for scripts.
        response.status_code = status.HTTP_401_UNAUTHORIZED
        response["WWW-Authenticate"] = 'Token realm="api"'
    return response


def _apply_schema(cls, methods: dict):
    decorated = {m: extend_schema(**kw) for m, kw in methods.items() if m in cls.http_method_names}
    if decorated:
        extend_schema_view(**decorated)(cls)


class ListCreateApi(generics.ListCreateAPIView):
    """GET lists the visible queryset (filtered, paginated); POST validates ``input`` and
    calls ``perform`` — a service call — inside one transaction."""

    output: type[serializers.Serializer]
    input: type[serializers.Serializer] | None = None
    http_method_names = ["get", "post", "head", "options"]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.input is None:
            cls.http_method_names = ["get", "head", "options"]
        _apply_schema(
            cls,
            {
                "get": {"responses": cls.output(many=True)},
                "post": {"request": cls.input, "responses": {201: cls.output}},
            },
        )

    def get_serializer_class(self):
        return self.input if self.request.method == "POST" else self.output

    def visible(self):
        raise NotImplementedError

    def get_queryset(self):
        return self.visible()

    def perform(self, data: dict):
        raise NotImplementedError

    def create(self, request, *args, **kwargs):
        serializer = self.input(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            obj = self.perform(serializer.validated_data)
        return Response(
            self.output(obj, context=self.get_serializer_context()).data, status=status.HTTP_201_CREATED
        )

    @property
    def scope(self):
        return scope_for(self.request.user)


class DetailApi(generics.RetrieveUpdateDestroyAPIView):
    """GET one visible object (404 otherwise); PATCH through ``update_object``; DELETE
    through ``delete_object``. Subclasses leave out what they do not support."""

    output: type[serializers.Serializer]
    input: type[serializers.Serializer] | None = None
    deletable = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        methods = ["get", "head", "options"]
        if cls.input is not None:
            methods.append("patch")
        if cls.deletable:
            methods.append("delete")
        cls.http_method_names = methods
        _apply_schema(
            cls,
            {
                "get": {"responses": cls.output},
                "patch": {"request": cls.input, "responses": cls.output},
                "delete": {"responses": {204: None}},
            },
        )

    def get_serializer_class(self):
        return self.input if self.request.method == "PATCH" and self.input else self.output

    def visible(self):
        raise NotImplementedError

    def get_queryset(self):
        return self.visible()

    def update_object(self, obj, data: dict):
        raise NotImplementedError

    def delete_object(self, obj) -> None:
        raise NotImplementedError

    def update(self, request, *args, **kwargs):
        obj = self.get_object()
        serializer = self.input(data=request.data, partial=True, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            obj = self.update_object(obj, serializer.validated_data)
        return Response(self.output(obj, context=self.get_serializer_context()).data)

    def destroy(self, request, *args, **kwargs):
        obj = self.get_object()
        with transaction.atomic():
            self.delete_object(obj)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @property
    def scope(self):
        return scope_for(self.request.user)


class EnglishSchemaView(SpectacularAPIView):
    """``/api/schema/``, always in English. The schema is for programs (clients, generators,
    docs/api.md); rendered in the caller's language it mixed Chinese titles (model field names)
    with English descriptions (docstrings). It is rendered inside the override: the schema
    holds lazy translations that the renderer evaluates."""

    def dispatch(self, request, *args, **kwargs):
        with translation.override("en"):
            response = super().dispatch(request, *args, **kwargs)
            if hasattr(response, "render") and not getattr(response, "is_rendered", True):
                response.render()
        response["Content-Language"] = "en"
        return response
