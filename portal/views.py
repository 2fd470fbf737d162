from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_post_parameters


def _failures_key(request) -> str:
    # Per account and client address: a guesser is stopped without locking the account for
    # everyone else (its owner signs in from another address).
    username = (request.POST.get("username") or "").strip().lower()[:150]
    return f"login-failures:{request.META.get('REMOTE_ADDR', '')}:{username}"


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class LoginView(auth_views.LoginView):
    """Sign-in form with throttling: after ``LOGIN_FAILURE_LIMIT`` wrong passwords for one
    account from one address within ``LOGIN_LOCKOUT_SECONDS``, further attempts are refused
    (HTTP 429) without checking the password until the window has passed."""

    template_name = "portal/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        if cache.get(_failures_key(request), 0) >= settings.LOGIN_FAILURE_LIMIT:
            form = self.get_form()
            form.errors.clear()
            minutes = max(1, settings.LOGIN_LOCKOUT_SECONDS // 60)
            context = self.get_context_data(
                form=form,
                locked=_("Too many failed sign-ins. Try again in %(m)d minutes.") % {"m": minutes},
            )
            return self.render_to_response(context, status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        key = _failures_key(self.request)
        if not cache.add(key, 1, settings.LOGIN_LOCKOUT_SECONDS):
            try:
                cache.incr(key)
            except ValueError:  # expired between the two calls: a new window
                cache.set(key, 1, settings.LOGIN_LOCKOUT_SECONDS)
        return super().form_invalid(form)

    def form_valid(self, form):
        cache.delete(_failures_key(self.request))
        return super().form_valid(form)


class LogoutView(auth_views.LogoutView):
    pass
