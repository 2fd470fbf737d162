from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpResponseRedirect
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_post_parameters

from . import oidc, oidc_sessions, signin


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class LoginView(auth_views.LoginView):
    """Sign-in form with the shared lockout (``portal.signin``, also the API token endpoint's):
    too many wrong passwords for one account from one address, or for any accounts from one
    address, and further attempts are refused (HTTP 429) without checking the password until
    the window has passed."""

    template_name = "portal/login.html"
    redirect_authenticated_user = True

    def get_success_url_allowed_hosts(self):
        # A dev job's Ingress sends a signed-out user here with next=https://<job host>/...
        # (docs/environment.md): a host of one label under a dev-job domain may be returned to.
        hosts = super().get_success_url_allowed_hosts()
        host = urlsplit(self.request.POST.get("next") or self.request.GET.get("next") or "").hostname or ""
        label, _dot, domain = host.partition(".")
        if label and domain in settings.GPUPOOL["DEV_INGRESS_DOMAINS"]:
            hosts = {*hosts, host}
        return hosts

    def get_context_data(self, **kwargs):
        # The centre's sign-in button when OpenID Connect is on; the form stays for local admins.
        return super().get_context_data(oidc_button=oidc.button_label() if oidc.enabled() else "", **kwargs)

    def _attempt(self) -> signin.Attempt:
        return signin.Attempt.of(self.request, self.request.POST.get("username"))

    def post(self, request, *args, **kwargs):
        if signin.locked(self._attempt()):
            form = self.get_form()
            form.errors.clear()
            context = self.get_context_data(
                form=form,
                locked=_("Too many failed sign-ins. Try again in %(m)d minutes.")
                % {"m": signin.lockout_minutes()},
            )
            return self.render_to_response(context, status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        signin.failed(self._attempt())
        if getattr(self.request, "directory_unreachable", False):
            # portal.ldap_auth marked it: say so rather than "wrong password" (local accounts still work).
            return self.render_to_response(self.get_context_data(
                form=form, directory_down=_("The directory (LDAP) cannot be reached just now, so directory "
                                            "accounts cannot sign in. Try again later.")))
        return super().form_invalid(form)

    def form_valid(self, form):
        signin.succeeded(self._attempt())
        return super().form_valid(form)


class LogoutView(auth_views.LogoutView):
    """Signs out of the portal, and of the centre's provider too when the user signed in there
    (RP-initiated logout: the provider asks, then sends them back to our sign-in page)."""

    def post(self, request, *args, **kwargs):
        provider_logout = oidc.end_session_url(request)  # before the session holding the token is gone
        # Ended here: nothing left for a back-channel logout to end.
        oidc_sessions.session_forget(request.session.session_key)
        response = super().post(request, *args, **kwargs)
        return HttpResponseRedirect(provider_logout) if provider_logout else response
