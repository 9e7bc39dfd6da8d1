"""One package per tab of the UI: ``app.ui.tabs.<tab>.tab`` defines ``TAB`` (an
:class:`app.ui.context.Tab`); the other modules of a tab package are free of Gradio and tested on
their own. The order of the tabs is :data:`app.ui.blocks.TABS`."""
