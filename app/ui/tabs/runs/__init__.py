"""The Runs tab: training runs read from disk, step by step."""
