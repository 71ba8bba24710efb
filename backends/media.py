"""Media reads (contract §6): binary read results become content blocks for the model.

``read_file`` on an image, audio file or document returns one content block
(type, base64, mime). A video is sampled instead: ``offset``/``limit`` are
seconds, one JPEG frame every 2 s, each preceded by a ``Frame at t=...`` text
block, under caps on frames, decode time and output bytes so one call can
never flood the context or pin a worker. The frames do not go in the tool
result itself (providers want a turn's tool results contiguous): the caller
sends them as a user message after the turn's tool results, and the tool
result carries a short summary.

The backend's ``encoding`` decides text versus binary; the extension only
picks the block type and mime. Video support is optional (``av`` + ``pillow``,
the ``video`` extra) and imported lazily, only when a video is decoded. Video
decoding is CPU-heavy and bounded by wall-clock time, so it belongs in an
activity, never in workflow code.

The block models live in ``activities.messages``; they are imported where a
block is built, not at module level, because importing the ``activities``
package loads Temporal and ``backends`` must stay importable without it.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from filegate.kernel import media as kernel_media
from filegate.kernel.formatting import format_error
from filegate.kernel.limits import DEFAULT_VIDEO_WINDOW, reads_nothing
from filegate.kernel.media import MediaOutcome, b64
from filegate.kernel.media_types import media_kind
from filegate.kernel.protocol import ReadResult

if TYPE_CHECKING:
    from av.container import InputContainer
    from av.video.frame import VideoFrame
    from av.video.stream import VideoStream

    from filegate.kernel.messages import ContentBlock

FRAME_MIME = "image/jpeg"


@dataclass(frozen=True)
class VideoLimits:
    """Sampling rate and the caps that bound one video read (contract §6)."""

    frame_interval: float = 2.0
    """Seconds between sampled frames (0.5 fps)."""
    max_frames: int = 64
    max_decode_seconds: float = 10.0
    """Wall-clock budget for demuxing, decoding and encoding frames."""
    max_output_bytes: int = 4 * 1024 * 1024
    """Budget for the base64 text of all frames (what the model request carries)."""
    max_width: int = 1920
    max_height: int = 1080
    jpeg_quality: int = 85


DEFAULT_VIDEO_LIMITS = VideoLimits()

_FALLBACK_QUALITIES = (60, 35)
"""Qualities tried when the *first* frame alone is over the byte budget, so a read
always makes progress instead of pointing the model back at the same offset."""


# --------------------------------------------------------------------------- classification


def _b64_len(size: int) -> int:
    return 4 * math.ceil(size / 3)


# --------------------------------------------------------------------------- entry point


def media_blocks(
    path: str,
    result: ReadResult,
    *,
    offset: int = 0,
    limit: int = DEFAULT_VIDEO_WINDOW,
    video: bool | None = None,
    limits: VideoLimits = DEFAULT_VIDEO_LIMITS,
) -> MediaOutcome | None:
    """:func:`filegate.kernel.media.media_blocks` with video frames sampled here.

    ``path`` is the path shown to the model (virtual). ``offset``/``limit``
    are the model's read_file arguments: lines for bytes that turn out to be
    UTF-8 text, seconds for a video. ``video`` overrides the installed-check.
    """
    sampler = (
        functools.partial(video_frames, limits=limits)
        if media_kind(path, video=video) == "video"
        else None
    )
    return kernel_media.media_blocks(path, result, offset=offset, limit=limit, video=sampler)


# --------------------------------------------------------------------------- video


def format_timestamp(seconds: float) -> str:
    """``HH:MM:SS.mmm`` (milliseconds rounded)."""
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{millis:03d}"


def _seconds(value: float) -> str:
    """Seconds as the model should pass them back: integral values without a point."""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


class VideoDecodeError(Exception):
    """The bytes are not a decodable video (message is shown to the model)."""


@dataclass
class _Sample:
    time: float
    jpeg: bytes
    width: int
    height: int


@dataclass
class _Sampling:
    """What the sampler produced and why it stopped."""

    samples: list[_Sample] = field(default_factory=list)
    duration: float | None = None
    size: tuple[int, int] = (0, 0)
    stop: Literal["done", "frames", "time", "bytes", "damaged"] = "done"
    resume_at: float | None = None
    """Offset (seconds) that continues where a cap cut the window."""
    damage: str = ""
    decoded_until: float | None = None
    """Time of the last decoded frame (where damage stopped the decoder)."""


def video_frames(
    path: str,
    data: bytes,
    *,
    offset: int = 0,
    limit: int = DEFAULT_VIDEO_WINDOW,
    limits: VideoLimits = DEFAULT_VIDEO_LIMITS,
) -> MediaOutcome:
    """Sample ``[offset, offset + limit)`` seconds of a video into JPEG frames."""
    if reads_nothing(limit):
        return _error(
            f"limit={limit} asks for no video. For videos limit is the number of seconds "
            f"to sample; pass limit >= 1 (default {DEFAULT_VIDEO_WINDOW})."
        )
    note = ""
    if offset < 0:
        note = f"[Note: offset {offset} is negative; reading from the start (offset 0).]\n"
        offset = 0
    try:
        sampling = _sample(data, float(offset), float(offset + limit), limits)
    except VideoDecodeError as exc:
        return _error(f"cannot read {path} as a video: {exc}")
    if not sampling.samples:
        if sampling.stop == "time":
            return _error(
                f"decoding {path} did not reach t={_seconds(offset)} s within the "
                f"{limits.max_decode_seconds:g} s decode budget. Try a different offset."
            )
        if sampling.stop == "damaged":
            return _error(f"cannot read {path} as a video: {sampling.damage}.")
        if sampling.stop == "bytes":
            return _error(
                f"a single frame of {path} is over the {limits.max_output_bytes}-byte "
                "output budget even at low quality."
            )
        if sampling.duration is None:
            return _error(f"offset {offset} s is past the last frame of {path}.")
        return _error(
            f"offset {offset} s is past the end of {path}, which is "
            f"{sampling.duration:.3f} s long. Use an offset below {math.ceil(sampling.duration)}."
        )
    from filegate.kernel.messages import MediaBlock, TextBlock  # see module docstring

    frames: list[ContentBlock] = []
    for sample in sampling.samples:
        frames.append(TextBlock(text=f"Frame at t={format_timestamp(sample.time)}"))
        frames.append(
            MediaBlock(type="image", base64=b64(sample.jpeg), mime_type=FRAME_MIME, path=path)
        )
    summary = note + _summary(path, offset, limit, sampling, limits)
    return MediaOutcome(content=summary, frames=frames, kind="video")


def _error(message: str) -> MediaOutcome:
    return MediaOutcome(
        content=format_error(message, "io_error").text, is_error=True, kind="video", code="io_error"
    )


def _summary(path: str, offset: int, limit: int, sampling: _Sampling, limits: VideoLimits) -> str:
    duration = sampling.duration
    end = offset + limit if duration is None else min(offset + limit, duration)
    window = f"the first {_seconds(end)} s" if offset == 0 else f"[{offset:.3f} s, {end:.3f} s)"
    length = f"{duration:.3f} s, " if duration is not None else ""
    width, height = sampling.size
    count = len(sampling.samples)
    first, last = sampling.samples[0].time, sampling.samples[-1].time
    lines = [
        f"Video {path} ({length}{width}x{height}): sampled {count} "
        f"frame{'s' if count != 1 else ''} from {window}, one every "
        f"{limits.frame_interval:g} s (t={format_timestamp(first)} to "
        f"t={format_timestamp(last)}). The frames follow in the next message."
    ]
    resume = sampling.resume_at
    if sampling.stop == "damaged":
        until = sampling.decoded_until if sampling.decoded_until is not None else last
        lines.append(f"[Decoding stopped after t={format_timestamp(until)}: {sampling.damage}.]")
    elif sampling.stop != "done" and resume is not None:
        reason = {
            "frames": f"the {limits.max_frames}-frame limit",
            "time": f"the {limits.max_decode_seconds:g} s decode-time limit",
            "bytes": f"the {limits.max_output_bytes}-byte output limit",
        }[sampling.stop]
        lines.append(
            f"[Stopped early at {reason}: continue with offset={_seconds(resume)} "
            "to read the rest of the window.]"
        )
    elif duration is not None and offset + limit < duration:
        lines.append(
            f"[{duration - (offset + limit):.3f} s of video remain: continue with "
            f"offset={offset + limit}.]"
        )
    return "\n".join(lines)


def _open(data: bytes) -> tuple[InputContainer, VideoStream]:
    try:
        import av
        from PIL import Image  # noqa: F401  (fail here, before decoding, if pillow is broken)
    except ImportError as exc:  # installed-but-broken counts as unsupported
        raise VideoDecodeError(f"video support is not installed correctly ({exc})") from exc
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise VideoDecodeError(f"the data is not a recognised video format ({_why(exc)})") from exc
    if not container.streams.video:
        container.close()
        raise VideoDecodeError("the file has no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    return container, stream


def _stream_times(container: InputContainer, stream: VideoStream) -> tuple[float, float | None]:
    """(start time, duration) in seconds; duration None when the file does not say."""
    base = float(stream.time_base) if stream.time_base is not None else 0.0
    start = stream.start_time * base if stream.start_time is not None else 0.0
    if stream.duration is not None and base:
        return start, stream.duration * base
    if container.duration is not None:
        return start, container.duration / 1_000_000
    return start, None


def _fit(width: int, height: int, limits: VideoLimits) -> tuple[int, int]:
    """Largest size with the same aspect ratio inside the box (never upscales)."""
    scale = min(1.0, limits.max_width / width, limits.max_height / height)
    if scale >= 1.0:
        return width, height
    return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))


def _jpeg(frame: VideoFrame, size: tuple[int, int], quality: int) -> bytes:
    image = frame.to_image(width=size[0], height=size[1])
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def _decoded(
    container: InputContainer, stream: VideoStream, start: float, offset: float
) -> Iterator[VideoFrame]:
    """Frames from (a keyframe at or before) ``offset``; from the top if seeking fails."""
    if offset > 0 and stream.time_base is not None:
        import av

        # Unseekable input: decode from where the demuxer is (the top) instead.
        with contextlib.suppress(av.FFmpegError):
            container.seek(int((start + offset) / stream.time_base), stream=stream, backward=True)
    yield from container.decode(stream)


def _sample(data: bytes, offset: float, end: float, limits: VideoLimits) -> _Sampling:
    """Pick the first frame at or after each target time ``offset + k * interval``."""
    import av

    began = time.monotonic()
    container, stream = _open(data)
    out = _Sampling()
    try:
        start, out.duration = _stream_times(container, stream)
        if out.duration is not None:
            end = min(end, out.duration)
        out.size = (stream.codec_context.width, stream.codec_context.height)
        target = offset
        used = 0
        last_seen: float | None = None
        frames = _decoded(container, stream, start, offset)
        while target < end:
            try:
                frame = next(frames, None)
            except av.FFmpegError as exc:
                out.stop, out.damage = "damaged", f"the data is damaged ({_why(exc)})"
                break
            if frame is None:
                out.damage = _ended_early(stream, last_seen, out.duration)
                out.stop = "damaged" if out.damage else "done"
                break
            if frame.time is not None:
                last_seen = out.decoded_until = frame.time - start
            if last_seen is not None and last_seen >= target - 1e-3:
                t = max(last_seen, 0.0)
                size = _fit(frame.width, frame.height, limits)
                out.size = (frame.width, frame.height)
                jpeg = _encode_within(
                    frame, size, limits, limits.max_output_bytes - used, first=not out.samples
                )
                if jpeg is None:
                    out.stop, out.resume_at = "bytes", target
                    break
                used += _b64_len(len(jpeg))
                out.samples.append(_Sample(t, jpeg, *size))
                while target <= t + 1e-3:
                    target += limits.frame_interval
                if target < end and len(out.samples) >= limits.max_frames:
                    out.stop, out.resume_at = "frames", target
                    break
            if time.monotonic() - began > limits.max_decode_seconds and target < end:
                out.stop, out.resume_at = "time", target
                break
    finally:
        container.close()
    return out


def _why(exc: Exception) -> str:
    """FFmpeg's own reason without the errno and file-name decoration."""
    reason = getattr(exc, "strerror", None)
    return str(reason) if reason else str(exc)


def _ended_early(stream: VideoStream, last_seen: float | None, duration: float | None) -> str:
    """Why frames stopped well before the stated duration, or ``""`` if they did not.

    "Well before" allows two frame intervals of slack so sparse or variable
    frame rates do not read as damage.
    """
    if duration is None or last_seen is None:
        return ""
    rate = float(stream.average_rate) if stream.average_rate else 0.0
    slack = (2.0 / rate if rate > 0 else 2.0) + 0.5
    if duration - last_seen <= slack:
        return ""
    return (
        f"no decodable frames follow, although the file claims to last {duration:.3f} s "
        "(it is probably truncated or damaged)"
    )


def _encode_within(
    frame: VideoFrame, size: tuple[int, int], limits: VideoLimits, budget: int, *, first: bool
) -> bytes | None:
    """The frame as JPEG if its base64 fits ``budget``; the first frame may drop quality."""
    qualities = (limits.jpeg_quality, *_FALLBACK_QUALITIES) if first else (limits.jpeg_quality,)
    for quality in qualities:
        jpeg = _jpeg(frame, size, quality)
        if _b64_len(len(jpeg)) <= budget:
            return jpeg
    return None
