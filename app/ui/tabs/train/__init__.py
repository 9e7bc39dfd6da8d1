"""The Train tab: live GRPO steps on a private session (:mod:`.view`), its charts, the faded
earlier runs and the per-token changes of the last batch."""
