"""Request and response models of the HTTP API v1 (the contract), with OpenAPI examples.

``analyze_request`` / ``analyze_response``: ``POST /v1/analyze``; ``gradcheck``: ``POST
/v1/gradcheck``; ``sessions``: live RL; ``runs``: trainer runs; ``methods``: the method catalog;
``server``: models, health, capabilities and errors. ``numbers``: non-finite floats become null;
``strict``, ``knobs`` and ``derived``: how requests are made strict and how fields take their
help and bounds from the library's config dataclasses and records.
"""
