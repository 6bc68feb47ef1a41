"""What upstream's API server does to answers it proxies to pods, Services and nodes (``pods/proxy`` and the
like): links that point at the backend are rewritten to go through the proxy path, so a web UI browsed
through ``kubectl proxy`` keeps working (apimachinery's ``proxy.Transport``), and the backend's CORS
headers are dropped. Pure functions; the API server's kubelet client applies them.

- ``Location`` of any answer, and URL attributes of ``text/html`` answers (``href``, ``src``, ``action``,
  ... the same table of tags and attributes), are rewritten when they name the backend's own host (or the
  host the caller asked) or a root-relative path: ``/static/app.js`` on ``.../services/web/proxy/`` becomes
  ``/api/v1/namespaces/ns/services/web/proxy/static/app.js``. Relative links and other hosts are left.
- HTML is re-emitted token by token with only those attribute values changed (Python's ``html.parser``,
  as upstream uses ``x/net/html``'s tokenizer; CSS ``url()`` is not rewritten there either). A gzip or
  deflate body is decoded and encoded again; any other encoding passes unchanged.
"""

from __future__ import annotations

import gzip
import posixpath
import zlib
from collections.abc import Callable
from html import escape
from html.parser import HTMLParser
from urllib.parse import urlsplit, urlunsplit

URL_ATTRIBUTES: dict[str, frozenset[str]] = {
    tag: frozenset(attrs)
    for tag, attrs in {
        "a": ("href",),
        "applet": ("codebase",),
        "area": ("href",),
        "audio": ("src",),
        "base": ("href",),
        "blockquote": ("cite",),
        "body": ("background",),
        "button": ("formaction",),
        "command": ("icon",),
        "del": ("cite",),
        "embed": ("src",),
        "form": ("action",),
        "frame": ("longdesc", "src"),
        "head": ("profile",),
        "html": ("manifest",),
        "iframe": ("longdesc", "src"),
        "img": ("longdesc", "src", "usemap"),
        "input": ("src", "usemap", "formaction"),
        "ins": ("cite",),
        "link": ("href",),
        "object": ("classid", "codebase", "data", "usemap"),
        "q": ("cite",),
        "script": ("src",),
        "source": ("src",),
        "video": ("poster", "src"),
    }.items()
}
CORS_HEADERS = frozenset(
    {
        "access-control-allow-credentials",
        "access-control-allow-headers",
        "access-control-allow-methods",
        "access-control-allow-origin",
    }
)


def path_prepend(request_path: str, backend_path: str) -> str:
    """The proxy's own part of the caller's path: ``/api/v1/.../services/web/proxy`` of
    ``/api/v1/.../services/web/proxy/a/b`` when the backend is asked for ``/a/b``."""
    suffix = backend_path
    if request_path.endswith("/") and not suffix.endswith("/"):
        suffix += "/"
    return request_path[: -len(suffix)] if suffix and request_path.endswith(suffix) else request_path


def forwarded_uri(prepend: str, backend_path: str) -> str:
    """``X-Forwarded-Uri``: the caller's view of the backend path."""
    joined = (
        posixpath.normpath(posixpath.join(prepend, backend_path.lstrip("/"))) if backend_path else prepend
    )
    return joined + "/" if backend_path.endswith("/") and not joined.endswith("/") else joined


def rewrite_url(target: str, backend_host: str, request_host: str, prepend: str) -> str:
    """``target`` through the proxy when it names the backend (its host or the caller's, or no host) by an
    absolute path; anything else as it is."""
    try:
        url = urlsplit(target)
    except ValueError:
        return target
    if url.netloc and url.netloc not in (backend_host, request_host):
        return target
    if not url.path.startswith("/"):
        return target
    scheme, netloc = (url.scheme, url.netloc) if url.netloc and url.netloc == request_host else ("", "")
    path = url.path
    if not path.startswith(prepend):
        path = posixpath.normpath(posixpath.join(prepend, path.lstrip("/")))
        if url.path.endswith("/") and not path.endswith("/"):
            path += "/"
    return urlunsplit((scheme, netloc, path, url.query, url.fragment))


class _Rewriter(HTMLParser):
    """Re-emits the document as read, but for the URL attributes of the tags in :data:`URL_ATTRIBUTES`."""

    def __init__(self, rewrite: Callable[[str], str]) -> None:
        super().__init__(convert_charrefs=False)
        self.rewrite = rewrite
        self.out: list[str] = []

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]], closing: str) -> None:
        raw = self.get_starttag_text() or ""
        wanted = URL_ATTRIBUTES.get(tag)
        if not wanted or not any(name in wanted and value for name, value in attrs):
            self.out.append(raw)
            return
        parts = [f"<{tag}"]
        for name, value in attrs:
            if value is None:
                parts.append(f" {name}")
                continue
            if name in wanted:
                value = self.rewrite(value)
            parts.append(f' {name}="{escape(value, quote=True)}"')
        self.out.append("".join(parts) + closing)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs, ">")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs, "/>")

    def handle_endtag(self, tag: str) -> None:
        self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        self.out.append(data)

    def handle_entityref(self, name: str) -> None:
        self.out.append(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self.out.append(f"&#{name};")

    def handle_comment(self, data: str) -> None:
        self.out.append(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self.out.append(f"<!{decl}>")

    def handle_pi(self, data: str) -> None:
        self.out.append(f"<?{data}>")

    def unknown_decl(self, data: str) -> None:
        self.out.append(f"<![{data}]>")


def rewrite_html(
    body: bytes, encoding: str, backend_host: str, request_host: str, prepend: str
) -> bytes | None:
    """The HTML answer with its links through the proxy, in the same ``Content-Encoding``; None when the
    encoding is one this cannot read (then the answer passes unchanged, as upstream's does)."""
    encoding = encoding.strip().lower()
    try:
        if encoding == "gzip":
            raw = gzip.decompress(body)
        elif encoding == "deflate":
            raw = zlib.decompress(body)
        elif encoding in ("", "identity"):
            raw = body
        else:
            return None
    except (OSError, zlib.error, EOFError):
        return None
    parser = _Rewriter(lambda value: rewrite_url(value, backend_host, request_host, prepend))
    parser.feed(raw.decode("utf-8", errors="surrogateescape"))  # upstream assumes UTF-8 too
    parser.close()
    if parser.rawdata:  # an unfinished construct at the end: kept as it came
        parser.out.append(parser.rawdata)
    text = "".join(parser.out).encode("utf-8", errors="surrogateescape")
    if encoding == "gzip":
        return gzip.compress(text)
    if encoding == "deflate":
        return zlib.compress(text)
    return text
