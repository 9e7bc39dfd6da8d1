"""scope_for: the scope a request selects in when none is given (the analyze-run CLI uses it)."""

from __future__ import annotations

from app.services.methods import scope_for


def test_a_lone_paper_method_selects_per_group_unless_told_otherwise() -> None:
    assert scope_for(("gmts_paper",), None) == "group"
    assert scope_for(("gmts_paper_verl",), None) == "group"
    assert scope_for(("gmts_paper",), "batch") == "batch"
    assert scope_for(("entropy",), None) == "batch"
    assert scope_for(("gmts_paper", "entropy"), None) == "batch"  # several: one common scope
    assert scope_for(("no_such_method",), None) == "batch"  # validation names the valid ones
