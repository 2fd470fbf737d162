from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """Kept apart from ``api_base``: DRF imports the pagination class while it builds its
    generic views, so this module must not import them."""

    page_size_query_param = "page_size"
    max_page_size = 1000
