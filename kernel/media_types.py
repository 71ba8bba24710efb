"""What kind of content a path holds, by extension: the one media table.

Everything that decides text versus media, picks a content block type or a
mime type, or says whether video reads are offered asks this module (the
contract, docs/contract.md §6). Pure and cheap: video support is probed with
``find_spec``, never by importing ``av``.
"""

from __future__ import annotations

import importlib.util
import posixpath
from typing import TYPE_CHECKING

from filegate.kernel.limits import DEFAULT_VIDEO_WINDOW

if TYPE_CHECKING:
    from filegate.kernel.messages import MediaKind

MIME_TYPES: dict[str, str] = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".heic": "image/heic",
    ".heif": "image/heif",
    ".mp4": "video/mp4",
    ".mpeg": "video/mpeg",
    ".mpg": "video/mpeg",
    ".mov": "video/quicktime",
    ".avi": "video/x-msvideo",
    ".flv": "video/x-flv",
    ".webm": "video/webm",
    ".wmv": "video/x-ms-wmv",
    ".3gpp": "video/3gpp",
    ".mkv": "video/x-matroska",
    ".wav": "audio/wav",
    ".mp3": "audio/mpeg",
    ".aiff": "audio/aiff",
    ".aac": "audio/aac",
    ".ogg": "audio/ogg",
    ".flac": "audio/flac",
    ".pdf": "application/pdf",
    ".ppt": "application/vnd.ms-powerpoint",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}
"""The media table: extension -> mime type. A fixed table rather than :mod:`mimetypes`,
whose answers depend on the host; the kind sets below are derived from it."""


def _kind(prefix: str) -> frozenset[str]:
    return frozenset(ext for ext, mime in MIME_TYPES.items() if mime.startswith(prefix))


IMAGE_EXTENSIONS = _kind("image/")
VIDEO_EXTENSIONS = _kind("video/")
AUDIO_EXTENSIONS = _kind("audio/")
DOCUMENT_EXTENSIONS = _kind("application/")
MEDIA_EXTENSIONS = frozenset(MIME_TYPES)
"""Extensions (contract §6) a backend always returns as bytes, even if they decode as text."""

GENERIC_MIME = "application/octet-stream"


VIDEO_READ_NOTE = (
    "Videos come back as sampled frames: offset and limit are seconds to skip and to "
    f"sample (default: the first {DEFAULT_VIDEO_WINDOW} s), one frame every 2 s."
)
"""Sentence for the read_file tool description, only when :func:`video_supported`."""


def describe_read_file(base: str, *, video: bool | None = None) -> str:
    """The read_file description, advertising video only when it can be decoded.

    ``video`` should be the capability of the worker that serves reads (probe
    it there with :func:`video_supported`); None probes this process.
    """
    enabled = video_supported() if video is None else video
    return f"{base} {VIDEO_READ_NOTE}" if enabled else base


def video_supported() -> bool:
    """Whether ``av`` and ``pillow`` are installed (without importing them).

    ``find_spec`` keeps this cheap; an installed-but-broken ``av`` is reported
    as a clear error when a video is actually decoded.
    """
    try:
        return (
            importlib.util.find_spec("av") is not None
            and importlib.util.find_spec("PIL.Image") is not None
        )
    except (ImportError, ValueError):
        return False


def _extension_of(path: str) -> str:
    """Lower-cased extension of the last path component (``""`` for dotfiles)."""
    name = posixpath.basename(path)
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def media_kind(path: str, *, video: bool | None = None) -> MediaKind:
    """Content block type for binary content at ``path``.

    Unknown extensions, and videos when video support is off, are ``file``.
    ``video`` overrides the :func:`video_supported` probe.
    """
    ext = _extension_of(path)
    if ext in IMAGE_EXTENSIONS:
        return "image"
    if ext in AUDIO_EXTENSIONS:
        return "audio"
    if ext in DOCUMENT_EXTENSIONS:
        return "document"
    if ext in VIDEO_EXTENSIONS:
        enabled = video_supported() if video is None else video
        return "video" if enabled else "file"
    return "file"


def is_media_path(path: str) -> bool:
    """True when ``path``'s extension (case-insensitive) is a media type: read as bytes."""
    return _extension_of(path) in MEDIA_EXTENSIONS


def mime_type_for(path: str) -> str:
    return MIME_TYPES.get(_extension_of(path), GENERIC_MIME)
