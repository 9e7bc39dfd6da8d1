"""The service layer shared by the HTTP API, the UI and the CLI."""
