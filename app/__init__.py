"""GMTS Explorer application layer: the FastAPI server, the Gradio UI and the `gmts` CLI."""
