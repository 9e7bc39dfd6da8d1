"""The Gradio explorer UI, mounted at ``/ui`` on the FastAPI app by
:func:`app.ui.mount.mount_ui`.

Layout: :mod:`app.ui.blocks` builds the tabs listed in ``TABS``, one package per tab under
:mod:`app.ui.tabs` (``tabs/<tab>/tab.py`` wires Gradio; the rest of a tab package is free of it);
:mod:`app.ui.context` holds the :class:`~app.ui.context.UIContext` every tab is built from and
:func:`~app.ui.context.call`, the one way a handler calls the backend; :mod:`app.ui.client` is
the backend (the local service layer or a remote server); :mod:`app.ui.render`,
:mod:`app.ui.charts`, :mod:`app.palette`, :mod:`app.ui.choices` and :mod:`app.ui.status` are
shared by the tabs. Importing this package imports nothing (Gradio loads with the tabs).
"""
