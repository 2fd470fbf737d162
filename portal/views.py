from django.contrib.auth import views as auth_views
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class LoginView(auth_views.LoginView):
    template_name = "portal/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    pass
