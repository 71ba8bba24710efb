"""contract §6 media reads end to end: real worker, real Filesystem backend, real files.

A PNG comes back from read_file as one image block; a short MP4 (encoded here
with ``av``) yields its sampled frames as one user message placed after all of
the turn's tool results.
"""

from __future__ import annotations

import base64
import io
import uuid
from pathlib import Path
from typing import Any

import av
import pytest
from PIL import Image
from temporalio.client import Client

from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.messages import ModelSpec
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec

pytestmark = pytest.mark.services


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def _mp4(path: Path, seconds: int = 5, fps: int = 10) -> None:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(seconds * fps):
            image = Image.new("RGB", (64, 48), (i * 4 % 256, 80, 160))
            for packet in stream.encode(av.VideoFrame.from_image(image)):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


async def test_png_and_video_frames(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    png = _png()
    (root / "pic.png").write_bytes(png)
    _mp4(root / "clip.mp4")
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": "v", "name": "read_file", "args": {"file_path": "/clip.mp4"}},
                {"id": "p", "name": "read_file", "args": {"file_path": "/pic.png"}},
            ]
        },
        {"content": "seen"},
    ]
    tools_queue, agent_queue = f"tools-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    input = AgentInput(
        task="look",
        model=ModelSpec(provider="scripted", options={"script": {"turns": turns}}),
        backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=tools_queue)),
    )
    backend = FilesystemBackend(str(root), virtual_mode=True)
    async with (
        agent_worker(temporal_client, agent_queue),
        tools_worker(temporal_client, tools_queue, {"fs": backend}, tmp_path / "journal"),
    ):
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, input, id=f"wf-{uuid.uuid4().hex[:8]}", task_queue=agent_queue
        )
    roles = [m["role"] for m in result.transcript]
    assert roles == ["user", "assistant", "tool", "tool", "user", "assistant"], roles
    tools = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
    image = tools["p"]["content"]
    assert isinstance(image, list) and len(image) == 1
    assert image[0]["type"] == "image" and image[0]["mime_type"] == "image/png"
    assert base64.b64decode(image[0]["base64"]) == png

    assert tools["v"]["status"] == "success"
    frames = result.transcript[4]["content"]
    texts = [b["text"] for b in frames if b["type"] == "text"]
    images = [b for b in frames if b["type"] == "image"]
    # 5 s at one frame per 2 s: t=0, 2, 4.
    assert [t for t in texts if t.startswith("Frame at")] == [
        "Frame at t=00:00:00.000",
        "Frame at t=00:00:02.000",
        "Frame at t=00:00:04.000",
    ]
    assert len(images) == 3 and all(b["mime_type"] == "image/jpeg" for b in images)
