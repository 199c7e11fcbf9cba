"""The worker API's routes, one module per resource; :func:`service.api.app.create_app`
includes each module's ``router``."""
