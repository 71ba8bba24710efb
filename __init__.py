"""Filegate: durable, permission-gated file tools for AI agents, built on Temporal.

The facade names what most users need; everything else lives in the layers
(see ``docs/architecture.md``):

- :mod:`filegate.backends` — plain Python backends (no Temporal);
- :mod:`filegate.activities` — the ``filegate.<tool>`` and ``filegate.model`` activities;
- :mod:`filegate.workflows` — :class:`FileTools` for any workflow, :class:`AgentWorkflow`, inputs;
- :mod:`filegate.worker` — the worker roles (:func:`agent_role`, :func:`tools_role`,
  worker plugins) and the workers built from them;
- :mod:`filegate.plugin` — :class:`FilegatePlugin`, what a client and all its workers share.

:class:`TemporalDevServer` (:mod:`filegate.devstack`, the ``devstack`` extra) is a
private Temporal dev server for examples and tests.

Names load lazily, so ``import filegate`` is cheap (the workflow sandbox
re-imports it on every run).
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from filegate.activities import FileToolActivities
    from filegate.backends.filesystem import FilesystemBackend
    from filegate.devstack.servers import TemporalDevServer
    from filegate.kernel.messages import ModelSpec
    from filegate.kernel.network_rules import NetworkPermission
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.kernel.state import StateBackend
    from filegate.plugin import FilegatePlugin, connect
    from filegate.wiring.roles import agent_role, tools_role
    from filegate.wiring.tuning import WorkerTuning
    from filegate.worker import agent_worker, tools_worker
    from filegate.workflows import (
        AgentInput,
        AgentResult,
        AgentWorkflow,
        ApprovalConfig,
        BackendRef,
        BackendSpec,
        Decision,
        FileTools,
        FileToolsConfig,
        Limits,
        RouteSpec,
    )

__version__ = "0.2.0"

__getattr__, __dir__, __all__ = attach(__name__, __file__)
