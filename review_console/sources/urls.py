"""Routes of the sources room: the sources, their secrets, settings and field maps."""

from django.urls import path

from review_console.routes import one_object_routes
from review_console.sources import views, views_field_map

# The pages of one source named source-<what> are at sources/<id>/<what>/.
ONE_SOURCE = {
    "source-disable": views.source_disable,
    "source-enable": views.source_enable_view,
    "source-settings": views.source_settings_view,
    "source-secret-add": views.source_secret_add_view,
    "source-secret-remove": views.source_secret_remove_view,
    "source-captcha": views.source_captcha_view,
    "source-field-map": views_field_map.source_field_map,
    "source-field-map-preview": views_field_map.source_field_map_preview,
    "source-field-map-save": views_field_map.source_field_map_save,
    "source-field-map-apply": views_field_map.source_field_map_apply,
}
# Where a name's dashes are a path's slashes (secrets/add/, field-map/save/).
PATHS = {
    "source-secret-add": "secrets/add",
    "source-secret-remove": "secrets/remove",
    "source-field-map-preview": "field-map/preview",
    "source-field-map-save": "field-map/save",
    "source-field-map-apply": "field-map/apply",
}

urlpatterns = [
    path("sources/", views.source_list, name="source-list"),
    path("sources/<int:source_id>/", views.source_detail, name="source-detail"),
    *one_object_routes("sources/<int:source_id>/", ONE_SOURCE, PATHS),
]
