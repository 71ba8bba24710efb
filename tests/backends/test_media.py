"""Media reads (contract §6): content blocks for binary files, sampled frames for videos.

All media is generated here: images with pillow, audio with the stdlib ``wave``
module, a PDF with pillow, videos encoded with av. Each video frame is painted
one solid colour that encodes its frame index, so a test can tell from the
decoded JPEG exactly which source frame the sampler picked.
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import wave
from pathlib import Path

import av
import pytest
from PIL import Image, ImageStat

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.media import (
    DEFAULT_VIDEO_LIMITS,
    VideoLimits,
    format_timestamp,
    media_blocks,
    video_frames,
)
from filegate.kernel.media import MediaOutcome
from filegate.kernel.media_types import (
    MIME_TYPES,
    VIDEO_READ_NOTE,
    describe_read_file,
    media_kind,
    video_supported,
)
from filegate.kernel.messages import MediaBlock, TextBlock
from filegate.kernel.protocol import ReadResult
from filegate.kernel.state import StateBackend

# --------------------------------------------------------------------------- generators


def index_colour(index: int) -> tuple[int, int, int]:
    """Frame ``index`` (0..255) as a colour with 16-step channels (survives lossy codecs)."""
    return ((index % 16) * 16 + 8, (index // 16) * 16 + 8, 128)


def colour_index(jpeg: bytes) -> int:
    red, green, _ = ImageStat.Stat(Image.open(io.BytesIO(jpeg)).convert("RGB")).mean
    return round((green - 8) / 16) * 16 + round((red - 8) / 16)


def encode_video(
    seconds: float,
    fps: int,
    size: tuple[int, int] = (64, 48),
    *,
    fmt: str = "mp4",
    codec: str = "mpeg4",
    gop: int | None = None,
    noise: bool = False,
) -> bytes:
    """A real video whose frame ``i`` is painted ``index_colour(i)`` (or random noise)."""
    out = io.BytesIO()
    with av.open(out, mode="w", format=fmt) as container:
        # A fixed keyframe interval: solid-colour frames would all be scene cuts otherwise.
        options = {"g": str(gop), "sc_threshold": "1000000000"} if gop else {}
        stream = container.add_stream(codec, rate=fps, options=options)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = 40_000_000 if noise else 2_000_000
        for i in range(round(seconds * fps)):
            if noise:
                image = Image.frombytes("RGB", size, os.urandom(size[0] * size[1] * 3))
            else:
                image = Image.new("RGB", size, index_colour(i))
            for packet in stream.encode(av.VideoFrame.from_image(image)):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return out.getvalue()


def image_bytes(fmt: str, size: tuple[int, int] = (40, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 60)).save(out, format=fmt)
    return out.getvalue()


def wav_bytes(seconds: float = 0.2, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(bytes(int(seconds * rate) * 2))
    return out.getvalue()


def binary(path: str, data: bytes) -> ReadResult:
    return ReadResult(path=path, data=data, encoding="base64", size=len(data))


def frames_of(result: MediaOutcome) -> list[tuple[str, bytes]]:
    """(``Frame at`` label, JPEG bytes) pairs, checking the text-then-image layout."""
    blocks = result.frames
    assert len(blocks) % 2 == 0
    pairs = []
    for label, image in zip(blocks[::2], blocks[1::2], strict=True):
        assert isinstance(label, TextBlock)
        assert isinstance(image, MediaBlock)
        assert image.type == "image" and image.mime_type == "image/jpeg"
        pairs.append((label.text, base64.b64decode(image.base64)))
    return pairs


def frame_times(result: MediaOutcome) -> list[str]:
    return [label.removeprefix("Frame at t=") for label, _ in frames_of(result)]


def frame_indices(result: MediaOutcome) -> list[int]:
    return [colour_index(jpeg) for _, jpeg in frames_of(result)]


@pytest.fixture(scope="module")
def clip() -> bytes:
    """12 s at 10 fps, 64x48: frame i is shown at t = i / 10."""
    return encode_video(12, 10)


@pytest.fixture(scope="module")
def long_clip() -> bytes:
    """140 s at 1 fps, 32x24: frame i is shown at t = i."""
    return encode_video(140, 1, (32, 24))


# ----------------------------------------------------------------- images, audio, documents


@pytest.mark.parametrize(
    ("name", "fmt", "mime"),
    [
        ("pic.png", "PNG", "image/png"),
        ("pic.jpg", "JPEG", "image/jpeg"),
        ("pic.JPEG", "JPEG", "image/jpeg"),
        ("anim.gif", "GIF", "image/gif"),
        ("pic.webp", "WEBP", "image/webp"),
    ],
)
def test_image_becomes_one_image_block(name: str, fmt: str, mime: str) -> None:
    data = image_bytes(fmt)
    result = media_blocks(f"/img/{name}", binary(f"/img/{name}", data))
    assert result is not None and not result.is_error and result.kind == "image"
    assert isinstance(result.content, list) and len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, MediaBlock)
    assert (block.type, block.mime_type, block.path) == ("image", mime, f"/img/{name}")
    assert base64.b64decode(block.base64) == data
    assert Image.open(io.BytesIO(base64.b64decode(block.base64))).format == fmt
    assert result.frames == []


def test_wav_becomes_audio_block() -> None:
    data = wav_bytes()
    result = media_blocks("/a/tone.wav", binary("/a/tone.wav", data))
    assert result is not None
    block = result.content[0] if isinstance(result.content, list) else None
    assert isinstance(block, MediaBlock)
    assert (block.type, block.mime_type) == ("audio", "audio/wav")
    assert base64.b64decode(block.base64) == data


def test_pdf_becomes_document_block() -> None:
    data = image_bytes("PDF")
    assert data.startswith(b"%PDF")
    result = media_blocks("/docs/report.pdf", binary("/docs/report.pdf", data))
    assert result is not None
    block = result.content[0] if isinstance(result.content, list) else None
    assert isinstance(block, MediaBlock)
    assert (block.type, block.mime_type) == ("document", "application/pdf")
    assert base64.b64decode(block.base64) == data


@pytest.mark.parametrize(
    ("ext", "kind", "mime"),
    [
        (".heic", "image", "image/heic"),
        (".heif", "image", "image/heif"),
        (".mp3", "audio", "audio/mpeg"),
        (".aiff", "audio", "audio/aiff"),
        (".aac", "audio", "audio/aac"),
        (".ogg", "audio", "audio/ogg"),
        (".flac", "audio", "audio/flac"),
        (".ppt", "document", "application/vnd.ms-powerpoint"),
        (
            ".pptx",
            "document",
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        ),
    ],
)
def test_block_type_and_mime_follow_the_extension(ext: str, kind: str, mime: str) -> None:
    data = b"\x00\x01binary\xff" * 10
    result = media_blocks(f"/m/file{ext}", binary(f"/m/file{ext}", data))
    assert result is not None
    block = result.content[0] if isinstance(result.content, list) else None
    assert isinstance(block, MediaBlock)
    assert (block.type, block.mime_type) == (kind, mime)


def test_every_spec_extension_has_a_kind_and_a_mime() -> None:
    spec = {
        "image": ".png .jpg .jpeg .gif .webp .heic .heif",
        "video": ".mp4 .mpeg .mov .avi .flv .mpg .webm .wmv .3gpp .mkv",
        "audio": ".wav .mp3 .aiff .aac .ogg .flac",
        "document": ".pdf .ppt .pptx",
    }
    for kind, extensions in spec.items():
        for ext in extensions.split():
            assert media_kind(f"/x/a{ext}", video=True) == kind
            assert media_kind(f"/x/A{ext.upper()}", video=True) == kind
            assert ext in MIME_TYPES
    assert set(MIME_TYPES) == {e for exts in spec.values() for e in exts.split()}


def test_unknown_binary_is_a_generic_file_block() -> None:
    data = bytes(range(256))
    for path in ("/bin/blob.dat", "/bin/noext", "/bin/.hidden"):
        result = media_blocks(path, binary(path, data))
        assert result is not None and result.kind == "file"
        block = result.content[0] if isinstance(result.content, list) else None
        assert isinstance(block, MediaBlock)
        assert (block.type, block.mime_type) == ("file", "application/octet-stream")
        assert base64.b64decode(block.base64) == data


def test_empty_binary_file_is_a_reminder_not_an_empty_block() -> None:
    result = media_blocks("/img/empty.png", binary("/img/empty.png", b""))
    assert result is not None and not result.is_error
    assert result.content == "System reminder: the file /img/empty.png exists but is empty."


def test_text_results_and_errors_are_left_to_the_text_path() -> None:
    assert media_blocks("/a.png", ReadResult(path="/a.png", lines=["x"], total_lines=1)) is None
    missing = ReadResult(path="/a.png", error="not found", code="file_not_found")
    assert media_blocks("/a.png", missing) is None


# ----------------------------------------------------------------- encoding beats extension


def test_text_content_with_a_png_name_is_text_state_backend() -> None:
    backend = StateBackend()
    assert backend.write("/notes.png", "first line\nsecond line\n").ok
    result = backend.read("/notes.png")
    assert result.ok and result.data is None
    assert media_blocks("/notes.png", result) is None  # the caller's text path renders it


def test_utf8_bytes_with_a_png_name_render_as_numbered_text() -> None:
    data = "".join(f"line {i}\n" for i in range(1, 8)).encode()
    result = media_blocks(
        "/notes.png",
        ReadResult(path="/notes.png", data=data, encoding="utf-8"),
        offset=2,
        limit=3,
    )
    assert result is not None and result.kind == "text" and not result.is_error
    assert isinstance(result.content, str)
    assert result.content.splitlines()[:3] == ["3  line 3", "4  line 4", "5  line 5"]
    assert "2 lines remaining from offset 5" in result.content


def test_base64_content_with_a_txt_name_is_binary_state_backend() -> None:
    png = image_bytes("PNG")
    backend = StateBackend()
    assert backend.upload([("/readme.txt", png)])[0].ok
    result = backend.read("/readme.txt")
    assert result.encoding == "base64"
    shown = media_blocks("/readme.txt", result)
    assert shown is not None and shown.kind == "file"
    block = shown.content[0] if isinstance(shown.content, list) else None
    assert isinstance(block, MediaBlock) and base64.b64decode(block.base64) == png


def test_real_files_on_disk(tmp_path: Path) -> None:
    png = image_bytes("PNG")
    (tmp_path / "shot.png").write_bytes(png)
    (tmp_path / "data.txt").write_bytes(b"\x00\xffnot text\x00")
    backend = FilesystemBackend(tmp_path)
    image = media_blocks("/shot.png", backend.read("/shot.png"))
    assert image is not None and image.kind == "image"
    other = media_blocks("/data.txt", backend.read("/data.txt"))
    assert other is not None and other.kind == "file"
    block = other.content[0] if isinstance(other.content, list) else None
    assert isinstance(block, MediaBlock)
    assert base64.b64decode(block.base64) == b"\x00\xffnot text\x00"


# --------------------------------------------------------------------------- video sampling


def test_timestamp_format() -> None:
    assert format_timestamp(0) == "00:00:00.000"
    assert format_timestamp(3723.5) == "01:02:03.500"
    assert format_timestamp(59.9996) == "00:01:00.000"


def test_default_window_samples_one_frame_every_two_seconds(clip: bytes) -> None:
    result = media_blocks("/v/clip.mp4", binary("/v/clip.mp4", clip), offset=0, limit=100)
    assert result is not None and result.kind == "video" and not result.is_error
    assert frame_times(result) == [f"00:00:{s:02d}.000" for s in (0, 2, 4, 6, 8, 10)]
    assert frame_indices(result) == [0, 20, 40, 60, 80, 100]
    assert isinstance(result.content, str)
    assert "sampled 6 frames" in result.content
    assert "12.000 s" in result.content and "64x48" in result.content
    assert "next message" in result.content
    assert "continue with" not in result.content  # the whole video was covered


def test_offset_and_limit_are_seconds(clip: bytes) -> None:
    result = video_frames("/v/clip.mp4", clip, offset=3, limit=4)
    assert frame_times(result) == ["00:00:03.000", "00:00:05.000"]
    assert frame_indices(result) == [30, 50]
    assert isinstance(result.content, str)
    assert "[3.000 s, 7.000 s)" in result.content
    assert "continue with offset=7" in result.content  # 5 s of video remain


def test_window_past_the_end_is_clipped(clip: bytes) -> None:
    result = video_frames("/v/clip.mp4", clip, offset=9, limit=50)
    assert frame_times(result) == ["00:00:09.000", "00:00:11.000"]
    assert frame_indices(result) == [90, 110]
    assert isinstance(result.content, str) and "continue with" not in result.content


def test_offset_past_the_end_names_the_length(clip: bytes) -> None:
    result = video_frames("/v/clip.mp4", clip, offset=30, limit=10)
    assert result.is_error and result.frames == []
    assert isinstance(result.content, str)
    assert "past the end" in result.content and "12.000 s" in result.content
    assert "offset below 12" in result.content


@pytest.mark.parametrize("limit", [0, -5])
def test_non_positive_limit_is_an_error(clip: bytes, limit: int) -> None:
    result = video_frames("/v/clip.mp4", clip, offset=0, limit=limit)
    assert result.is_error and result.frames == []
    assert isinstance(result.content, str) and f"limit={limit}" in result.content


def test_negative_offset_reads_from_the_start_and_says_so(clip: bytes) -> None:
    result = video_frames("/v/clip.mp4", clip, offset=-4, limit=3)
    assert frame_indices(result) == [0, 20]
    assert isinstance(result.content, str) and "negative" in result.content


@pytest.mark.parametrize(
    ("fmt", "codec", "ext", "fps", "seconds"),
    [
        ("matroska", "mpeg4", ".mkv", 10, 6),
        ("webm", "libvpx", ".webm", 10, 6),
        ("avi", "mpeg4", ".avi", 10, 6),
        ("mov", "mpeg4", ".mov", 10, 6),
        ("mpeg", "mpeg2video", ".mpg", 25, 6),  # MPEG-PS starts at a non-zero timestamp
    ],
)
def test_other_containers(fmt: str, codec: str, ext: str, fps: int, seconds: int) -> None:
    data = encode_video(seconds, fps, fmt=fmt, codec=codec)
    result = media_blocks(f"/v/c{ext}", binary(f"/v/c{ext}", data), limit=100)
    assert result is not None
    assert not result.is_error, result.content
    assert frame_times(result) == ["00:00:00.000", "00:00:02.000", "00:00:04.000"]
    assert frame_indices(result) == [0, 2 * fps, 4 * fps]


def test_default_window_is_100_seconds(long_clip: bytes) -> None:
    result = media_blocks("/v/long.mp4", binary("/v/long.mp4", long_clip))
    assert result is not None and not result.is_error
    assert frame_indices(result) == list(range(0, 100, 2))
    assert isinstance(result.content, str)
    assert "40.000 s of video remain: continue with offset=100" in result.content


def test_frame_cap_cuts_the_window_and_says_where_to_continue(long_clip: bytes) -> None:
    """A 200 s window wants 70 frames: the cap stops at 64 (t=126)."""
    first = video_frames("/v/long.mp4", long_clip, offset=0, limit=200)
    assert len(frames_of(first)) == DEFAULT_VIDEO_LIMITS.max_frames == 64
    assert frame_indices(first) == list(range(0, 128, 2))
    assert isinstance(first.content, str)
    assert "64-frame limit" in first.content and "continue with offset=128" in first.content
    rest = video_frames("/v/long.mp4", long_clip, offset=128, limit=72)
    assert frame_indices(rest) == [128, 130, 132, 134, 136, 138]
    assert isinstance(rest.content, str) and "continue with" not in rest.content


def test_byte_cap_stops_before_the_frame_that_does_not_fit(clip: bytes) -> None:
    full = video_frames("/v/clip.mp4", clip)
    sizes = [len(block.base64) for block in full.frames if isinstance(block, MediaBlock)]
    budget = sum(sizes[:3]) + 1
    capped = video_frames("/v/clip.mp4", clip, limits=VideoLimits(max_output_bytes=budget))
    assert frame_indices(capped) == [0, 20, 40]
    assert isinstance(capped.content, str)
    assert f"{budget}-byte output limit" in capped.content
    assert "continue with offset=6" in capped.content
    resumed = video_frames("/v/clip.mp4", clip, offset=6, limit=94)
    assert frame_indices(resumed) == [60, 80, 100]


@pytest.mark.slow
def test_default_four_mib_cap_on_full_hd_noise() -> None:
    """Full-HD noise frames are large JPEGs: the real 4 MiB budget cuts the window."""
    data = encode_video(20, 1, (1920, 1080), noise=True)
    result = video_frames("/v/noise.mp4", data, limit=20)
    images = [block for block in result.frames if isinstance(block, MediaBlock)]
    assert 1 <= len(images) < 10
    total = sum(len(block.base64) for block in images)
    assert total <= 4 * 1024 * 1024
    assert isinstance(result.content, str)
    resume = 2 * len(images)
    assert f"output limit: continue with offset={resume} " in result.content


def test_decode_time_cap_keeps_the_first_frame_and_says_where_to_continue(clip: bytes) -> None:
    result = video_frames("/v/clip.mp4", clip, limits=VideoLimits(max_decode_seconds=0))
    assert frame_indices(result) == [0]
    assert isinstance(result.content, str)
    assert "decode-time limit" in result.content and "continue with offset=2" in result.content


def test_decode_time_cap_before_any_frame_is_an_error() -> None:
    """Keyframes every 3 s: a seek to 5 s lands on 3 s, so decoding must run to reach 5 s."""
    data = encode_video(12, 10, gop=30)
    result = video_frames(
        "/v/clip.mp4", data, offset=5, limit=4, limits=VideoLimits(max_decode_seconds=0)
    )
    assert result.is_error and result.frames == []
    assert isinstance(result.content, str) and "decode budget" in result.content
    assert frame_indices(video_frames("/v/clip.mp4", data, offset=5, limit=4)) == [50, 70]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("size", "expected"),
    [((4000, 3000), (1440, 1080)), ((1000, 3000), (360, 1080)), ((4000, 1000), (1920, 480))],
)
def test_huge_frames_are_downscaled_to_fit_full_hd(
    size: tuple[int, int], expected: tuple[int, int]
) -> None:
    data = encode_video(3, 1, size)
    result = video_frames("/v/big.mp4", data)
    pairs = frames_of(result)
    assert len(pairs) == 2
    for _, jpeg in pairs:
        image = Image.open(io.BytesIO(jpeg))
        assert image.format == "JPEG"
        assert image.size == expected
    assert isinstance(result.content, str) and f"{size[0]}x{size[1]}" in result.content


def test_small_frames_are_not_upscaled(clip: bytes) -> None:
    _, jpeg = frames_of(video_frames("/v/clip.mp4", clip, limit=1))[0]
    assert Image.open(io.BytesIO(jpeg)).size == (64, 48)


def test_corrupt_video_is_a_clear_error() -> None:
    result = media_blocks("/v/broken.mp4", binary("/v/broken.mp4", os.urandom(4096)))
    assert result is not None and result.is_error and result.frames == []
    assert isinstance(result.content, str)
    assert result.content.startswith("Error: cannot read /v/broken.mp4 as a video")


def test_truncated_mp4_is_a_clear_error(clip: bytes) -> None:
    """The encoder writes the mp4 index at the end: without it nothing can be decoded."""
    for cut in (len(clip) // 2, 100):
        result = video_frames("/v/cut.mp4", clip[:cut])
        assert result.is_error and result.frames == []
        assert isinstance(result.content, str)
        assert "cannot read /v/cut.mp4 as a video" in result.content


def test_damaged_stream_keeps_the_frames_before_the_damage() -> None:
    """Zeroing an AVI's second half: early frames decode, and the summary says why it stopped."""
    data = bytearray(encode_video(12, 10, fmt="avi"))
    half = len(data) // 2
    data[half:] = bytes(len(data) - half)
    result = video_frames("/v/damaged.avi", bytes(data))
    assert not result.is_error
    indices = frame_indices(result)
    assert 1 <= len(indices) < 6 and indices == list(range(0, 20 * len(indices), 20))
    assert isinstance(result.content, str)
    assert "Decoding stopped after t=" in result.content
    assert "truncated or damaged" in result.content
    beyond = video_frames("/v/damaged.avi", bytes(data), offset=10, limit=2)
    assert beyond.is_error and isinstance(beyond.content, str)
    assert "truncated or damaged" in beyond.content


def test_video_without_support_is_a_generic_file_block(clip: bytes) -> None:
    result = media_blocks("/v/clip.mp4", binary("/v/clip.mp4", clip), video=False)
    assert result is not None and result.kind == "file" and result.frames == []
    block = result.content[0] if isinstance(result.content, list) else None
    assert isinstance(block, MediaBlock)
    assert (block.type, block.mime_type) == ("file", "video/mp4")
    assert base64.b64decode(block.base64) == clip


def test_video_supported_here() -> None:
    assert video_supported()


def test_read_file_description_mentions_video_only_when_supported() -> None:
    base = "Read a file."
    assert describe_read_file(base, video=False) == base
    assert describe_read_file(base, video=True) == f"{base} {VIDEO_READ_NOTE}"
    assert describe_read_file(base) == f"{base} {VIDEO_READ_NOTE}"  # av is installed here
    assert "seconds" in VIDEO_READ_NOTE and "2 s" in VIDEO_READ_NOTE


def test_video_supported_is_false_without_av() -> None:
    """A real interpreter in which ``av`` cannot be imported."""
    script = (
        "import sys\n"
        "sys.modules['av'] = None\n"
        "from filegate.backends.media import media_blocks\n"
        "from filegate.kernel.media_types import video_supported\n"
        "from filegate.kernel.protocol import ReadResult\n"
        "from filegate.kernel.media_types import describe_read_file\n"
        "r = media_blocks('/v.mp4', ReadResult(path='/v.mp4', data=b'\\x00\\x01', "
        "encoding='base64'))\n"
        "print(video_supported(), r.kind, r.content[0].type, r.content[0].mime_type, "
        "describe_read_file('Read.') == 'Read.')\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "file", "file", "video/mp4", "True"]


def test_importing_backends_loads_neither_av_nor_temporal() -> None:
    """Video support is imported lazily and ``backends`` stays Temporal-free (contract §1)."""
    script = (
        "import sys\n"
        "import filegate.backends, filegate.backends.media\n"
        "print(*(name in sys.modules for name in ('av', 'PIL.Image', 'temporalio')))\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False", "False"]
