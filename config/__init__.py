"""Django project for Onefold: settings, URLs and WSGI/ASGI entry points."""
