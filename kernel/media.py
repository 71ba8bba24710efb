"""Binary read results as content blocks for the model (contract §6), without video decoding.

``read_file`` on an image, audio file or document returns one content block
(type, base64, mime); bytes the backend says are UTF-8 are shown as text,
whatever the extension claims. The table of kinds and mime types is
:mod:`filegate.kernel.media_types`.

Video is the one case that needs I/O-heavy work (decoding and sampling frames
with ``av``): that lives in :mod:`filegate.backends.media` and runs only in
activities. Here a caller may hand a :data:`VideoSampler`; without one a video
is a plain ``file`` block, which is what the workflow's in-workflow State path
gets. Pure and deterministic.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Literal, Protocol

from filegate.kernel.limits import DEFAULT_VIDEO_WINDOW
from filegate.kernel.media_types import media_kind, mime_type_for
from filegate.kernel.messages import ContentBlock, MediaBlock, MediaKind
from filegate.kernel.protocol import OutcomeCode, ReadResult
from filegate.kernel.read_format import empty_file_message, format_read, plan_read
from filegate.kernel.textops import decode_text, read_window


@dataclass(frozen=True)
class MediaOutcome:
    """What a binary read shows the model.

    ``content`` is the tool result (text, or content blocks for image/audio/
    document/file). ``frames`` holds a video's sampled frames (a ``Frame at``
    text block before each JPEG image block); the caller sends them as a user
    message after the turn's tool results. ``kind`` says which path produced it.
    """

    content: str | list[ContentBlock]
    is_error: bool = False
    frames: list[ContentBlock] = field(default_factory=list)
    kind: MediaKind | Literal["text"] = "file"
    code: OutcomeCode | None = None
    """An error's code (:data:`~filegate.kernel.protocol.OutcomeCode`)."""


class VideoSampler(Protocol):
    """Samples ``[offset, offset + limit)`` seconds of a video (``backends.media.video_frames``)."""

    def __call__(self, path: str, data: bytes, *, offset: int, limit: int) -> MediaOutcome: ...


class MediaReader(Protocol):
    """Renders a read result that carries bytes; None when it is not binary."""

    def __call__(
        self, path: str, result: ReadResult, *, offset: int, limit: int
    ) -> MediaOutcome | None: ...


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def media_blocks(
    path: str,
    result: ReadResult,
    *,
    offset: int = 0,
    limit: int = DEFAULT_VIDEO_WINDOW,
    video: VideoSampler | None = None,
) -> MediaOutcome | None:
    """Render a read result that carries bytes; None when it is not binary.

    ``path`` is the path shown to the model (virtual). ``offset``/``limit``
    are the model's read_file arguments: lines for bytes that turn out to be
    UTF-8 text, seconds for a video. A video is handed to ``video``; without
    a sampler it is a plain ``file`` block.
    """
    if result.error is not None or result.data is None:
        return None
    data = result.data
    if not data:
        return MediaOutcome(content=empty_file_message(path), kind="text")
    if result.encoding == "utf-8":
        text = decode_text(data)
        if text is not None:
            return _text_outcome(path, text, offset, limit)
    kind = media_kind(path, video=video is not None)
    if kind == "video" and video is not None:
        return video(path, data, offset=offset, limit=limit)
    block = MediaBlock(type=kind, base64=b64(data), mime_type=mime_type_for(path), path=path)
    return MediaOutcome(content=[block], kind=kind)


def _text_outcome(path: str, text: str, offset: int, limit: int) -> MediaOutcome:
    """The backend said UTF-8: show text, whatever the extension claims."""
    plan = plan_read(offset, limit)
    window = (
        ReadResult(path=path) if plan.early else read_window(path, text, plan.offset, plan.limit)
    )
    rendered = format_read(window, plan)
    return MediaOutcome(
        content=rendered.text, is_error=rendered.is_error, kind="text", code=rendered.code
    )
