"""The Explore tab: one group (or a batch) of answers analysed, tokens shaded, two selection
methods compared. :mod:`.tab` wires it; :mod:`.view`, :mod:`.batch`, :mod:`.example` and the
exports are free of Gradio."""
