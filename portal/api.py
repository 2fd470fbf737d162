"""REST API of tenancy (DESIGN §1, §9). Views read through selectors and write through
services; serializers are the contract."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate
from django.db.models import Count
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from . import directory, services, signin, tokens
from . import permissions as perm
from .api_base import DetailApi, ListCreateApi
from .models import (
    AGING_BOUND_MAX_SECONDS,
    AGING_BOUND_MIN_SECONDS,
    USER_CAP_MAX,
    Department,
    Directory,
    DirectoryRule,
    Membership,
    Project,
    ProjectMove,
    Queueing,
    Role,
    User,
)
from .security import client_address
from .selectors import (
    get_visible,
    scope_for,
    visible_departments,
    visible_directory_rules,
    visible_memberships,
    visible_projects,
)


@extend_schema_field(OpenApiTypes.INT)
class VisibleRelatedField(serializers.PrimaryKeyRelatedField):
    """A foreign key the caller can only point at objects they can see; anything else
    reads as "does not exist", the same answer as for a missing id."""

    def __init__(self, selector, **kwargs):
        self.selector = selector
        super().__init__(**kwargs)

    def get_queryset(self):
        return self.selector(self.context["request"].user)


class DepartmentOut(serializers.ModelSerializer):
    class Meta:
        model = Department
        fields = ["id", "code", "name", "parent", "cost_centre", "created_at"]


class DepartmentIn(serializers.Serializer):
    code = serializers.CharField(max_length=40)
    name = serializers.CharField(max_length=120)
    parent = VisibleRelatedField(visible_departments, allow_null=True, required=False)
    cost_centre = serializers.CharField(max_length=40, required=False, allow_blank=True)


class DepartmentListApi(ListCreateApi):
    output, input = DepartmentOut, DepartmentIn
    filterset_fields = ["parent", "code"]

    def visible(self):
        return visible_departments(self.request.user).order_by("code")

    def perform(self, data):
        return services.department_create(
            actor=self.request.user,
            code=data["code"],
            name=data["name"],
            parent=data.get("parent"),
            cost_centre=data.get("cost_centre", ""),
        )


class DepartmentDetailApi(DetailApi):
    output, input, deletable = DepartmentOut, DepartmentIn, True

    def visible(self):
        return visible_departments(self.request.user)

    def update_object(self, obj, data):
        return services.department_update(actor=self.request.user, department=obj, **data)

    def delete_object(self, obj):
        services.department_delete(actor=self.request.user, department=obj)


class ProjectOut(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = ["id", "code", "name", "department", "description", "active", "queueing",
                  "aging_bound_seconds", "user_gpu_cap", "user_running_jobs_cap", "created_at"]


class ProjectIn(serializers.Serializer):
    code = serializers.CharField(max_length=40)
    name = serializers.CharField(max_length=120)
    department = VisibleRelatedField(visible_departments)
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    active = serializers.BooleanField(required=False)
    # docs/scheduling.md, "Queueing strategies": set by whoever sets the project's quota.
    queueing = serializers.ChoiceField(choices=Queueing.choices, required=False)
    aging_bound_seconds = serializers.IntegerField(
        required=False, allow_null=True, min_value=AGING_BOUND_MIN_SECONDS, max_value=AGING_BOUND_MAX_SECONDS,
        help_text="Seconds a job may wait before it blocks the project's later jobs; null: the centre's "
                  "default.",
    )
    # DESIGN §16: what one user's running jobs of the project may hold (null: no cap).
    user_gpu_cap = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=USER_CAP_MAX,
        help_text="GPUs one user's running jobs of the project may hold; null: no cap.",
    )
    user_running_jobs_cap = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=USER_CAP_MAX,
        help_text="Jobs one user may run in the project at once; null: no cap.",
    )


class ProjectListApi(ListCreateApi):
    output, input = ProjectOut, ProjectIn
    filterset_fields = ["department", "code", "active"]

    def visible(self):
        return visible_projects(self.request.user).order_by("code")

    def perform(self, data):
        return services.project_create(
            actor=self.request.user,
            code=data["code"],
            name=data["name"],
            department=data["department"],
            description=data.get("description", ""),
            queueing=data.get("queueing", Queueing.BEST_EFFORT),
            aging_bound_seconds=data.get("aging_bound_seconds"),
            user_gpu_cap=data.get("user_gpu_cap"),
            user_running_jobs_cap=data.get("user_running_jobs_cap"),
        )


class ProjectDetailApi(DetailApi):
    output, input = ProjectOut, ProjectIn

    def visible(self):
        return visible_projects(self.request.user)

    def update_object(self, obj, data):
        return services.project_update(actor=self.request.user, project=obj, **data)


class ProjectMoveIn(serializers.Serializer):
    department = VisibleRelatedField(visible_departments)
    at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="When the move takes effect (default: now); not in the "
        "future, not before usage already metered, not in a closed month."
    )
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True)


class ProjectMoveOut(serializers.ModelSerializer):
    class Meta:
        model = ProjectMove
        fields = ["id", "project", "from_department", "to_department", "at", "actor", "reason", "created_at"]


class ProjectMoveApi(APIView):
    """Move a project to another department (platform admins): effective-dated for billing,
    its quota nodes carried along (``services.project_move``)."""

    @extend_schema(request=ProjectMoveIn, responses={201: ProjectMoveOut})
    def post(self, request, pk):
        project = get_visible(visible_projects(request.user), pk=pk)
        # Who may act comes before what they sent: a member who sees the project gets 403, not a
        # 400 about a department it cannot see.
        perm.require(scope_for(request.user).platform_admin)
        body = ProjectMoveIn(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        data = body.validated_data
        move = services.project_move(
            actor=request.user, project=project, to_department=data["department"],
            at=data.get("at"), reason=data.get("reason", ""),
        )
        return Response(ProjectMoveOut(move).data, status=201)


class MembershipOut(serializers.ModelSerializer):
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    rule = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True,
        help_text="The directory rule that gave the role (null: given by hand). A role "
        "given by a rule cannot be deleted here: the directory's groups decide it."
    )
    rule_group = serializers.CharField(source="rule.group", read_only=True, allow_null=True, default=None)

    class Meta:
        model = Membership
        fields = ["id", "user", "role", "department", "project", "rule", "rule_group", "created_at"]


class MembershipIn(serializers.Serializer):
    user = serializers.SlugRelatedField(slug_field="username", queryset=User.objects.filter(is_active=True))
    role = serializers.ChoiceField(choices=Role.choices)
    department = VisibleRelatedField(visible_departments, allow_null=True, required=False)
    project = VisibleRelatedField(visible_projects, allow_null=True, required=False)


class MembershipListApi(ListCreateApi):
    output, input = MembershipOut, MembershipIn
    filterset_fields = ["role", "department", "project"]

    def visible(self):
        return visible_memberships(self.request.user).select_related("user", "rule").order_by("id")

    def perform(self, data):
        return services.membership_create(
            actor=self.request.user,
            user=data["user"],
            role=data["role"],
            department=data.get("department"),
            project=data.get("project"),
        )


class MembershipDetailApi(DetailApi):
    output, deletable = MembershipOut, True

    def visible(self):
        return visible_memberships(self.request.user).select_related("user", "department", "project", "rule")

    def delete_object(self, obj):
        services.membership_delete(actor=self.request.user, membership=obj)


class DirectoryRuleOut(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    users = serializers.SerializerMethodField(help_text="How many users the rule gives its role to now.")

    class Meta:
        model = DirectoryRule
        fields = ["id", "directory", "group", "role", "department", "project", "users", "created_by",
                  "created_at"]

    def get_users(self, rule) -> int:
        counted = getattr(rule, "user_count", None)
        return rule.memberships.count() if counted is None else counted


class DirectoryRuleIn(serializers.Serializer):
    directory = serializers.ChoiceField(choices=[Directory.LDAP, Directory.OIDC])
    group = serializers.CharField(
        max_length=500, help_text="An LDAP group DN (compared case-insensitively) or an OIDC claim value."
    )
    role = serializers.ChoiceField(choices=Role.choices)
    department = VisibleRelatedField(visible_departments, allow_null=True, required=False)
    project = VisibleRelatedField(visible_projects, allow_null=True, required=False)


class DirectoryRuleListApi(ListCreateApi):
    """Directory group → role rules (DESIGN §12): platform admins write them, auditors read them.
    A new rule gives its role at once to the users the directory last listed in the group."""

    output, input = DirectoryRuleOut, DirectoryRuleIn
    filterset_fields = ["directory", "role", "department", "project"]

    def visible(self):
        return visible_directory_rules(self.request.user).select_related("created_by").annotate(
            user_count=Count("memberships")).order_by("directory", "group", "id")

    def create(self, request, *args, **kwargs):
        # Who may act comes before what they sent (a 403, not a 400 about a project it cannot see).
        perm.require(self.scope.platform_admin)
        return super().create(request, *args, **kwargs)

    def perform(self, data):
        return directory.directory_rule_create(actor=self.request.user, **data)


class DirectoryRuleDetailApi(DetailApi):
    """One rule. Changing it takes back the roles it gave and gives them as it now reads;
    deleting it takes them back (roles given by hand stay)."""

    output, input, deletable = DirectoryRuleOut, DirectoryRuleIn, True

    def visible(self):
        return visible_directory_rules(self.request.user).select_related("created_by")

    def update(self, request, *args, **kwargs):
        self.get_object()
        perm.require(self.scope.platform_admin)
        return super().update(request, *args, **kwargs)

    def update_object(self, obj, data):
        return directory.directory_rule_update(actor=self.request.user, rule=obj, **data)

    def delete_object(self, obj):
        directory.directory_rule_delete(actor=self.request.user, rule=obj)


class MeOut(serializers.Serializer):
    username = serializers.CharField()
    display_name = serializers.CharField()
    roles = serializers.ListField(child=serializers.CharField())
    departments = serializers.ListField(child=serializers.IntegerField())
    projects = serializers.ListField(child=serializers.IntegerField())


class MeApi(APIView):
    @extend_schema(responses=MeOut)
    def get(self, request):
        user = request.user
        scope = scope_for(user)
        return Response(
            MeOut(
                {
                    "username": user.username,
                    "display_name": str(user),
                    "roles": sorted(scope.roles),
                    "departments": sorted(visible_departments(user).values_list("id", flat=True)),
                    "projects": sorted(visible_projects(user).values_list("id", flat=True)),
                }
            ).data
        )


class TokenIn(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, style={"input_type": "password"})
    name = serializers.CharField(
        max_length=80, required=False, default="password exchange",
        help_text="The new token's name in your list of tokens.",
    )
    expires_in_days = serializers.IntegerField(
        required=False, default=tokens.DEFAULT_DAYS,
        help_text=f"Days the new token works, 1 to GPUPOOL_API_TOKEN_MAX_DAYS; "
        f"default {tokens.DEFAULT_DAYS}.",
    )


class TokenOut(serializers.Serializer):
    token = serializers.CharField()
    expires_at = serializers.DateTimeField()


class LoginThrottle(AnonRateThrottle):
    """At most 20 token requests a minute from one client address, right passwords included
    (each costs a password hash); wrong ones are also counted by the sign-in lockout."""

    scope = "signin"
    rate = "20/min"

    def get_ident(self, request):
        return client_address(request)


class TokenApi(APIView):
    """Exchange a username and password for a new personal API token (``Authorization: Token …``),
    listed with the others at ``/api/v1/api-tokens/``; it is shown in this answer only. A wrong
    password is a 401; too many of them (the sign-in form's lockout, shared) a 429; a directory
    (LDAP) that cannot be reached a 503 (local accounts still get their tokens). Users who sign in
    through OpenID Connect have no portal password: they make tokens on the API tokens page."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [LoginThrottle]

    def get_authenticate_header(self, request):
        # Without one DRF turns the 401 into a 403; the token is what the client goes on to use.
        return "Token"

    @extend_schema(
        request=TokenIn,
        responses={200: TokenOut, **dict.fromkeys((401, 429, 503), OpenApiTypes.OBJECT)},
    )
    def post(self, request):
        data = TokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        attempt = signin.Attempt.of(request, data.validated_data["username"])
        if signin.locked(attempt):
            message = _("Too many failed sign-ins. Try again in %(m)d minutes.") % {
                "m": signin.lockout_minutes()
            }
            return Response(
                {"detail": message}, status=429, headers={"Retry-After": str(settings.LOGIN_LOCKOUT_SECONDS)}
            )
        credentials = {k: data.validated_data[k] for k in ("username", "password")}
        user = authenticate(request, **credentials)
        if user is None:
            signin.failed(attempt)
            if getattr(request, "directory_unreachable", False):  # set by portal.ldap_auth
                return Response({"detail": _("The directory (LDAP) cannot be reached just now, so directory "
                                             "accounts cannot sign in. Try again later.")}, status=503)
            raise AuthenticationFailed(_("Unknown user or wrong password."))
        signin.succeeded(attempt)
        issued = tokens.api_token_create(actor=user, name=data.validated_data["name"],
                                         expires_in_days=data.validated_data["expires_in_days"])
        return Response({"token": issued.secret, "expires_at": issued.token.expires_at})
