"""The Learn tab: the formulas with the current group's numbers (:mod:`.learn`, :mod:`.lesson`)."""
