"""The UI mounted on the app: served at /ui, its assets, the API-key login, the backends."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.ui.assets import STATIC_DIR
from app.ui.local_backend import LocalBackend
from app.ui.mount import api_key_login, make_backend, ui_head
from app.ui.remote_backend import RemoteBackend
from gmts_core.errors import GMTSError
from tests.app.api_helpers import make_settings


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-models")  # no model is loaded by these tests


def test_ui_is_served_with_its_assets(root: Path) -> None:
    with TestClient(create_app(make_settings(root, ui_enabled=True))) as client:
        page = client.get("/ui/")
        assert page.status_code == 200
        assert "__gmtsTipInstalled" in page.text  # the tooltip script is in the head
        config = client.get("/ui/config")
        assert config.status_code == 200
        assert ".tok" in config.text  # the renderer's CSS travels in the config
        # the shipped example group is in the first render: tokens marked by both methods
        assert "tok sel-a sel-b mark-both" in config.text and "Example" in config.text
        assert client.get("/healthz").status_code == 200  # the API still answers
        icon = client.get("/favicon.ico")
        assert icon.status_code == 200 and icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO
    assert_method_pickers_describe_each_method(config.json()["components"])


PICKERS = ("method-a", "method-b", "compare-methods", "train-method")


def assert_method_pickers_describe_each_method(components: list[dict]) -> None:
    """The four method pickers list every method as "name: one-line description"."""
    pickers = {
        c["props"]["elem_id"]: c["props"]["choices"]
        for c in components
        if c.get("props", {}).get("elem_id") in PICKERS
    }
    assert set(pickers) == set(PICKERS)
    for choices in pickers.values():
        labels = {value: label for label, value in choices}
        assert labels["gtpo"].startswith("gtpo: GTPO") and labels["rsi"].startswith("rsi: RSI")
        assert "Clip-Cov" in labels["clip_cov"] and "TR-GRPO" in labels["high_prob"]


def test_ui_can_be_disabled(root: Path) -> None:
    with TestClient(create_app(make_settings(root, ui_enabled=False))) as client:
        assert client.get("/ui/").status_code == 404


def test_ui_asks_for_the_api_key_when_one_is_set(root: Path) -> None:
    app = create_app(make_settings(root, ui_enabled=True, api_key="s3cret"))
    with TestClient(app) as client:
        assert client.get("/ui/config").status_code == 401
        bad = client.post("/ui/login", data={"username": "x", "password": "nope"})
        assert bad.status_code >= 400
        ok = client.post("/ui/login", data={"username": "x", "password": "s3cret"})
        assert ok.status_code == 200
        assert client.get("/ui/config").status_code == 200


def test_login_check_compares_the_key() -> None:
    assert api_key_login(None) is None
    check = api_key_login("k")
    assert check is not None and check("anyone", "k") and not check("anyone", "K")


def test_backend_choice_follows_api_url(root: Path) -> None:
    assert isinstance(make_backend(make_settings(root), object()), LocalBackend)
    remote = make_backend(make_settings(root, api_url="http://127.0.0.1:9/"), object())
    assert isinstance(remote, RemoteBackend) and remote.base_url == "http://127.0.0.1:9"


def test_remote_backend_reports_an_unreachable_server() -> None:
    from app.ui.client import BackendError

    backend = RemoteBackend("http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(BackendError, match="cannot reach"):
        backend.analyze({"prompt": "x"})
    assert backend.models() == ([], None)


def test_static_assets_exist() -> None:
    assert (STATIC_DIR / "gmts.css").is_file()
    assert "<script>" in ui_head() and "textContent" in ui_head()


def test_remote_and_local_backends_give_the_same_result(model_root: Path) -> None:
    """The UI's remote mode against a second server on 127.0.0.1 returns the local dict."""
    from tests.app.api_helpers import LiveServer, given_body

    app = create_app(make_settings(model_root))
    local = LocalBackend(app.state.services)
    with LiveServer(app) as server:
        remote = RemoteBackend(server.url)
        names, default = remote.models()
        assert default in names and (names, default) == local.models()
        body = given_body()
        assert remote.analyze(body) == local.analyze(body)
        with pytest.raises(GMTSError, match="ratio"):
            remote.analyze(given_body(selection={"ratio": 2}))
        with pytest.raises(GMTSError, match="ratio"):
            local.analyze(given_body(selection={"ratio": 2}))


def test_first_html_carries_the_example_token_view(root: Path) -> None:
    """The default example is in the page's first HTML, right after <body>, before Gradio's
    element: the Explore tab's own first render of it (same spans, marks and tooltips)."""
    from app.ui.first_view import FIRST_VIEW_ID
    from app.ui.tabs.explore import example
    from app.ui.tabs.explore.tab import initial_values

    with TestClient(create_app(make_settings(root, ui_enabled=True))) as client:
        page = client.get("/ui/")
        other = client.get("/ui/config")
    assert page.status_code == 200 and int(page.headers["content-length"]) == len(page.content)
    html = page.text
    body = html.index("<body")
    view = html.index(f'<div id="{FIRST_VIEW_ID}"')
    assert body < view < html.index("<gradio-app")
    assert initial_values(example.load_example())[1] in html  # the tab's first render itself
    assert "tok sel-a sel-b mark-both" in html[view:]
    assert FIRST_VIEW_ID not in other.text  # only the page gets it
    # nothing the first view does not need is parsed (config) or awaited (stylesheets) before it
    head = html[: html.index("</head>")]
    assert "window.gradio_config =" not in head and 'rel="stylesheet"' not in head
    assert view < html.index("window.gradio_config =") < html.index("<gradio-app")
    assert view < html.index("window.gradio_api_info =") < html.index("<gradio-app")
    assert view < html.index('rel="stylesheet"')


def test_no_first_view_behind_a_login(root: Path) -> None:
    from app.ui.first_view import FIRST_VIEW_ID

    settings = make_settings(root, ui_enabled=True, api_key="k" * 32)
    with TestClient(create_app(settings)) as client:
        assert FIRST_VIEW_ID not in client.get("/ui/").text


def test_inject_after_body() -> None:
    from app.ui.first_view import inject_after_body

    assert inject_after_body(b'<html><body class="x">a</body>', b"<i>") == (
        b'<html><body class="x"><i>a</body>'
    )
    assert inject_after_body(b"<html>no body</html>", b"<i>") == b"<html>no body</html>"


def test_rewrite_page_moves_the_head_data_after_the_fragment() -> None:
    from app.ui.first_view import rewrite_page

    page = (
        b'<html><head><script>x=1</script><script>window.gradio_config = {"a":"\\u003c/"};'
        b"</script><script>window.gradio_api_info = {};</script>"
        b'<link rel="stylesheet" href="a.css"></head><body class="x"><gradio-app></body>'
    )
    out = rewrite_page(page, b"<i>")
    assert out == (
        b"<html><head><script>x=1</script></head>"
        b'<body class="x"><i>'
        b'<link rel="stylesheet" href="a.css">'
        b'<script>window.gradio_config = {"a":"\\u003c/"};</script>'
        b"<script>window.gradio_api_info = {};</script><gradio-app></body>"
    )
    plain = b"<html><head></head><body>a</body>"  # nothing to move: the fragment only
    assert rewrite_page(plain, b"<i>") == b"<html><head></head><body><i>a</body>"


def test_the_first_config_holds_the_first_chart_and_the_page_loads_the_rest(root: Path) -> None:
    """Of the example's charts the config carries the scatter only (so Gradio starts loading
    Plotly as it mounts the tab); the page-load events send the other charts, then the Learn
    card, the shipped example's as computed when the UI was built, and anything else afresh."""
    from app.ui.tabs.explore import example
    from app.ui.tabs.explore import tab as explore_tab

    with TestClient(create_app(make_settings(root, ui_enabled=True))) as client:
        config = client.get("/ui/config").json()
    props = {c["props"].get("elem_id"): c["props"] for c in config["components"]}
    assert props["scatter-plot"]["value"]["type"] == "plotly"
    for later in ("distributions-plot", "positions-plot", "advantages-plot", "budget-plot"):
        assert props[later].get("value") is None
    assert not props["learn-view"].get("value")
    assert set(explore_tab.DEFERRED) == {4, 5, 6, 7, 9}

    shipped = example.load_example()
    components = [_Echo() for _ in range(13)]
    views = explore_tab.ExampleViews(shipped, components, explore_tab.initial_values(shipped))
    charts = views.handler(explore_tab.DEFERRED_CHARTS)
    fresh = explore_tab.deferred_views(explore_tab.DEFERRED_CHARTS)
    same = charts(dict(shipped), *explore_tab.EXAMPLE_VIEW)  # an equal copy, as a session's
    assert [f.to_json() for f in same] == [
        f.to_json() for f in fresh(shipped, *explore_tab.EXAMPLE_VIEW)
    ]
    assert all(
        a is b for a, b in zip(same, charts(shipped, *explore_tab.EXAMPLE_VIEW), strict=True)
    )
    other = charts(shipped, "entropy", "gmts", "entropy", 1)  # group 1: computed, not kept
    assert [f.to_json() for f in other] == [
        f.to_json() for f in fresh(shipped, "entropy", "gmts", "entropy", 1)
    ]
    assert not any(a is b for a, b in zip(other, same, strict=True))
    learn = views.handler(explore_tab.DEFERRED_LEARN)(shipped, *explore_tab.EXAMPLE_VIEW)
    assert learn == [explore_tab.initial_values(shipped)[7]] and "learn" in learn[0]


def test_gradio_page_is_kept_after_its_first_answer(root: Path) -> None:
    """The page Gradio renders (config and API description in its template) is answered from
    memory for a request with the same URL, query and root-URL headers: the same bytes as
    Gradio's own, which are the same every time; another root URL or a request with a cookie
    goes to Gradio; the first view is put in either way, and the request id is each request's."""
    from app.ui.asset_cache import AssetCache

    app = create_app(make_settings(root, ui_enabled=True))
    gradio_app = next(r.app for r in app.routes if getattr(r, "path", "") == "/ui")
    with TestClient(app, base_url="http://127.0.0.1") as client:
        first = client.get("/ui/")
        cache = gradio_app.middleware_stack
        while not isinstance(cache, AssetCache):
            cache = cache.app
        again = client.get("/ui/")
        hits = cache.hits
        cache.kept.clear()  # Gradio renders it afresh
        fresh = client.get("/ui/")
        other_host = client.get("/ui/", headers={"Host": "localhost:8000"})
        with_cookie = client.get("/ui/", headers={"Cookie": "a=b"})
    assert hits == 1 and first.content == again.content == fresh.content
    assert "gmts-first-view" in again.text and "window.gradio_config =" in again.text
    assert first.headers["x-request-id"] != again.headers["x-request-id"]
    assert '"root":"http://localhost:8000/ui"' in other_host.text
    assert '"root":"http://127.0.0.1/ui"' in first.text
    assert with_cookie.content == first.content
    assert cache.hits == 1 and len(cache.kept) == 2  # fresh and other_host; not the cookie's


class _Echo:
    """A component whose post-processing is the value itself."""

    def postprocess(self, value: object) -> object:
        return value


def test_gradio_assets_are_kept_after_their_first_answer(root: Path) -> None:
    """A second request of an asset with the same headers gets the first answer's bytes and
    headers from memory; conditional requests and other encodings reach Gradio."""
    from app.ui.asset_cache import AssetCache
    from app.ui.first_view import plotly_chunk

    app = create_app(make_settings(root, ui_enabled=True))
    gradio_app = next(r.app for r in app.routes if getattr(r, "path", "") == "/ui")
    with TestClient(app, base_url="http://127.0.0.1") as client:
        asset = f"/ui/assets/{plotly_chunk()}"
        br = {"Accept-Encoding": "gzip, deflate, br"}
        first, again = client.get(asset, headers=br), client.get(asset, headers=br)
        plain = client.get(asset, headers={"Accept-Encoding": "identity"})
        revalidated = client.get(asset, headers={**br, "If-None-Match": first.headers["etag"]})
        missing = [client.get("/ui/assets/none-00000000.js") for _ in range(2)]
    cache = gradio_app.middleware_stack
    while not isinstance(cache, AssetCache):
        cache = cache.app
    assert first.status_code == again.status_code == plain.status_code == 200
    assert first.headers["content-encoding"] == "br" and "content-encoding" not in plain.headers
    assert again.content == first.content == plain.content  # decoded by the client
    assert 3 * int(again.headers["content-length"]) < len(plain.content)  # compressed
    same = ("x-request-id", "content-length")  # Gradio streamed it; the replay has a length
    assert {k: v for k, v in again.headers.items() if k not in same} == {
        k: v for k, v in first.headers.items() if k not in same
    }
    assert revalidated.status_code in (200, 304) and all(r.status_code == 404 for r in missing)
    # one answer from memory: the conditional request, the 404s and the other encoding went on
    assert cache.hits == 1 and len(cache.kept) == 2  # the asset in two encodings
