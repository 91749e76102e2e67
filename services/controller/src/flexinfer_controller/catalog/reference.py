"""``oci://`` references and registry URLs, validated against the distribution grammar.

Grammar (OCI distribution spec and the Docker reference grammar it comes from)::

    reference  := "oci://" registry "/" repository [":" tag] ["@" digest]
    registry   := host [":" port]            host: DNS name, IPv4, or [IPv6]
    repository := component ("/" component)*
    component  := [a-z0-9]+ ((\\.|_|__|-+) [a-z0-9]+)*
    tag        := [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}
    digest     := "sha256:" 64 hex | "sha512:" 128 hex

Anything else is refused before a request is built from it: control characters and
whitespace, userinfo, query strings and fragments, percent-escapes, backslashes, ``..``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from flexinfer_controller.catalog.errors import InvalidReferenceError

SCHEME = "oci://"
DEFAULT_TAG = "latest"
MAX_NAME_LENGTH = 255  # host + "/" + repository: the limit Docker and most registries apply

_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_DIGEST = re.compile(r"(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})")
_LABEL = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::([0-9]{{1,5}}))?")
_FORBIDDEN = (
    ("?", "query strings are not allowed"),
    ("#", "fragments are not allowed"),
    ("%", "percent-escapes are not allowed"),
    ("\\", "backslashes are not allowed"),
)


@dataclass(frozen=True, slots=True)
class OciReference:
    """A parsed ``oci://`` reference; ``tag`` and ``digest`` may both be set."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What to put after ``/manifests/``: the digest when pinned, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    def with_digest(self, digest: str) -> OciReference:
        """The same reference pinned to ``digest``."""
        return replace(self, digest=_check_digest(digest, digest))

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{SCHEME}{self.registry}/{self.repository}{tag}{digest}"


@dataclass(frozen=True, slots=True)
class RegistryLocation:
    """Where a registry answers: ``scheme://registry``, and the repository prefix of a URL."""

    scheme: str
    registry: str
    prefix: str = ""

    @property
    def base_url(self) -> str:
        """``https://host[:port]``."""
        return f"{self.scheme}://{self.registry}"

    @property
    def host(self) -> str:
        """The host without its port."""
        return _HOST_PORT.sub("", self.registry).strip("[]").lower()


_HOST_PORT = re.compile(r":[0-9]+$")


def parse_reference(text: str) -> OciReference:
    """Parse and validate ``oci://registry/repository[:tag][@digest]``."""
    if not text.startswith(SCHEME):
        raise InvalidReferenceError(text, f"must start with {SCHEME}")
    rest = _check_characters(text, text[len(SCHEME) :])
    registry, sep, path = rest.partition("/")
    if not sep or not path:
        raise InvalidReferenceError(text, "names no repository")
    registry = _check_registry(text, registry)
    path, at, digest = path.partition("@")
    if "@" in digest:
        raise InvalidReferenceError(text, "has more than one '@'")
    name, tag = _split_tag(path)
    if len(registry) + 1 + len(name) > MAX_NAME_LENGTH:
        raise InvalidReferenceError(text, f"name exceeds {MAX_NAME_LENGTH} characters")
    return OciReference(
        registry=registry,
        repository=check_repository(name, text),
        tag=_check_tag(text, tag) if tag is not None else None,
        digest=_check_digest(text, digest) if at else None,
    )


def parse_registry_url(url: str) -> RegistryLocation:
    """Parse a RegistrySource URL: ``oci://`` (HTTPS), ``https://`` or ``http://``."""
    schemes = {SCHEME: "https", "https://": "https", "http://": "http"}
    scheme = next((s for s in schemes if url.startswith(s)), None)
    if scheme is None:
        raise InvalidReferenceError(url, "a registry URL starts with oci://, https:// or http://")
    rest = _check_characters(url, url[len(scheme) :]).rstrip("/")
    registry, _, prefix = rest.partition("/")
    registry = _check_registry(url, registry)
    if prefix:
        if ":" in prefix or "@" in prefix:
            raise InvalidReferenceError(url, "a registry URL names no tag or digest")
        prefix = check_repository(prefix, url)
    return RegistryLocation(schemes[scheme], registry, prefix)


def check_repository(name: str, context: str | None = None) -> str:
    """``name`` if it is a valid repository name (InvalidReferenceError otherwise)."""
    shown = context if context is not None else name
    if any(part in {"", ".", ".."} for part in name.split("/")):
        raise InvalidReferenceError(shown, "empty, '.' or '..' path components are not allowed")
    if not _REPOSITORY.fullmatch(name):
        raise InvalidReferenceError(
            shown, f"repository {name!r} must be lowercase components like 'models/llama-3'"
        )
    return name


def check_tag(tag: str) -> str:
    """``tag`` if it is a valid tag (InvalidReferenceError otherwise)."""
    return _check_tag(tag, tag)


def _check_characters(text: str, rest: str) -> str:
    if any(not (0x21 <= ord(ch) <= 0x7E) for ch in rest):
        raise InvalidReferenceError(text, "control characters, whitespace and non-ASCII refused")
    for ch, reason in _FORBIDDEN:
        if ch in rest:
            raise InvalidReferenceError(text, reason)
    if len(rest) > 1024:  # name (255) + tag (128) + digest (135), with room to spare
        raise InvalidReferenceError(text, "is too long")
    return rest


def _check_registry(text: str, registry: str) -> str:
    if "@" in registry:
        raise InvalidReferenceError(text, "userinfo (user@host) is not allowed")
    match = _HOST.fullmatch(registry)
    if not registry or match is None:
        raise InvalidReferenceError(text, f"registry {registry!r} is not host[:port]")
    port = match.group(1)
    if port is not None and not 0 < int(port) < 65536:
        raise InvalidReferenceError(text, f"port {port} is out of range")
    return registry.lower()


def _split_tag(path: str) -> tuple[str, str | None]:
    # A ':' is a tag separator only in the last component (registries may have ports, paths not).
    head, _, last = path.rpartition("/")
    if ":" not in last:
        return path, None
    last, _, tag = last.partition(":")
    return (f"{head}/{last}" if head else last), tag


def _check_tag(text: str, tag: str) -> str:
    if not _TAG.fullmatch(tag):
        raise InvalidReferenceError(text, f"tag {tag!r} is not [A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}")
    return tag


def _check_digest(text: str, digest: str) -> str:
    if not _DIGEST.fullmatch(digest):
        raise InvalidReferenceError(text, f"digest {digest!r} is not sha256:<64 hex> (or sha512)")
    return digest


def check_manifest_reference(reference: str) -> str:
    """``reference`` if it is a valid tag or digest (what follows ``/manifests/``)."""
    if ":" in reference:
        return _check_digest(reference, reference)
    return _check_tag(reference, reference)
