"""Issue 18 item 12: /api/docs/ renders Swagger UI's operations in a real Chromium with every
request that would leave the portal cut off — Swagger UI comes from our static files, not a CDN —
and under the site's Content-Security-Policy unchanged (the fixture fails on any violation)."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_item12_the_api_docs_render_without_network(world, browser_for, shot):
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    left = []

    def only_the_portal(route):
        if route.request.url.startswith(page.base + "/"):
            route.continue_()
        else:  # no internet: what would have gone out is refused and remembered
            left.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_the_portal)
    # Swagger UI renders the operations near the viewport only (more as the page scrolls): a
    # viewport taller than the whole list has every operation rendered, wherever it sorts.
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": 30000})
    page.goto(f"{page.base}/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock-summary-path")
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/api/v1/auth/token/" in paths and "/api/v1/jobs/" in paths, paths[:10]
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("gpupool API")
    # Operations open: the request body of the token exchange is documented.
    page.locator(".opblock-post", has_text="/api/v1/auth/token/").first.locator(".opblock-summary").click()
    page.wait_for_selector(".opblock.is-open .opblock-section-request-body")
    page.set_viewport_size(size)
    shot(page, "api-docs")
    assert left == [], left
