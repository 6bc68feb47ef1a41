"""Links in proxied answers go through the proxy path, as upstream's proxy transport rewrites them."""

from __future__ import annotations

import gzip
import zlib

from vplane.support.proxyrewrite import forwarded_uri, path_prepend, rewrite_html, rewrite_url

PREFIX = "/api/v1/namespaces/ns/services/web/proxy"
BACKEND = "127.10.0.5:8080"
CALLER = "127.0.0.1:8001"


def test_the_proxy_prefix_and_forwarded_uri() -> None:
    assert path_prepend(PREFIX + "/a/b", "/a/b") == PREFIX
    assert path_prepend(PREFIX + "/a/b/", "/a/b/") == PREFIX
    assert path_prepend(PREFIX + "/", "/") == PREFIX
    assert forwarded_uri(PREFIX, "/a/b/") == PREFIX + "/a/b/"
    assert forwarded_uri(PREFIX, "/a") == PREFIX + "/a"


def test_urls_naming_the_backend_go_through_the_proxy() -> None:
    def rw(url: str) -> str:
        return rewrite_url(url, BACKEND, CALLER, PREFIX)

    assert rw("/static/app.js") == PREFIX + "/static/app.js"
    assert rw("/dir/") == PREFIX + "/dir/"
    assert rw("/x?a=1#top") == PREFIX + "/x?a=1#top"
    assert rw(f"http://{BACKEND}/login") == PREFIX + "/login"  # the backend's own host: through the proxy
    assert rw(f"http://{CALLER}/login") == f"http://{CALLER}{PREFIX}/login"  # the caller's host is kept
    assert rw(PREFIX + "/already") == PREFIX + "/already"
    assert rw("relative/page") == "relative/page"
    assert rw("https://example.com/x") == "https://example.com/x"
    assert rw("mailto:someone@example.com") == "mailto:someone@example.com"


def test_html_links_are_rewritten_and_the_rest_kept_as_it_came() -> None:
    page = (
        "<!DOCTYPE html><html><head><link rel=stylesheet href='/s.css'><script src=\"/app.js\"></script>"
        '<style>a{}</style></head><body><!-- note --><a href="/next?a=1&amp;b=2" class=x>next &amp; more</a>'
        '<a href="rel.html">rel</a><img src=/i.png alt="a &quot;b&quot;"/><p title=\'t\'>x &#169;</p>'
        '<form action="/post" method=post><input type=submit></form></body></html>'
    )
    out = rewrite_html(page.encode(), "", BACKEND, CALLER, PREFIX)
    assert out is not None
    text = out.decode()
    assert f'<link rel="stylesheet" href="{PREFIX}/s.css">' in text
    assert f'<script src="{PREFIX}/app.js"></script>' in text
    assert f'<a href="{PREFIX}/next?a=1&amp;b=2" class="x">next &amp; more</a>' in text
    assert '<a href="rel.html">rel</a>' in text  # relative links already work under the proxy path
    assert f'<img src="{PREFIX}/i.png" alt="a &quot;b&quot;"/>' in text
    assert f'<form action="{PREFIX}/post" method="post">' in text
    for kept in ("<!DOCTYPE html>", "<!-- note -->", "<p title='t'>x &#169;</p>", "<style>a{}</style>"):
        assert kept in text


def test_compressed_html_is_decoded_and_encoded_again() -> None:
    page = b'<a href="/x">x</a>'
    zipped = rewrite_html(gzip.compress(page), "gzip", BACKEND, CALLER, PREFIX)
    assert zipped is not None and gzip.decompress(zipped) == f'<a href="{PREFIX}/x">x</a>'.encode()
    deflated = rewrite_html(zlib.compress(page), "deflate", BACKEND, CALLER, PREFIX)
    assert deflated is not None and zlib.decompress(deflated) == f'<a href="{PREFIX}/x">x</a>'.encode()
    assert rewrite_html(page, "br", BACKEND, CALLER, PREFIX) is None  # unknown: passed on unchanged
    assert rewrite_html(b"not gzip", "gzip", BACKEND, CALLER, PREFIX) is None
